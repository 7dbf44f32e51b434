#!/usr/bin/env bash
# One short real training run for the sanitizer pass of `./pstrain test` (bazel test
# --config=asan, see .bazelrc): pstrain-ps and two pstrain-workers, sync, mlp, 1 epoch on
# a 6,000-sample slice of Fashion-MNIST (plain IDX files for training, gzip'd for the test
# set, so both read paths run), on 127.0.0.1. It passes when every process exits 0, the
# run finished, and no log holds a sanitizer report (ASan, UBSan or LeakSanitizer at exit).
# Tagged manual: under the normal build it would only repeat train_sync_test.
set -euo pipefail

RUNFILES="${TEST_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}/pstrain"
[ -d "$RUNFILES" ] || RUNFILES="$(cd "$(dirname "$0")/../.." && pwd)"
PS_BIN="$RUNFILES/ps/pstrain-ps"
WORKER_BIN="$RUNFILES/worker/pstrain-worker"
DATA_DIR="${PSTRAIN_DATA_DIR:-/usr/share/datasets/fashion-mnist}"
OUT="${TEST_UNDECLARED_OUTPUTS_DIR:-$(mktemp -d)}"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
mkdir -p "$OUT"
PIDS=()
trap 'for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -KILL "$p" 2>/dev/null || true; done' EXIT

fail() {
  echo "FAIL: $*" >&2
  for f in "$OUT"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 40 "$f" >&2; }; done
  exit 1
}

# The slice: the first 6,000 training and 1,000 test samples.
data="$TMP/data"
mkdir -p "$data"
/usr/bin/python3 "$RUNFILES/tests/fuzz/data_slice.py" "$DATA_DIR" "$data" 6000 1000

port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# halt_on_error and exitcode make any report fail the process; LeakSanitizer runs at exit.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:allow_user_segv_handler=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

"$PS_BIN" --listen "127.0.0.1:$port" --workers 2 --mode sync --model mlp --epochs 1 \
  --batch-size 64 --status-interval 0 --summary-json "$OUT/summary.json" >"$OUT/ps.log" 2>&1 &
ps_pid=$!
PIDS+=("$ps_pid")
wpids=()
for i in 0 1; do
  "$WORKER_BIN" --ps "127.0.0.1:$port" --index "$i" --data-dir "$data" --device cpu \
    --connect-timeout 30 >"$OUT/worker$i.log" 2>&1 &
  wpids+=($!)
  PIDS+=($!)
done

wait_pid() {
  local pid=$1 deadline=$((SECONDS + $2)) rc=0
  while kill -0 "$pid" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || fail "process $pid still running after $2 s"
    sleep 0.1
  done
  wait "$pid" || rc=$?
  return $rc
}
for i in 0 1; do wait_pid "${wpids[$i]}" 240 || fail "worker $i exited with status $?"; done
wait_pid "$ps_pid" 60 || fail "the ps exited with status $?"

grep -q '"finished":true' "$OUT/summary.json" || fail "the run did not finish: $(cat "$OUT/summary.json")"
acc=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["test_accuracy"])' "$OUT/summary.json")

# Issue 43's ends under the sanitizers (tests/end_peer.py plays the peer; honest_end_test
# runs them all on the normal build): two peers that say BYE without a push or data facts
# end the job not finished (exit 5); and a peer that holds a step open with heartbeats
# beside the two workers is dropped, the job ending with its shard never trained (exit 5).
peer() { PYTHONPATH="$RUNFILES/tests" /usr/bin/python3 "$RUNFILES/tests/end_peer.py" "$@"; }
new_ps() {
  local name=$1; shift
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$PS_BIN" --listen "127.0.0.1:$port" --mode sync --model mlp --epochs 1 --batch-size 64 \
    --status-interval 0 "$@" >"$OUT/ps-$name.log" 2>&1 &
  ps_pid=$!
  PIDS+=("$ps_pid")
  for _ in $(seq 200); do grep -q "listening on" "$OUT/ps-$name.log" 2>/dev/null && return; sleep 0.1; done
  fail "the ps did not listen"
}
new_ps bye --workers 2 --summary-json "$OUT/bye.json"
for i in 0 1; do peer "$port" "$i" byenodata >"$OUT/bye-peer$i.log" 2>&1 & PIDS+=($!); done
rc=0; wait_pid "$ps_pid" 60 || rc=$?
[ "$rc" -eq 5 ] || fail "BYEs without a push: the ps exited $rc, not 5"
new_ps stall --workers 3 --worker-timeout 60 --summary-json "$OUT/stall.json"
peer "$port" 2 stall 6000 1000 10 >"$OUT/stall-peer.log" 2>&1 &
PIDS+=($!)
wpids=()
for i in 0 1; do
  "$WORKER_BIN" --ps "127.0.0.1:$port" --index "$i" --data-dir "$data" --device cpu \
    --connect-timeout 30 >"$OUT/stall-worker$i.log" 2>&1 &
  wpids+=($!)
  PIDS+=($!)
done
for i in 0 1; do wait_pid "${wpids[$i]}" 240 || fail "stall: worker $i exited with status $?"; done
rc=0; wait_pid "$ps_pid" 60 || rc=$?
[ "$rc" -eq 5 ] || fail "a step held open: the ps exited $rc, not 5"
grep -q "worker 2 'stall': it held step 5 open" "$OUT/ps-stall.log" || fail "the stall was not dropped"

reports=$(grep -lE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: (Address|Leak|UndefinedBehavior)Sanitizer' \
  "$OUT"/*.log || true)
[ -z "$reports" ] || fail "sanitizer reports in: $reports"
echo "PASS: sync, 2 workers, mlp, 1 epoch on 6000 samples under the sanitizers: test accuracy $acc;" \
  "BYEs without a push and a step held open end the job with exit 5"
