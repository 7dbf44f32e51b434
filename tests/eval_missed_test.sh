#!/usr/bin/env bash
# Issue 43, item 4: every epoch evaluated without a slot's share counts it. A 3-worker sync
# job of 3 epochs whose worker 2 is stopped (SIGSTOP) early in epoch 1: lost after
# --worker-timeout, its slot given up after --rejoin-timeout, the others train on. Each of
# the 3 epochs is then evaluated without worker 2's share, and the summary's
# evaluations_missed is 3 (it counted only a late report before, and nothing for a lost
# worker's epochs), with every epoch still evaluated. Its shard's rest was never trained:
# the job ends with exit 5, naming slot 2.
source "$(dirname "$0")/lib.sh"
port=$(free_port)
start_ps ps --listen "127.0.0.1:$port" --workers 3 --summary-json "$OUT/s.json" \
  --metrics "$OUT/m.jsonl" --model mlp --epochs 3 --batch-size 64 --report-every 10 \
  --worker-timeout 2 --rejoin-timeout 2
ps_pid=$LAST_PID
for i in 0 1 2; do start_worker "w$i" --ps "127.0.0.1:$port" --index "$i"; w[$i]=$LAST_PID; done
wait_step "$OUT/m.jsonl" 20 60
kill -STOP "${w[2]}"
for i in 0 1; do wait_pid "${w[$i]}" 180 || fail "worker $i exited non-zero"; done
ps_incomplete "$ps_pid" 30 "$OUT/s.json" 2
kill -KILL "${w[2]}" 2>/dev/null || true
missed=$(json_field "$OUT/s.json" evaluations_missed)
evaluated=$(json_field "$OUT/s.json" epochs_evaluated)
[ "$evaluated" -eq 3 ] || fail "$evaluated epochs evaluated, not 3"
[ "$missed" -eq 3 ] || fail "evaluations_missed is $missed, not 3 (one per epoch without worker 2's share)"
pass "worker 2 stopped in epoch 1: 3 epochs evaluated without its share, evaluations_missed $missed"
echo "1 passed, 0 failed"
