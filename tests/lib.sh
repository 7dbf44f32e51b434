# Shared by the multi-process tests: find the built daemons in the test's runfiles, pick
# free ports on 127.0.0.1, start processes with their logs in the test's output directory,
# wait with a deadline, and kill whatever is left when the test ends (pass or fail).
set -euo pipefail

RUNFILES="${TEST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/pstrain"
[ -d "$RUNFILES" ] || RUNFILES="$(cd "$(dirname "$0")/.." && pwd)"
PS_BIN="$RUNFILES/ps/pstrain-ps"
WORKER_BIN="$RUNFILES/worker/pstrain-worker"
LAUNCHER_BIN="$RUNFILES/launcher/pstrain"
DATA_DIR="${PSTRAIN_DATA_DIR:-/usr/share/datasets/fashion-mnist}"
OUT="${TEST_UNDECLARED_OUTPUTS_DIR:-$(mktemp -d)}"
mkdir -p "$OUT"
PIDS=()

cleanup() {
  local p
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true; done
  sleep 0.2
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -KILL "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  for f in "$OUT"/*.log "$OUT"/*.out; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }; done
  echo "0 passed, 1 failed"
  exit 1
}

pass() {
  echo "PASS: $*"
}

free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start_bg NAME CMD ARGS...: runs CMD in the background with its output in $OUT/NAME.log;
# its pid is in LAST_PID, and it is killed when the test ends.
start_bg() {
  local name=$1; shift
  "$@" >"$OUT/$name.log" 2>&1 &
  LAST_PID=$!
  PIDS+=("$LAST_PID")
}

# start_ps NAME ARGS... and start_worker NAME ARGS...: the daemons, through start_bg.
start_ps() {
  local name=$1; shift
  start_bg "$name" "$PS_BIN" --status-interval 0 "$@"
}

start_worker() {
  local name=$1; shift
  start_bg "$name" "$WORKER_BIN" --data-dir "$DATA_DIR" --connect-timeout 20 "$@"
}

# wait_pid PID SECONDS: waits for the process to exit, returns its status; fails on timeout.
wait_pid() {
  local pid=$1 deadline=$((SECONDS + $2))
  while kill -0 "$pid" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || fail "process $pid still running after $2 s"
    sleep 0.1
  done
  local rc=0
  wait "$pid" || rc=$?
  return $rc
}

# proxied_pair NAME MODE N PS_FLAGS... -- WORKER_FLAGS...: a ps of 2 workers on a free port
# that waits for a lost worker (--on-worker-loss wait), worker 1 straight to it and worker 0
# through tests/ps_proxy.py in MODE from its Nth message (what the proxy did goes to
# $OUT/proxy-NAME), each worker given --index and WORKER_FLAGS. Logs ps-NAME, w0-NAME,
# w1-NAME; the ps's summary $OUT/s-NAME.json. Returns once all three ended well, and fails,
# naming which, if one did not.
proxied_pair() {
  local name=$1 mode=$2 n=$3 ps_flags=() port proxy_port ps_pid w0 w1
  shift 3
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do ps_flags+=("$1"); shift; done
  [ $# -eq 0 ] || shift
  port=$(free_port)
  proxy_port=$(free_port)
  start_bg "proxy-$name" /usr/bin/python3 "$RUNFILES/tests/ps_proxy.py" "$proxy_port" "$port" \
    "$OUT/proxy-$name" "$mode" "$n"
  start_ps "ps-$name" --listen "127.0.0.1:$port" --workers 2 --summary-json "$OUT/s-$name.json" \
    --on-worker-loss wait "${ps_flags[@]}"
  ps_pid=$LAST_PID
  # A proxy passes bytes, not memory: worker 0 keeps to TCP (--shm false).
  start_worker "w0-$name" --ps "127.0.0.1:$proxy_port" --index 0 --shm false "$@"
  w0=$LAST_PID
  start_worker "w1-$name" --ps "127.0.0.1:$port" --index 1 "$@"
  w1=$LAST_PID
  wait_pid "$w0" 120 || fail "$name: worker 0, behind the proxy ($mode), exited non-zero"
  wait_pid "$w1" 120 || fail "$name: worker 1 exited non-zero"
  wait_pid "$ps_pid" 30 || fail "$name: the ps exited non-zero"
}

# kill_one_worker NAME PS_ARGS...: a job of 2 workers, the ps given PS_ARGS and waiting for a
# lost worker, whose worker 1 is killed with kill -9 at step 40 and replaced; all three must
# exit 0. The summary is $OUT/NAME.json, the ps's log $OUT/NAMEps.log.
kill_one_worker() {
  local name=$1 port ps_pid w0 w1
  shift
  port=$(free_port)
  start_ps "${name}ps" --listen "127.0.0.1:$port" --workers 2 --summary-json "$OUT/$name.json" \
    --metrics "$OUT/$name.jsonl" --report-every 5 --worker-timeout 5 --on-worker-loss wait "$@"
  ps_pid=$LAST_PID
  start_worker "${name}w0" --ps "127.0.0.1:$port" --index 0
  w0=$LAST_PID
  start_worker "${name}w1" --ps "127.0.0.1:$port" --index 1
  w1=$LAST_PID
  wait_step "$OUT/$name.jsonl" 40 60
  kill -9 "$w1"
  wait_for "$OUT/${name}ps.log" "worker 1 .* lost" 10
  start_worker "${name}w1b" --ps "127.0.0.1:$port" --index 1
  w1=$LAST_PID
  wait_pid "$w0" 120 || fail "$name: worker 0 exited non-zero"
  wait_pid "$w1" 120 || fail "$name: the replacement exited non-zero"
  wait_pid "$ps_pid" 30 || fail "$name: the ps exited non-zero after a worker was killed"
}

# json_field FILE KEY: a number or string field of a one-line JSON object.
json_field() {
  /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

# at_least A B: A >= B for decimals.
at_least() {
  /usr/bin/python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)' "$1" "$2"
}

# train MODE WORKERS SUMMARY [ps args...] -- [worker args per all]: one whole job.
train() {
  local mode=$1 workers=$2 summary=$3; shift 3
  local port
  port=$(free_port)
  start_ps "ps-$mode" --listen "127.0.0.1:$port" --mode "$mode" --workers "$workers" \
    --summary-json "$summary" "$@"
  local ps_pid=$LAST_PID wpids=() i
  for ((i = 0; i < workers; i++)); do
    start_worker "worker$i-$mode" --ps "127.0.0.1:$port" --index "$i" ${WORKER_EXTRA[$i]:-}
    wpids+=("$LAST_PID")
  done
  for i in "${!wpids[@]}"; do wait_pid "${wpids[$i]}" 120 || fail "worker $i exited non-zero"; done
  wait_pid "$ps_pid" 30 || fail "ps exited non-zero"
}

# ps_refuses FLAGS...: pstrain-ps, given each argument's flags (split at spaces), exits 2
# with one error line, before it listens.
ps_refuses() {
  local bad rc
  for bad in "$@"; do
    rc=0
    # shellcheck disable=SC2086
    "$PS_BIN" --listen "127.0.0.1:$(free_port)" $bad >"$OUT/ps-refused.log" 2>&1 || rc=$?
    [ "$rc" -eq 2 ] || fail "pstrain-ps $bad: exit $rc, not 2"
    [ "$(grep -c 'error:' "$OUT/ps-refused.log")" -eq 1 ] ||
      fail "pstrain-ps $bad: not one error line: $(head -c 300 "$OUT/ps-refused.log")"
    ! grep -q "listening on" "$OUT/ps-refused.log" || fail "pstrain-ps $bad: it listened"
  done
}

# ps_incomplete PID SECONDS SUMMARY SLOT...: the ps ends a job whose slots SLOT... left data
# never trained (issue 43): exit 5 (PST_EXIT_INCOMPLETE), the summary not finished and
# naming each of them among its untrained slots.
ps_incomplete() {
  local pid=$1 secs=$2 summary=$3 rc=0; shift 3
  wait_pid "$pid" "$secs" || rc=$?
  [ "$rc" -eq 5 ] || fail "the ps exited $rc, not 5 (a job with data never trained)"
  /usr/bin/python3 - "$summary" "$@" <<'PY' || fail "$(basename "$summary"): not the summary of a job with slots $* untrained"
import json, sys
s = json.load(open(sys.argv[1]))
named = {x["worker"]: x["samples"] for x in s["untrained"]}
assert s["finished"] is False, "finished"
assert all(named.get(int(i), 0) > 0 for i in sys.argv[2:]), named
assert s["untrained_samples"] == sum(named.values()), (s["untrained_samples"], named)
PY
}

# wait_for FILE PATTERN SECONDS: waits until FILE has a line matching PATTERN (grep -E).
wait_for() {
  local deadline=$((SECONDS + $3))
  until grep -qE "$2" "$1" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || fail "no '$2' in $(basename "$1") after $3 s"
    sleep 0.05
  done
}

# wait_step METRICS STEP SECONDS: waits until the metrics file has a training report of a
# step >= STEP (a run is under way and that far along).
wait_step() {
  local deadline=$((SECONDS + $3))
  until /usr/bin/python3 - "$1" "$2" <<'PY' 2>/dev/null
import json, sys
steps = [json.loads(l).get("step", 0) for l in open(sys.argv[1]) if '"train"' in l]
sys.exit(0 if steps and max(steps) >= int(sys.argv[2]) else 1)
PY
  do
    [ $SECONDS -lt $deadline ] || fail "$(basename "$1") reached no step $2 after $3 s"
    sleep 0.05
  done
}

# local_checksum NAME ARGS...: one `pstrain local` job of 2 workers (sync MLP, 1 epoch,
# batch 256, seed 7, 16 KiB chunks, and ARGS) in $OUT/NAME; prints its summary's
# weights_checksum (the whole model's, however many shards held it), after checking that
# every shard's summary gives the same. For the tests that must change how bytes move, not
# the weights.
local_checksum() {
  local name=$1; shift
  "$LAUNCHER_BIN" local --workers 2 --model mlp --epochs 1 --batch-size 256 --seed 7 \
    --chunk-kib 16 --run-dir "$OUT/$name" --summary-json "$OUT/$name.json" "$@" \
    >"$OUT/$name.out" 2>&1 || fail "$name: pstrain local failed"
  local sum f
  sum=$(json_field "$OUT/$name.json" weights_checksum) || fail "$name: the summary gives no weights_checksum"
  for f in "$OUT/$name"/summary-shard*.json; do
    [ -f "$f" ] || continue
    [ "$(json_field "$f" weights_checksum)" = "$sum" ] ||
      fail "$name: $(basename "$f") gives another checksum of the model than shard 0's $sum"
  done
  echo "$sum"
}

# rank_pid RUN R: the pid of rank R of the all-reduce job whose run directory is RUN: a
# pstrain-worker-allreduce process (what pstrain-worker --mode allreduce execs) whose command
# line names RUN (mpirun's names it too, but its program is mpirun).
rank_pid() {
  local p
  for p in $(pgrep -f -- "--mode=allreduce"); do
    [ "$(basename "$(readlink "/proc/$p/exe" 2>/dev/null)")" = pstrain-worker-allreduce ] || continue
    grep -qF "$1/" "/proc/$p/cmdline" 2>/dev/null || continue
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && echo "$p"
  done
  return 0
}
