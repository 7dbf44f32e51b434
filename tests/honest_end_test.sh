#!/usr/bin/env bash
# Issue 43, items 1-3: nothing passes as a finish that is not one, and no peer holds a job.
#  1. Two registered peers that say BYE without a push: no slot counts as finished; their
#     slots are lost and given up, and the ps ends the job as aborted (exit 1), not as
#     "training complete". Peers that do not say what their data is give the job no steps
#     to train through: their BYEs end it at once, as not finished (exit 5).
#  1b. One such peer beside a real worker: the real worker trains its half and exits 0; the
#     ps ends the job with PST_EXIT_INCOMPLETE (5), the summary says finished false and
#     names the peer's slot with every step of its shard never trained.
#  2. --backup-workers 1 with a straggler (--slow-factor 20): once the two fast workers have
#     finished, kill -9 of the straggler ends the job (exit 0: with backup workers every
#     step had its N-K shares); SIGSTOP of it instead ends it within the worker timeout.
#  3. A peer that trains 5 steps (zero gradients), then pulls, sends one chunk of its push
#     and only heartbeats: the ps drops it once it has held the step 20 x the job's typical
#     step, at least 5 s (measured here from the peer's side), and the job goes on without
#     it; a peer that pulls and never pushes at its first step is dropped as well.
#  4. An honest worker 20 times slower than the other is never dropped: its own steps set
#     its bound.
source "$(dirname "$0")/lib.sh"
PEER_DIR="$RUNFILES/tests"
args=(--model mlp --seed 3 --worker-timeout 5 --batch-size 256)

# peer NAME PORT INDEX MODE: tests/end_peer.py in the background (its modes are there).
peer() { start_bg "$1" env PYTHONPATH="$PEER_DIR" /usr/bin/python3 "$PEER_DIR/end_peer.py" "$2" "$3" "$4"; }
# ps_exit PID SECONDS: the ps's exit status in RC.
ps_exit() { RC=0; wait_pid "$1" "$2" || RC=$?; }

# ---- 1. BYE without training, from every slot ----
port=$(free_port)
start_ps bye2-ps --listen "127.0.0.1:$port" --workers 2 --epochs 2 --rejoin-timeout 2 \
  "${args[@]}" --summary-json "$OUT/bye2.json"
ps_pid=$LAST_PID
wait_for "$OUT/bye2-ps.log" "listening on" 20
peer bye2-p0 "$port" 0 bye; peer bye2-p1 "$port" 1 bye
ps_exit "$ps_pid" 30
[ "$RC" -eq 1 ] || fail "BYE from every slot: the ps exited $RC, not 1 (aborted)"
[ "$(json_field "$OUT/bye2.json" finished)" = False ] || fail "BYE from every slot: the summary says finished"
[ "$(json_field "$OUT/bye2.json" updates)" -eq 0 ] || fail "BYE from every slot: steps were taken"
pass "two BYEs without a push: no slot finished, the job aborted (exit $RC)"

# ... and from peers that do not say what their data is: the job has no steps to train
# through, and ends at once, not finished (exit 5), since no step was taken.
port=$(free_port)
start_ps nodata-ps --listen "127.0.0.1:$port" --workers 2 --epochs 2 "${args[@]}" \
  --summary-json "$OUT/nodata.json"
ps_pid=$LAST_PID
wait_for "$OUT/nodata-ps.log" "listening on" 20
peer nodata-p0 "$port" 0 byenodata; peer nodata-p1 "$port" 1 byenodata
ps_exit "$ps_pid" 30
[ "$RC" -eq 5 ] || fail "BYE without data facts: the ps exited $RC, not 5"
[ "$(json_field "$OUT/nodata.json" finished)" = False ] || fail "BYE without data facts: the summary says finished"
pass "two BYEs without a push or data facts: not finished (exit $RC)"

# ---- 1b. one BYE beside a real worker ----
port=$(free_port)
start_ps bye1-ps --listen "127.0.0.1:$port" --workers 2 --epochs 1 "${args[@]}" \
  --summary-json "$OUT/bye1.json"
ps_pid=$LAST_PID
wait_for "$OUT/bye1-ps.log" "listening on" 20
peer bye1-p1 "$port" 1 bye
wait_for "$OUT/bye1-p1.log" "closed" 20
start_worker bye1-w0 --ps "127.0.0.1:$port" --index 0
wait_pid "$LAST_PID" 120 || fail "1b: the real worker exited non-zero"
ps_incomplete "$ps_pid" 30 "$OUT/bye1.json" 1
/usr/bin/python3 - "$OUT/bye1.json" <<'PY' || fail "1b: the summary does not name the untrained slot's every step"
import json, sys
s = json.load(open(sys.argv[1]))
steps = 60000 // 2 // 256
assert s["finished"] is False, s["finished"]
u = {x["worker"]: x for x in s["untrained"]}
assert list(u) == [1], u
assert u[1]["steps"] == steps and u[1]["samples"] == steps * 256, u
assert s["untrained_samples"] == steps * 256, s["untrained_samples"]
PY
pass "a BYE beside a real worker: the job ended with exit 5, slot 1's $((60000 / 2 / 256 * 256)) samples named untrained"

# ---- 2. backup workers: the straggler killed, or stopped, after the others finished ----
backup_run() {
  local name=$1 sig=$2 port; port=$(free_port)
  start_ps "$name-ps" --listen "127.0.0.1:$port" --workers 3 --backup-workers 1 --epochs 1 \
    "${args[@]}" --worker-timeout 3 --summary-json "$OUT/$name.json"
  local ps_pid=$LAST_PID w=()
  for i in 0 1 2; do
    local extra=()
    [ "$i" -eq 2 ] && extra=(--slow-factor 20)
    start_worker "$name-w$i" --ps "127.0.0.1:$port" --index "$i" "${extra[@]}"
    w+=("$LAST_PID")
  done
  wait_for "$OUT/$name-ps.log" "worker 0 .* finished" 120
  wait_for "$OUT/$name-ps.log" "worker 1 .* finished" 60
  kill "-$sig" "${w[2]}"
  local t0=$SECONDS
  wait_pid "${w[0]}" 30 || fail "$name: worker 0 exited non-zero"
  wait_pid "${w[1]}" 30 || fail "$name: worker 1 exited non-zero"
  ps_exit "$ps_pid" 30
  TOOK=$((SECONDS - t0))
  [ "$sig" = STOP ] && kill -KILL "${w[2]}" 2>/dev/null
  [ "$RC" -eq 0 ] || fail "$name: the ps exited $RC"
  [ "$(json_field "$OUT/$name.json" finished)" = True ] || fail "$name: not finished"
}
backup_run bk-kill KILL
pass "backup workers, the straggler killed after the others finished: the job ended $TOOK s later"
backup_run bk-stop STOP
[ "$TOOK" -le 12 ] || fail "backup workers, the straggler stopped: the job ended $TOOK s later (worker timeout 3 s)"
pass "backup workers, the straggler stopped: the job ended $TOOK s later"

# ---- 3. a peer that holds a step open with heartbeats ----
stall_run() {
  local name=$1 mode=$2 port; port=$(free_port)
  start_ps "$name-ps" --listen "127.0.0.1:$port" --workers 3 --epochs 1 "${args[@]}" \
    --worker-timeout 30 --summary-json "$OUT/$name.json"
  local ps_pid=$LAST_PID
  wait_for "$OUT/$name-ps.log" "listening on" 20
  local w=()
  # The peer that stalls its first step registers last: the step opens, for the ps, when
  # the last slot is taken, and the peer's own clock starts with its pull right after. (It
  # registered first once: the ps then counted from the workers' registration, 4 s after
  # the peer's pull on a loaded machine, and both were right.)
  [ "$mode" = pullstall ] || { peer "$name-peer" "$port" 2 "$mode"; wait_for "$OUT/$name-peer.log" "registered" 20; }
  for i in 0 1; do start_worker "$name-w$i" --ps "127.0.0.1:$port" --index "$i"; w+=("$LAST_PID"); done
  if [ "$mode" = pullstall ]; then
    wait_for "$OUT/$name-ps.log" "worker 0 .* registered" 60
    wait_for "$OUT/$name-ps.log" "worker 1 .* registered" 60
    peer "$name-peer" "$port" 2 "$mode"
  fi
  for p in "${w[@]}"; do wait_pid "$p" 120 || fail "$name: a worker exited non-zero"; done
  ps_incomplete "$ps_pid" 30 "$OUT/$name.json" 2
  wait_for "$OUT/$name-peer.log" "closed after" 10
  HELD=$(sed -nE 's/^closed after ([0-9.]+)$/\1/p' "$OUT/$name-peer.log")
}
stall_run stall stall
held=$HELD
# Quick steps: the floor of 5 s, and the watch's period (at most 1 s) on top.
/usr/bin/python3 -c 'import sys; h = float(sys.argv[1]); sys.exit(0 if 5 <= h <= 7.5 else 1)' "$held" ||
  fail "stall: the peer held the step $held s (bound 5 s)"
grep -q "worker 2 'stall': it held step 5 open" "$OUT/stall-ps.log" || fail "stall: the ps did not say who held which step"
pass "a peer holding step 5 open with heartbeats was dropped after $held s; the job went on"
stall_run pull pullstall
held=$HELD
# Its first step: three floors (15 s) at least.
/usr/bin/python3 -c 'import sys; h = float(sys.argv[1]); sys.exit(0 if 15 <= h <= 17.5 else 1)' "$held" ||
  fail "pullstall: the peer held its first step $held s (bound 15 s)"
pass "a peer that pulled and never pushed was dropped after $held s"

# ---- 4. an honest slow worker keeps working ----
WORKER_EXTRA=("" "--slow-factor 20")
train sync 2 "$OUT/slow.json" --model mlp --epochs 1 --batch-size 1024 --seed 3 --worker-timeout 5
WORKER_EXTRA=()
[ "$(json_field "$OUT/slow.json" workers_lost)" -eq 0 ] || fail "slow: the slow worker was dropped"
[ "$(json_field "$OUT/slow.json" finished)" = True ] || fail "slow: not finished"
pass "a worker 20 times slower was never dropped"
echo "8 passed, 0 failed"
