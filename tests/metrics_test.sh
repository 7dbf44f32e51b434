#!/usr/bin/env bash
# /metrics (issue 15, item 1): a sync job of 2 workers, 2 epochs, with the ps and both
# workers serving /metrics on ports of their own. The ps's port is scraped every 0.1 s while
# it trains, each scrape checked by Prometheus' own parser (python3-prometheus-client), and
# no counter or histogram series may ever go down between two scrapes. Then the figures
# must agree with the ps's other outputs: the test accuracy a scrape showed after epoch 1
# is the metrics file's eval record of epoch 1, and the last scrape's counters are at most
# the summary's (equal for those that were final by then). A worker's /metrics is scraped
# and parsed too, with its pulls, pushes and steps counted.
source "$(dirname "$0")/lib.sh"
CLIENT="$RUNFILES/tests/metrics_client.py"
port=$(free_port)
start_ps ps --listen "127.0.0.1:$port" --mode sync --workers 2 --epochs 2 --model mlp \
  --metrics-listen 0 --metrics "$OUT/metrics.jsonl" --summary-json "$OUT/summary.json"
ps_pid=$LAST_PID
wait_for "$OUT/ps.log" "metrics on http://127.0.0.1:[0-9]+/metrics" 10
ps_url=$(grep -oE "http://127.0.0.1:[0-9]+/metrics" "$OUT/ps.log")
# A worker's port given as a bare port: 127.0.0.1.
wport=$(free_port)
# Each step waits 2 x 3 ms besides its compute (--delay-ms): at least 5 s from step 100 to
# the end on any CPU, for the worker's scrapes while it trains.
start_worker w0 --ps "127.0.0.1:$port" --index 0 --metrics-listen "$wport" --delay-ms 3
w0=$LAST_PID
start_worker w1 --ps "127.0.0.1:$port" --index 1 --delay-ms 3
w1=$LAST_PID
/usr/bin/python3 "$CLIENT" watch "$ps_url" "$OUT/scrapes" 0.1 >"$OUT/watch.out" 2>&1 &
watch_pid=$!
PIDS+=("$watch_pid")

# The worker's port while it trains.
wait_for "$OUT/w0.log" "metrics on http://127.0.0.1:$wport/metrics" 20
wait_step "$OUT/metrics.jsonl" 100 60
wurl="http://127.0.0.1:$wport/metrics"
steps=$(/usr/bin/python3 "$CLIENT" get "$wurl" pstrain_steps_total) || fail "worker scrape"
pulls=$(/usr/bin/python3 "$CLIENT" get "$wurl" pstrain_pull_seconds_count)
pushes=$(/usr/bin/python3 "$CLIENT" get "$wurl" pstrain_push_seconds_count)
compute=$(/usr/bin/python3 "$CLIENT" get "$wurl" pstrain_compute_seconds_total)
data=$(/usr/bin/python3 "$CLIENT" get "$wurl" pstrain_data_seconds_total)
at_least "$steps" 50 || fail "the worker's pstrain_steps_total is $steps"
at_least "$pulls" "$steps" || fail "worker: $pulls pulls timed for $steps steps"
at_least "$pushes" "$(/usr/bin/python3 -c "print($steps - 1)")" || fail "worker: $pushes pushes timed for $steps steps"
at_least "$compute" 0.001 || fail "worker: no compute time"
at_least "$data" 0.000001 || fail "worker: no data time"
pass "worker /metrics: $steps steps, $pulls pulls and $pushes pushes timed, ${compute}s computing (${data}s of it gathering batches)"

wait_pid "$w0" 120 || fail "worker 0 failed"
wait_pid "$w1" 120 || fail "worker 1 failed"
wait_pid "$ps_pid" 30 || fail "ps failed"
wait "$watch_pid" || fail "the scrapes: $(cat "$OUT/watch.out")"
n=$(tail -1 "$OUT/watch.out")
at_least "$n" 10 || fail "only $n scrapes"
pass "$n scrapes of the ps, each parsed by prometheus_client, no counter ever went down"

# Agreement with the metrics file and the summary.
/usr/bin/python3 - "$OUT/scrapes" "$n" "$OUT/metrics.jsonl" "$OUT/summary.json" <<'PY' || fail "figures disagree"
import json, sys
sys.path.insert(0, __import__("os").path.dirname(sys.argv[0]) or ".")
from prometheus_client.parser import text_string_to_metric_families
d, n = sys.argv[1], int(sys.argv[2])
def load(i):
    out = {}
    for fam in text_string_to_metric_families(open(f"{d}/scrape-{i}.txt").read()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out
scrapes = [load(i) for i in range(n)]
evals = {r["epoch"]: r for r in map(json.loads, open(sys.argv[3])) if r.get("event") == "eval"}
summary = json.load(open(sys.argv[4]))
g = lambda s, name, **l: s[(name, tuple(sorted(l.items())))]
# A scrape taken with epoch 1 evaluated (and not yet 2) shows epoch 1's figures.
after1 = [s for s in scrapes if g(s, "pstrain_epochs_evaluated") == 1]
assert after1, "no scrape between the two evaluations"
for s in after1:
    assert abs(g(s, "pstrain_test_accuracy") - evals[1]["accuracy"]) < 1e-6, (g(s, "pstrain_test_accuracy"), evals[1])
    assert abs(g(s, "pstrain_test_loss") - evals[1]["loss"]) < 1e-6
last = scrapes[-1]
pairs = [("pstrain_gradients_applied_total", "gradients_applied"),
         ("pstrain_gradients_dropped_total", "dropped_gradients"),
         ("pstrain_model_version", "updates"), ("pstrain_samples_trained_total", "samples")]
for name, key in pairs:
    assert g(last, name) <= summary[key], (name, g(last, name), summary[key])
# The data wait is a sum of doubles: /metrics prints it exactly, the summary (Debian's cJSON)
# with 15 significant digits whenever they read back within DBL_EPSILON, so the two agree
# to the 15th digit, not always bit for bit.
wait = lambda x: float("%.15g" % x)
assert wait(g(last, "pstrain_data_wait_seconds_total")) <= wait(summary["data_wait_seconds"]), \
    (g(last, "pstrain_data_wait_seconds_total"), summary["data_wait_seconds"])
# Training was over at the last scrape when both workers had said BYE: nothing moves after.
if g(last, "pstrain_workers_finished") == 2:
    for name, key in pairs:
        assert g(last, name) == summary[key], (name, g(last, name), summary[key])
    assert wait(g(last, "pstrain_data_wait_seconds_total")) == wait(summary["data_wait_seconds"])
assert g(last, "pstrain_gradient_staleness_count") == g(last, "pstrain_gradients_applied_total")
assert g(last, "pstrain_push_seconds_count") == g(last, "pstrain_gradients_applied_total")
assert g(last, "pstrain_pull_seconds_count") >= g(last, "pstrain_model_version")
assert sum(g(last, "pstrain_worker_gradients_applied_total", worker=str(i)) for i in range(2)) \
    == g(last, "pstrain_gradients_applied_total")
assert g(last, "pstrain_received_bytes_total") > 0 and g(last, "pstrain_sent_bytes_total") > 0
assert g(last, "pstrain_resident_memory_bytes") > 1e6
assert g(last, "pstrain_optimizer_info", optimizer="adam", mode="sync", model="mlp") == 1
# The data wait: each training record's share, summed per epoch in the eval records and over
# the run in the summary (records print 4 decimals).
records = [r for r in map(json.loads, open(sys.argv[3]))]
train_wait = [r["data_wait"] for r in records if r.get("event") == "train"]
assert train_wait and all(w >= 0 for w in train_wait), train_wait[:5]
assert abs(sum(train_wait) - summary["data_wait_seconds"]) < 1e-4 * len(train_wait) + 1e-9
assert abs(sum(e["data_wait"] for e in evals.values()) - summary["data_wait_seconds"]) < 1e-3
mid = scrapes[len(scrapes) // 2]
assert g(mid, "pstrain_samples_per_second") > 0
assert g(mid, "pstrain_step_seconds_count") > 0
print(f"{len(after1)} scrapes after epoch 1 show its accuracy {evals[1]['accuracy']}; "
      f"the last one ({'final' if g(last, 'pstrain_workers_finished') == 2 else 'before the end'}) "
      f"agrees with the summary")
PY
pass "the scraped figures agree with the metrics file and the summary"

# A port in use is a configuration error, in one line.
busy=$(free_port)
/usr/bin/python3 -c 'import socket,sys,time; s=socket.socket(); s.bind(("127.0.0.1",int(sys.argv[1]))); s.listen(); time.sleep(10)' "$busy" &
PIDS+=("$!")
sleep 0.3
rc=0
"$PS_BIN" --listen "127.0.0.1:$(free_port)" --metrics-listen "$busy" >"$OUT/busy.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "the ps started with its metrics port in use"
grep -q "metrics-listen: cannot listen on 127.0.0.1:$busy" "$OUT/busy.log" || fail "no reason given for the busy port"
rc=0
"$PS_BIN" --listen "127.0.0.1:$(free_port)" --metrics-listen "nonsense:port" >"$OUT/bad.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "metrics-listen" "$OUT/bad.log" || fail "a bad --metrics-listen was accepted"
pass "a busy or malformed --metrics-listen stops the ps with its reason"
echo "4 passed, 0 failed"
