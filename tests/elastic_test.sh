#!/usr/bin/env bash
# Issue 28: elastic jobs. The ps hands out each epoch's sample order in ranges; workers come
# and go between --workers MIN:MAX. Every case checks from the ps's own records
# (tests/data_coverage.py over its metrics file) that every training sample of every epoch
# was trained exactly once, whatever happened to the workers.
#  1. A fixed set of workers with the data handed out is deterministic (same checksum twice).
#  2. 2 workers, 2 more after epoch 1 (4), 2 of them leave on SIGTERM during epoch 3 (2
#     again): exactly once per epoch, the leavers exit 0 as departures, the newcomers take
#     part at most two versions after they registered (the step under way and, when its
#     successor's ranges are out already, that one), and the accuracy is within 0.5 points of
#     a fixed 2-worker job with static shards.
#  3. kill -9 of one worker of four mid-epoch, no replacement: exactly once; and a worker
#     stopped (SIGSTOP) past --worker-timeout, then continued: lost, its range handed out
#     again, it registers again and trains on; exactly once.
#  4. The ps killed (kill -9) mid-epoch and started again: it resumes the epoch where its
#     checkpoint was (the records say so), the workers reconnect, exactly once.
#  5. --leave-after-step: the worker leaves by itself (exit 0, one departure).
#  6. Bad --workers values and combinations: exit 2 with the reason.
source "$(dirname "$0")/lib.sh"
COVER="$(dirname "$0")/data_coverage.py"
args=(--model mlp --batch-size 256 --seed 7)
SAMPLES=60000

covered() { # METRICS EPOCHS NAME: exactly once, or fail
  /usr/bin/python3 "$COVER" "$1" "$SAMPLES" "$2" > "$OUT/$3-coverage.txt" ||
    { cat "$OUT/$3-coverage.txt" >&2; fail "$3: the samples were not trained exactly once"; }
}

# 1. Deterministic with a fixed set of workers.
for r in a b; do
  train sync 2 "$OUT/fixed-$r.json" --data-order ps --epochs 2 "${args[@]}"
done
ca=$(json_field "$OUT/fixed-a.json" weights_checksum) || fail "no weights_checksum in the summary"
cb=$(json_field "$OUT/fixed-b.json" weights_checksum) || fail "no weights_checksum in the summary"
[ -n "$ca" ] && [ "$ca" = "$cb" ] ||
  fail "two runs of 2 workers with the data handed out ended with other weights ($ca, $cb)"
[ "$(json_field "$OUT/fixed-a.json" data_order)" = ps ] || fail "the summary does not say the ps handed out the data"
pass "fixed workers, data handed out: the same weights twice"

# The baseline: a fixed 2-worker job with static shards, 4 epochs.
train sync 2 "$OUT/static.json" --epochs 4 --eval-on ps "${args[@]}"
static=$(json_field "$OUT/static.json" test_accuracy)

# 2. Grow after epoch 1, shrink during epoch 3.
port=$(free_port)
start_ps grow-ps --listen "127.0.0.1:$port" --workers 2:4 --epochs 4 --metrics "$OUT/grow.jsonl" \
  --summary-json "$OUT/grow.json" --lr-scaling linear --metrics-listen 0 "${args[@]}"
ps_pid=$LAST_PID
wait_for "$OUT/grow-ps.log" "metrics on http://127.0.0.1:[0-9]+/metrics" 10
ps_url=$(grep -oE "http://127.0.0.1:[0-9]+/metrics" "$OUT/grow-ps.log")
w=()
for i in 0 1; do start_worker "grow-w$i" --ps "127.0.0.1:$port"; w+=("$LAST_PID"); done
wait_for "$OUT/grow.jsonl" '"event":"data_epoch","epoch":1,' 60
for i in 2 3; do start_worker "grow-w$i" --ps "127.0.0.1:$port"; w+=("$LAST_PID"); done
# The newcomers join once their data is loaded (about a second, longer on a loaded machine,
# while 2 workers train an epoch in about as long): wait for the ps to count 4.
wait_for "$OUT/grow.jsonl" '"event":"workers","workers":4,' 60
# Half-way through epoch 3 (or at once, if the newcomers joined later than that): two of
# the four leave.
until /usr/bin/python3 - "$OUT/grow.jsonl" <<'PY'
import json, sys
t = sum(r["count"] for r in map(json.loads, open(sys.argv[1]))
        if r.get("event") == "data" and r["what"] == "trained" and r["epoch"] == 3)
sys.exit(0 if t >= 30000 else 1)
PY
do sleep 0.05; done
kill -TERM "${w[1]}" "${w[3]}"
for i in 1 3; do wait_pid "${w[$i]}" 30 || fail "worker $i left with a non-zero status"; done
# /metrics while the other two train on (an epoch and a half at least).
dep=$(/usr/bin/python3 "$RUNFILES/tests/metrics_client.py" get "$ps_url" pstrain_worker_departures_total) ||
  fail "cannot scrape the ps"
now=$(/usr/bin/python3 "$RUNFILES/tests/metrics_client.py" get "$ps_url" pstrain_workers_training)
[ "${dep%.*}" = 2 ] && [ "${now%.*}" = 2 ] || fail "/metrics: $dep departures and $now training, expected 2 and 2"
for i in 0 2; do wait_pid "${w[$i]}" 120 || fail "worker $i exited non-zero"; done
wait_pid "$ps_pid" 30 || fail "the ps exited non-zero"
covered "$OUT/grow.jsonl" 4 grow
[ "$(json_field "$OUT/grow.json" workers_departed)" -eq 2 ] || fail "the summary does not count 2 departures"
[ "$(json_field "$OUT/grow.json" workers_lost)" -eq 0 ] || fail "a departure was counted as a loss"
/usr/bin/python3 - "$OUT/grow.jsonl" <<'PY' || fail "the number of workers did not go 2, 4, 2, or a newcomer waited"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ws = [r for r in recs if r.get("event") == "workers"]
counts = [r["workers"] for r in ws]
# 2 at the start, 4 after the newcomers, 2 after the departures (then 0 as the job ends).
assert counts[:2] == [1, 2] and 4 in counts, counts
after = counts[counts.index(4):]
assert 2 in after, counts
# Each newcomer trains from at most two versions after the one it joined at.
for r in ws:
    if r["why"] != "joined" or r["version"] == 0:
        continue
    first = min(d["version"] for d in recs if d.get("event") == "data" and d["what"] == "handed"
                and d["worker"] == r["worker"] and d["version"] >= r["version"])
    assert first - r["version"] <= 2, (r, first)
    assert first == r["from"], (r, first)
PY
acc=$(json_field "$OUT/grow.json" test_accuracy)
/usr/bin/python3 -c 'import sys; sys.exit(0 if abs(float(sys.argv[1]) - float(sys.argv[2])) <= 0.005 else 1)' \
  "$acc" "$static" || fail "accuracy $acc after 2 -> 4 -> 2 workers, $static with 2 fixed: more than 0.5 points apart"
pass "2 -> 4 -> 2 workers: every sample once per epoch, accuracy $acc (2 fixed workers: $static)"

# 3. kill -9 of one of four mid-epoch, no replacement.
port=$(free_port)
start_ps kill-ps --listen "127.0.0.1:$port" --workers 2:4 --epochs 2 --metrics "$OUT/kill.jsonl" \
  --summary-json "$OUT/kill.json" "${args[@]}"
ps_pid=$LAST_PID
w=()
for i in 0 1 2 3; do start_worker "kill-w$i" --ps "127.0.0.1:$port"; w+=("$LAST_PID"); done
wait_for "$OUT/kill.jsonl" '"event":"data_epoch","epoch":1,' 60
sleep 0.3
kill -9 "${w[2]}"
for i in 0 1 3; do wait_pid "${w[$i]}" 120 || fail "worker $i exited non-zero after another was killed"; done
wait_pid "$ps_pid" 30 || fail "the ps exited non-zero after a worker was killed"
covered "$OUT/kill.jsonl" 2 kill
[ "$(json_field "$OUT/kill.json" workers_lost)" -eq 1 ] || fail "the summary does not count the loss"
pass "kill -9 of one of four: every sample once per epoch"

# 3b. A worker stopped (SIGSTOP) past --worker-timeout: lost, its ranges back to the pool;
# continued (SIGCONT), it finds its connection gone, registers again and trains on.
port=$(free_port)
start_ps stall-ps --listen "127.0.0.1:$port" --workers 2:3 --epochs 2 --worker-timeout 2 \
  --metrics "$OUT/stall.jsonl" --summary-json "$OUT/stall.json" "${args[@]}"
ps_pid=$LAST_PID
w=()
for i in 0 1 2; do start_worker "stall-w$i" --ps "127.0.0.1:$port"; w+=("$LAST_PID"); done
wait_for "$OUT/stall.jsonl" '"event":"workers","workers":3,' 60
wait_for "$OUT/stall.jsonl" '"what":"trained","worker":[0-9],"version":2[0-9],' 60
kill -STOP "${w[1]}"
wait_for "$OUT/stall.jsonl" '"why":"lost"' 20
kill -CONT "${w[1]}"
for i in 0 1 2; do wait_pid "${w[$i]}" 120 || fail "worker $i exited non-zero after the stall"; done
wait_pid "$ps_pid" 30 || fail "the ps exited non-zero after a worker stalled"
covered "$OUT/stall.jsonl" 2 stall
[ "$(json_field "$OUT/stall.json" workers_lost)" -eq 1 ] || fail "the stall was not counted as a loss"
[ "$(json_field "$OUT/stall.json" ranges_returned)" -ge 1 ] || fail "the stalled worker's range did not come back"
pass "SIGSTOP past the timeout, then SIGCONT: lost, its range back, it rejoins; every sample once"

# 4. The ps killed mid-epoch and started again from its checkpoints.
port=$(free_port)
mkdir -p "$OUT/ck"
psargs=(--listen "127.0.0.1:$port" --workers 2:4 --epochs 3 --metrics "$OUT/resume.jsonl"
  --summary-json "$OUT/resume.json" --checkpoint-dir "$OUT/ck" --checkpoint-every 10
  --checkpoint-seconds 0 "${args[@]}")
start_ps resume-ps "${psargs[@]}"
ps_pid=$LAST_PID
w=()
for i in 0 1 2; do start_worker "resume-w$i" --ps "127.0.0.1:$port"; w+=("$LAST_PID"); done
wait_for "$OUT/resume.jsonl" '"event":"data_epoch","epoch":1,' 60
sleep 0.4
kill -9 "$ps_pid"
wait "$ps_pid" 2>/dev/null || true
start_ps resume-ps2 "${psargs[@]}"
ps_pid=$LAST_PID
for i in 0 1 2; do wait_pid "${w[$i]}" 120 || fail "worker $i exited non-zero after the ps came back"; done
wait_pid "$ps_pid" 30 || fail "the resumed ps exited non-zero"
[ "$(json_field "$OUT/resume.json" resumed)" = True ] || fail "the ps did not resume from its checkpoint"
/usr/bin/python3 - "$OUT/resume.jsonl" <<'PY' || fail "the ps did not resume epoch 2 part-way"
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '"what":"resumed"' in l]
# Resumed inside epoch 2 (not from its start): fresh ranges from a position past 0.
assert len(r) == 1 and r[0]["epoch"] == 2 and r[0]["start"] > 0, r
PY
covered "$OUT/resume.jsonl" 3 resume
pass "ps kill -9 and restart: it resumed the epoch where its checkpoint was, every sample once"

# 5. A worker that leaves by itself after 40 steps.
WORKER_EXTRA=("" "--leave-after-step 40")
train sync 2 "$OUT/leave.json" --data-order ps --epochs 1 --metrics "$OUT/leave.jsonl" "${args[@]}"
WORKER_EXTRA=()
[ "$(json_field "$OUT/leave.json" workers_departed)" -eq 1 ] || fail "--leave-after-step: no departure counted"
covered "$OUT/leave.jsonl" 1 leave
pass "--leave-after-step: exit 0, one departure, every sample once"

# 6. Bad values.
ps_refuses "--workers 3:2" "--workers 0:2" "--workers 2:x" "--workers 2:4 --backup-workers 1" \
  "--workers 2:4 --data-order shards" "--data-order sometimes" "--workers 2:4 --eval-every 10" \
  "--workers 2:4 --shard 1/2" "--lr-scaling linear" "--workers 2:4 --lr-scaling sqrt"
pass "bad --workers and --data-order values: exit 2"
