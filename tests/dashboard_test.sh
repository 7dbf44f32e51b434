#!/usr/bin/env bash
# The dashboard (issue 15, item 4) on the ps's metrics port during a sync job of 2 workers:
# `/` is one self-contained HTML page, `/status.json` is the STATUS object with the curves'
# points (the test curve equal to the metrics file's eval records), and in headless
# Chromium the page fills in its status line and worker rows from /status.json and draws
# the curves (pixels of the train curve's colour in a screenshot). Without Chromium
# (Debian's chromium package, which `./pstrain test` installs and `./pstrain demo` does
# not) the browser part is skipped with a notice.
source "$(dirname "$0")/lib.sh"
CHECK="$RUNFILES/tests/dashboard_check.py"
port=$(free_port)
mport=$(free_port)
start_ps ps --listen "127.0.0.1:$port" --workers 2 --epochs 4 --model mlp \
  --metrics-listen "$mport" --metrics "$OUT/metrics.jsonl"
ps_pid=$LAST_PID
wait_for "$OUT/ps.log" "metrics on http://127.0.0.1:$mport/metrics" 10
# Each step waits 2 x 5 ms besides its compute (--delay-ms), so that the job outlasts the
# browser on any CPU: at least 14 s after epoch 1 (a compute-relative --slow-factor would
# shrink with a faster CPU).
start_worker w0 --ps "127.0.0.1:$port" --delay-ms 5
w0=$LAST_PID
start_worker w1 --ps "127.0.0.1:$port" --delay-ms 5
w1=$LAST_PID
url="http://127.0.0.1:$mport"
get() { /usr/bin/python3 -c 'import sys, urllib.request; r = urllib.request.urlopen(sys.argv[1], timeout=5); print(r.headers["Content-Type"]); sys.stdout.write(r.read().decode())' "$1"; }

get "$url/" >"$OUT/page.txt" || fail "GET /"
head -1 "$OUT/page.txt" | grep -q "^text/html" || fail "/ is $(head -1 "$OUT/page.txt")"
tail -n +2 "$OUT/page.txt" >"$OUT/page.html"
/usr/bin/python3 "$CHECK" page "$OUT/page.html" || fail "the page"
pass "/ is a self-contained HTML page"

# After epoch 1's evaluation (the sync job's 468th version), so that the test curve has a point.
wait_for "$OUT/metrics.jsonl" '"event":"eval","epoch":1' 60
get "$url/status.json" >"$OUT/status.txt" || fail "GET /status.json"
head -1 "$OUT/status.txt" | grep -q "^application/json" || fail "/status.json is $(head -1 "$OUT/status.txt")"
tail -n +2 "$OUT/status.txt" >"$OUT/status.json"
/usr/bin/python3 - "$OUT/status.json" "$OUT/metrics.jsonl" <<'PY' || fail "/status.json"
import json, sys
s = json.load(open(sys.argv[1]))
evals = {r["epoch"]: r for r in map(json.loads, open(sys.argv[2])) if r.get("event") == "eval"}
assert s["mode"] == "sync" and s["workers"] == 2 and s["model"] == "mlp", s
assert s["worker_steps_total"] == 4 * 468 and len(s["worker_slots"]) == 2, s
train, test = s["train_curve"], s["test_curve"]
assert len(train) >= 5 and all(len(p) == 3 for p in train), train
assert [p[0] for p in train] == sorted(p[0] for p in train)
e = test[0]
assert e[0] == 1 and e[1] == evals[1]["version"], (e, evals[1])
assert abs(e[2] - evals[1]["loss"]) < 1e-5 and abs(e[3] - evals[1]["accuracy"]) < 1e-6, (e, evals[1])
print(f"{len(train)} training points, epoch 1 at version {e[1]}: accuracy {e[3]:.4f}")
PY
pass "/status.json: the status, the training curve and epoch 1's test point"

chrome=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chrome" ]; then
  echo "SKIP: no chromium here (Debian's chromium package): the page was not rendered"
else
  # --virtual-time-budget lets the page's first polls run before the DOM and the picture
  # are taken. No sandbox: the test may run as root, where Chromium's sandbox refuses to start.
  flags=(--headless --no-sandbox --disable-gpu --no-first-run --disable-extensions
         --user-data-dir="$OUT/chrome" --window-size=1100,900 --virtual-time-budget=4000)
  timeout 60 "$chrome" "${flags[@]}" --dump-dom "$url/" >"$OUT/dom.html" 2>"$OUT/chrome-dom.log" \
    || fail "chromium --dump-dom: $(tail -3 "$OUT/chrome-dom.log")"
  /usr/bin/python3 "$CHECK" dom "$OUT/dom.html" || fail "the page did not get its data"
  timeout 60 "$chrome" "${flags[@]}" --screenshot="$OUT/dashboard.png" "$url/" \
    >"$OUT/chrome-shot.log" 2>&1 || fail "chromium --screenshot: $(tail -3 "$OUT/chrome-shot.log")"
  /usr/bin/python3 "$CHECK" png "$OUT/dashboard.png" || fail "no curves in the screenshot"
  pass "headless Chromium: the page filled in its data and drew the curves ($OUT/dashboard.png)"
fi
wait_pid "$w0" 120 || fail "worker 0 failed"
wait_pid "$w1" 120 || fail "worker 1 failed"
wait_pid "$ps_pid" 30 || fail "ps failed"
echo "3 passed, 0 failed"
