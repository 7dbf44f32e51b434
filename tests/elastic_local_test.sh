#!/usr/bin/env bash
# An elastic `pstrain local` job (issue 28): --workers 2:4 with a schedule that starts two
# more workers once epoch 1 is trained and asks two to leave half-way through epoch 3. From
# the ps's own records: every sample of every epoch trained exactly once, and the training
# workers went 2 -> 4 -> 2; from the launcher: exit 0, and the two workers that left exited 0
# without being started again. A bad schedule is one line and exit 2 before anything starts.
source "$(dirname "$0")/lib.sh"
export PSTRAIN_PS_BIN="$PS_BIN" PSTRAIN_WORKER_BIN="$WORKER_BIN"
COVERAGE="$(dirname "$0")/data_coverage.py"
[ -f "$COVERAGE" ] || COVERAGE="$RUNFILES/tests/data_coverage.py"

# Bad values: each one line on stderr, nothing on stdout, exit 2, no process started.
bad() { # NAME ARGS...
  local name=$1 rc=0; shift
  "$LAUNCHER_BIN" local --epochs 3 --run-dir "$OUT/$name" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err" || rc=$?
  [ "$rc" = 2 ] && [ "$(wc -l <"$OUT/$name.err")" = 1 ] && [ ! -s "$OUT/$name.out" ] ||
    fail "$name: exit $rc, $(cat "$OUT/$name.out" "$OUT/$name.err")"
  [ -z "$(ls "$OUT/$name"/*.log 2>/dev/null)" ] || fail "$name: processes were started"
}
bad sched-garbage --workers 2:4 --schedule "epoch 1 +2"
bad sched-zero --workers 2:4 --schedule "epoch 1: +0"
bad sched-order --workers 2:4 --schedule "epoch 2: +1, epoch 1: -1"
bad sched-above-max --workers 2:4 --schedule "epoch 1: +3"
bad sched-none-left --workers 2:4 --schedule "epoch 1: -2"
bad sched-past-end --workers 2:4 --schedule "epoch 3: +1"
bad sched-trailing --workers 2:4 --schedule "epoch 1: +1,"
bad workers-range --workers 3:2
bad workers-zero --workers 0:2

run="$OUT/run"
rc=0
timeout 80 "$LAUNCHER_BIN" local --workers 2:4 --epochs 3 --batch-size 256 \
  --schedule "epoch 1: +2, epoch 2.5: -2" --run-dir "$run" >"$OUT/run.out" 2>&1 || rc=$?
[ "$rc" = 0 ] || fail "the elastic run exited $rc: $(tail -n 5 "$OUT/run.out")"

# Exactly-once coverage of 3 epochs of 60000 samples, from the ps's records.
/usr/bin/python3 "$COVERAGE" "$run/metrics.jsonl" 60000 3 >"$OUT/coverage.out" ||
  fail "coverage: $(tail -n 4 "$OUT/coverage.out")"
tail -n 1 "$OUT/coverage.out" >"$OUT/coverage.json"
[ "$(json_field "$OUT/coverage.json" ok)" = True ] || fail "coverage not ok"
[ "$(json_field "$OUT/coverage.json" most_workers)" = 4 ] || fail "most workers not 4"

# The series of training workers, from the ps's "workers" records: up to 2 (the first two
# joining), up to 4, down to 2 and no lower, with nobody lost; and the launcher's elastic.json:
# the two newest workers (the schedule's) asked to leave, each exit 0 by itself, never restarted.
/usr/bin/python3 - "$run/metrics.jsonl" "$run/elastic.json" <<'EOF' || fail "workers series or departures"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"event":"workers"' in l]
ns = [r["workers"] for r in recs]
whys = [r["why"] for r in recs]
assert ns == [1, 2, 3, 4, 3, 2], ns
assert whys == ["joined"] * 4 + ["departed"] * 2, whys
e = json.load(open(sys.argv[2]))
assert e["most_workers"] == 4 and e["departed"] == 2 and e["lost"] == 0, e
assert e["schedule_points_done"] == 2, e
procs = e["processes"]
assert len(procs) == 4, procs
left = [p for p in procs if p["asked_to_leave"]]
assert [p["slot"] for p in left] == [2, 3] and all(p["scheduled"] for p in left), left
for p in procs:
    assert p["exited"] and p["status"] == 0 and p["signal"] == 0 and p["restarts"] == 0, p
EOF
[ "$(json_field "$run/summary.json" epochs)" = 3 ] || fail "summary epochs"
pass "elastic local: --workers 2:4 with a schedule trains every sample once, 2 -> 4 -> 2 workers, departures exit 0; bad schedules exit 2"
echo "1 passed, 0 failed"
