#!/usr/bin/env bash
# A hostile scraper (issue 15): while a sync job of 2 workers trains, the ps's metrics port
# gets, round after round, garbage, a request past the size cap, a POST, 200 idle
# connections and clients that ask and never read. Each bad request gets its 4xx and only
# its own connection closes (a good one opened before them is answered after them); the
# port never holds more than its cap of connections; a real scrape always gets through; the
# ps's RSS does not grow from round to round; and training finishes as it should. Each of
# the workers' steps waits 2 x 16 ms besides its compute (--delay-ms), so that the job lasts
# at least 30 s on any machine and outlasts the 5 rounds (a few seconds each): at
# --slow-factor 4 a faster ps finished the job within the first round, and a slow-down in
# proportion to the compute shrinks with a faster CPU.
source "$(dirname "$0")/lib.sh"
CLIENT="$RUNFILES/tests/metrics_client.py"
port=$(free_port)
mport=$(free_port)
start_ps ps --listen "127.0.0.1:$port" --mode sync --workers 2 --epochs 2 --model mlp \
  --metrics-listen "127.0.0.1:$mport" --summary-json "$OUT/summary.json"
ps_pid=$LAST_PID
wait_for "$OUT/ps.log" "metrics on http://127.0.0.1:$mport/metrics" 10
start_worker w0 --ps "127.0.0.1:$port" --index 0 --delay-ms 16
w0=$LAST_PID
start_worker w1 --ps "127.0.0.1:$port" --index 1 --delay-ms 16
w1=$LAST_PID
wait_for "$OUT/ps.log" "all 2 workers registered" 30
/usr/bin/python3 "$CLIENT" abuse 127.0.0.1 "$mport" "$ps_pid" 5 >"$OUT/abuse.out" 2>&1 \
  || fail "the hostile scraper: $(tail -3 "$OUT/abuse.out")"
cat "$OUT/abuse.out"
kill -0 "$ps_pid" 2>/dev/null || fail "the ps was gone before the abuse ended (training too short for the test)"
pass "5 rounds of garbage, oversized requests, 200 idle and 20 never-reading connections: each answered or capped, RSS flat"
wait_pid "$w0" 120 || fail "worker 0 failed"
wait_pid "$w1" 120 || fail "worker 1 failed"
wait_pid "$ps_pid" 30 || fail "ps failed"
acc=$(json_field "$OUT/summary.json" test_accuracy)
at_least "$acc" 0.84 || fail "test accuracy $acc < 0.84"
[ "$(json_field "$OUT/summary.json" updates)" = "936" ] || fail "expected 936 sync steps"
pass "training finished: 936 steps, test accuracy $acc"
echo "2 passed, 0 failed"
