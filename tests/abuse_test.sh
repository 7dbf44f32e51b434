#!/usr/bin/env bash
# Issue 12: a registered client that lies cannot change the model or its figures. It takes
# worker slot 2 of 3 and pushes a gradient full of NaN, a chunk of the wrong size, a
# gradient for a version long gone, and a forged evaluation report (a perfect score for an
# epoch it never trained): each is refused and counted, the third invalid message
# disconnects it, and the run ends with the same weights as one in which slot 2's worker
# registered and left at once (both go on without slot 2: --on-worker-loss continue). Both
# jobs end with slot 2's shard never trained: exit 5, the summary naming it (issue 43).
source "$(dirname "$0")/lib.sh"
cat >"$OUT/evil.py" <<'PY'
import socket, struct, sys, time
port, mode = int(sys.argv[1]), sys.argv[2]
def varint(n):
    out = b""
    while True:
        b = n & 0x7f; n >>= 7
        out += bytes([b | (0x80 if n else 0)])
        if not n: return out
def field(num, wire, payload): return varint(num << 3 | wire) + payload
def frame(header, payload=b""):
    return b"PSTR" + struct.pack("<HHII", 1, 0, len(header), len(payload)) + header + payload
hello = field(1, 2, varint(4) + b"evil") + field(3, 0, varint(2 * 2))        # name, index 2 (zigzag)
s = socket.create_connection(("127.0.0.1", port), timeout=30)
s.sendall(frame(field(1, 0, varint(1)) + field(10, 2, varint(len(hello)) + hello)))
buf = b""
while b"\x08\x02" not in buf[16:24]:                  # the WELCOME's type field
    buf += s.recv(4096)
print("registered in slot 2", flush=True)
if mode == "quit":
    s.close(); sys.exit(0)
time.sleep(0.5)
starts = [0, 200960, 233856, 235146]                  # the mlp's chunks: its layers
def chunk(version, off, count, value, last):
    h = field(1, 0, varint(5)) + field(2, 0, varint(version)) + field(3, 0, varint(off)) + \
        field(4, 0, varint(count)) + (field(5, 0, varint(1)) if last else b"")
    return frame(h, struct.pack("<f", value) * count)
def push(version, value):                              # a whole gradient, chunk by chunk
    return b"".join(chunk(version, a, b - a, value, b == starts[-1])
                    for a, b in zip(starts, starts[1:]))
report = field(1, 0, varint(1)) + field(2, 0, varint(1)) + field(3, 0, varint(1)) + \
         field(4, 1, struct.pack("<d", 0.01)) + field(5, 0, varint(3333)) + field(6, 0, varint(3333))
try:
    s.sendall(push(0, float("nan")))                   # NaN: refused
    s.sendall(chunk(0, 0, 1000, 0.0, True))            # the wrong size: refused
    s.sendall(push(0, 0.0))                            # version 0, long gone by now: dropped
    s.sendall(frame(field(1, 0, varint(11)) + field(14, 2, varint(len(report)) + report)))
    while s.recv(65536): pass                          # until the ps closes us
except OSError:
    pass
print("disconnected", flush=True)
PY
args=(--workers 3 --model mlp --epochs 1 --batch-size 128 --seed 3 --worker-timeout 5)

# run NAME MODE: the ps, the client in MODE, then the two real workers.
run() {
  local name=$1 mode=$2 port; port=$(free_port)
  start_ps "$name-ps" --listen "127.0.0.1:$port" --summary-json "$OUT/$name.json" "${args[@]}"
  local ps_pid=$LAST_PID
  # The client connects once, as an attacker would: only after the ps listens (under load
  # the ps's start-up outlasted python's, and the connection was refused).
  wait_for "$OUT/$name-ps.log" "listening on" 20
  start_bg "$name-evil" /usr/bin/python3 "$OUT/evil.py" "$port" "$mode"
  local evil=$LAST_PID
  wait_for "$OUT/$name-ps.log" "worker 2 'evil' registered" 20
  [ "$mode" = quit ] && wait_for "$OUT/$name-ps.log" "worker 2 'evil' lost" 10
  local w=()
  for i in 0 1; do start_worker "$name-w$i" --ps "127.0.0.1:$port" --index "$i"; w+=("$LAST_PID"); done
  for p in "${w[@]}"; do wait_pid "$p" 120 || fail "$name: a real worker exited non-zero"; done
  ps_incomplete "$ps_pid" 30 "$OUT/$name.json" 2
  wait_pid "$evil" 10 || true
}
run quit quit
run evil abuse
grep -q "disconnected" "$OUT/evil-evil.log" || fail "the lying client was not disconnected"
for what in "non-finite values" "gradient chunk at offset 0 of 1000 floats" "an evaluation of epoch 1 before training through it"; do
  grep -q "worker 2 'evil' .*$what.*rejected" "$OUT/evil-ps.log" || fail "no rejection of: $what"
done
grep -q "3 invalid messages" "$OUT/evil-ps.log" || fail "the third invalid message did not disconnect it"
rejected=$(json_field "$OUT/evil.json" rejected)
dropped=$(json_field "$OUT/evil.json" dropped_gradients)
[ "$rejected" -eq 3 ] && [ "$dropped" -ge 1 ] || fail "the summary counts $rejected rejected, $dropped dropped"
c0=$(json_field "$OUT/quit.json" weights_checksum)
c1=$(json_field "$OUT/evil.json" weights_checksum)
[ "$c0" = "$c1" ] || fail "the lies changed the weights: $c1, without them $c0"
a1=$(json_field "$OUT/evil.json" test_accuracy)
a0=$(json_field "$OUT/quit.json" test_accuracy)
/usr/bin/python3 -c 'import sys; sys.exit(float(sys.argv[1]) != float(sys.argv[2]))' "$a1" "$a0" ||
  fail "the forged report changed the accuracy: $a1, without the liar $a0"
pass "NaN, wrong size and forged evaluation rejected ($rejected), stale gradient dropped ($dropped), disconnected; checksum $c1 and accuracy $a1 as without the liar"
echo "1 passed, 0 failed"
