#!/usr/bin/env bash
# (e) A client that sends garbage bytes is disconnected, the ps logs a short sanitized
# reason, and a real worker keeps training to the end.
source "$(dirname "$0")/lib.sh"
port=$(free_port)
start_ps ps --listen "127.0.0.1:$port" --workers 1 --epochs 1 --batch-size 128 --model mlp \
  --summary-json "$OUT/s.json"
ps_pid=$LAST_PID
start_worker w0 --ps "127.0.0.1:$port"
w0=$LAST_PID
/usr/bin/python3 - "$port" <<'PY' || fail "garbage client check failed"
import socket, struct, sys, time
port = int(sys.argv[1])
def closed_after(payload):
    for _ in range(100):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            break
        except OSError:
            time.sleep(0.1)
    s.sendall(payload)
    s.settimeout(5)
    try:
        return s.recv(1) == b""   # EOF: the ps closed us
    except ConnectionResetError:
        return True
    finally:
        s.close()
# Plain garbage, a valid prefix announcing an oversized payload, and a valid prefix followed
# by a header that is not protobuf.
assert closed_after(b"\x00\xffGET / HTTP/1.1\r\n\x01\x02" * 8), "garbage not closed"
assert closed_after(b"PSTR" + struct.pack("<HHII", 1, 0, 8, 0xFFFFFFF0)), "oversize not closed"
assert closed_after(b"PSTR" + struct.pack("<HHII", 1, 0, 8, 0) + b"\xff" * 8), "bad header not closed"
print("three bad clients were disconnected")
PY
wait_pid "$w0" 90 || fail "the real worker did not finish"
wait_pid "$ps_pid" 30 || fail "ps exited non-zero"
grep -q "closing connection from 127.0.0.1" "$OUT/ps.log" || fail "the ps did not log the bad connection"
at_least "$(json_field "$OUT/s.json" test_accuracy)" 0.75 || fail "training suffered"
pass "$(grep -m1 'closing connection' "$OUT/ps.log" | cut -c1-160)"
echo "1 passed, 0 failed"
