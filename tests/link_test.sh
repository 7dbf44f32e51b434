#!/usr/bin/env bash
# Issue 27, point 1: `pstrain local --link` puts each worker in a network namespace of its
# own behind a shaped veth link to the ps's namespace.
#  1. bad link specs: one line, exit 2;
#  2. a short sync mlp job (2 null-device workers, batch 1024: 29 steps) over 100 Mbit/s
#     links: its wire bytes per step are 2 workers x parameters x 8 bytes (within 3%), and it
#     took at least the time the link allows for them (each worker's pushes, and its pulls,
#     at 100 Mbit/s), which a loopback run of the same job does not need; no namespace of the
#     run is left;
#  3. fp16 over the same link (CPU workers): it trains, and moves half the bytes;
#  4. Ctrl-C in the middle of a run over a link: the launcher exits 130 and leaves no
#     namespace behind;
#  5. a delay (netem): on a kernel with netem the job runs; on one without it the launcher
#     says so in one line and exits 2, leaving nothing behind.
# The addresses (10.214.0.0/24) exist only inside the run's namespaces. Needs root and
# iproute2; without them the test says why and skips.
source "$(dirname "$0")/lib.sh"
MLP_PARAMS=235146

skip() {
  echo "SKIP: $*"
  echo "0 passed, 0 failed (skipped)"
  exit 0
}
[ "$(id -u)" = 0 ] || skip "--link needs root (running as uid $(id -u))"
command -v ip >/dev/null && command -v tc >/dev/null || skip "no ip or tc (iproute2)"
if ! err=$(ip netns add "pstlinkprobe-$$" 2>&1); then
  skip "cannot create a network namespace (ip netns add: $err)"
fi
ip netns del "pstlinkprobe-$$"

# The run's namespaces are named after the launcher's pid: pstlink-PID-*.
left() { ip netns list 2>/dev/null | awk '{print $1}' | grep -c "^pstlink-$1-" || true; }

# ---- 1. bad specs ----
for bad in "100" "fast" "100mbit,1s" "100mbit,1ms,5" "1bit" "100mbit,1ms,1%,x"; do
  rc=0
  "$LAUNCHER_BIN" local --link "$bad" --run-dir "$OUT/bad" >"$OUT/bad.log" 2>&1 || rc=$?
  [ "$rc" -eq 2 ] || fail "--link $bad: exit $rc, not 2"
  [ "$(wc -l <"$OUT/bad.log")" -eq 1 ] || fail "--link $bad: not one line"
done
rc=0
"$LAUNCHER_BIN" local --workers 2 --link-worker "2:10mbit" --run-dir "$OUT/bad" >"$OUT/bad.log" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "--link-worker for worker 2 of 2: exit $rc, not 2"
pass "bad link specs: one line, exit 2"

# ---- 2. a 100 Mbit/s link ----
job() { # NAME ARGS...: one job in $OUT/NAME, the launcher's pid in $OUT/NAME.pid
  local name=$1
  shift
  "$LAUNCHER_BIN" local --workers 2 --model mlp --epochs 1 --batch-size 1024 --seed 3 \
    --run-dir "$OUT/$name" --summary-json "$OUT/$name.json" "$@" >"$OUT/$name.out" 2>&1 &
  local pid=$!
  echo "$pid" >"$OUT/$name.pid"
  wait "$pid" || fail "$name: pstrain local failed: $(tail -2 "$OUT/$name.out")"
  [ "$(left "$pid")" = 0 ] || fail "$name: namespaces left behind: $(ip netns list | grep "pstlink-$pid-")"
}
# The null device computes nothing (a fixed gradient), so the loopback run takes a fraction
# of what the link needs, however busy the machine: the link's time is the job's.
job loopback --device null
job link100 --device null --link 100mbit
# check NAME PUSH_BYTES PULL_BYTES RATE_BITS: the bytes, and the time the link needed.
check() {
  /usr/bin/python3 - "$OUT/$1.json" "$2" "$3" "$4" "$MLP_PARAMS" "$OUT/loopback.json" <<'PY' ||
import json, sys
s = json.load(open(sys.argv[1]))
push, pull, rate, n = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
loop = json.load(open(sys.argv[6]))
want = 2 * n * (push + pull)
got = s["wire_bytes_per_step"]
if sys.argv[1].endswith("fp16.json"):  # a CPU job that trains (the others: null devices)
    assert s["test_accuracy"] > 0.6, s["test_accuracy"]
assert 1.0 <= got / want <= 1.03, (got, want)
# Each worker's link carried half the ps's bytes each way; at `rate` bits/s that takes at
# least this long (the wire adds TCP/IP headers on top: the bound is safe).
up = s["wire_bytes_in"] / 2 * 8 / rate
down = s["wire_bytes_out"] / 2 * 8 / rate
t = s["training_seconds"]
print(f"{sys.argv[1]}: {got:.0f} bytes per step, {t:.2f} s training (link needs >= "
      f"{max(up, down):.2f} s; loopback took {loop['training_seconds']:.2f} s); "
      f"{s['wire_bytes_in'] / 2 * 8 / t / 1e6:.1f} Mbit/s up and "
      f"{s['wire_bytes_out'] / 2 * 8 / t / 1e6:.1f} down per worker")
assert t >= max(up, down), (t, up, down)
PY
    fail "$1: bytes or time"
}
check link100 4 4 100e6
/usr/bin/python3 -c 'import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); \
sys.exit(0 if a["wire_bytes_in"] / 2 * 8 / 100e6 > b["training_seconds"] else 1)' \
  "$OUT/link100.json" "$OUT/loopback.json" || fail "the loopback run was not faster than the link allows"
pass "100 Mbit/s links: the bytes per step, at least the time the link needs, nothing left"

job link100-fp16 --link 100mbit --push-compress fp16 --pull-compress fp16
check link100-fp16 2 2 100e6
pass "fp16 over a 100 Mbit/s link: half the bytes"

# ---- 4. Ctrl-C mid-run ----
"$LAUNCHER_BIN" local --workers 2 --model mlp --epochs 3 --batch-size 256 --link 20mbit \
  --run-dir "$OUT/ctrlc" >"$OUT/ctrlc.out" 2>&1 &
pid=$!
wait_step "$OUT/ctrlc/metrics.jsonl" 2 60
[ "$(left "$pid")" -gt 0 ] || fail "Ctrl-C run: no namespaces while it runs"
kill -INT "$pid"
rc=0
wait_pid "$pid" 60 || rc=$?
[ "$rc" -eq 130 ] || fail "Ctrl-C run: exit $rc, not 130"
[ "$(left "$pid")" = 0 ] || fail "Ctrl-C run: namespaces left behind"
pass "Ctrl-C over a link: exit 130, no namespace left"

# ---- 5. a delay ----
rc=0
"$LAUNCHER_BIN" local --workers 2 --model mlp --epochs 1 --batch-size 1024 \
  --link 100mbit,2ms --run-dir "$OUT/delay" --summary-json "$OUT/delay.json" >"$OUT/delay.out" 2>&1 &
pid=$!
wait "$pid" || rc=$?
[ "$(left "$pid")" = 0 ] || fail "delay: namespaces left behind"
if [ "$rc" -eq 0 ]; then
  pass "a delay of 2 ms: the job ran (this kernel has netem)"
else
  [ "$rc" -eq 2 ] || fail "delay: exit $rc, neither 0 nor 2: $(cat "$OUT/delay.out")"
  grep -q netem "$OUT/delay.out" || fail "delay: the reason does not name netem"
  [ "$(grep -c 'pstrain' "$OUT/delay.out")" -eq 1 ] || fail "delay: not one line"
  pass "a delay of 2 ms on a kernel without netem: one line, exit 2, nothing left"
fi
echo "5 passed, 0 failed"
