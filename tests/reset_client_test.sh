#!/usr/bin/env bash
# Issue 11: a client that sends frames and resets its connection (RST, SO_LINGER 0), again
# and again while a sync run trains, never kills the ps (on main it died of SIGPIPE, exit 141,
# with no log line) and does not change the run: it ends with the checksum of a clean run.
# Each round sends two STATUS requests in one write and resets before reading the answers,
# or a PULL before registering (a protocol error the ps answers by closing), or half a frame.
source "$(dirname "$0")/lib.sh"
args=(--model mlp --epochs 1 --batch-size 128 --seed 11)
train sync 2 "$OUT/clean.json" "${args[@]}"

port=$(free_port)
start_ps ps --listen "127.0.0.1:$port" --workers 2 --summary-json "$OUT/s.json" "${args[@]}"
ps_pid=$LAST_PID
# The client is a file: a background job's standard input is /dev/null, not a here-document.
cat >"$OUT/resetter.py" <<'PY'
import socket, struct, sys, time
port = int(sys.argv[1])
def frame(header):
    return b"PSTR" + struct.pack("<HHII", 1, 0, len(header), 0) + header
status_req = frame(b"\x08\x08")                       # Header{type: STATUS_REQ}
early_pull = frame(b"\x08\x03")                        # Header{type: PULL}
rounds = [status_req + status_req, early_pull, status_req[:9]]
deadline, n, refused = time.time() + 60, 0, 0
while time.time() < deadline:
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
    except OSError:
        refused += 1
        if n > 0 and refused > 20: break   # the ps has finished and gone
        time.sleep(0.05)
        continue
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    try:
        s.sendall(rounds[n % 3])
        if n % 2: time.sleep(0.002)  # sometimes after the ps has started answering
    except OSError:
        pass
    s.close()                        # RST
    n += 1
print(f"{n} resets")
PY
start_bg resetter /usr/bin/python3 "$OUT/resetter.py" "$port"
resetter=$LAST_PID
sleep 0.5
start_worker w0 --ps "127.0.0.1:$port" --index 0
w0=$LAST_PID
start_worker w1 --ps "127.0.0.1:$port" --index 1
w1=$LAST_PID
wait_pid "$w0" 120 || fail "worker 0 exited non-zero"
wait_pid "$w1" 120 || fail "worker 1 exited non-zero"
rc=0; wait_pid "$ps_pid" 30 || rc=$?
[ $rc -eq 0 ] || fail "the ps exited with status $rc (141 is SIGPIPE)"
wait_pid "$resetter" 70 || true
resets=$(grep -o '^[0-9]* resets' "$OUT/resetter.log" || echo "0 resets")
[ "${resets%% *}" -ge 50 ] || fail "only $resets: the abuse did not happen"
c0=$(json_field "$OUT/clean.json" weights_checksum)
c1=$(json_field "$OUT/s.json" weights_checksum)
[ "$c0" = "$c1" ] || fail "checksum $c1 under resets, $c0 clean"
pass "$resets during the run; ps exit 0; checksum $c1 equals the clean run's"
echo "1 passed, 0 failed"
