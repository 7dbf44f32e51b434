#!/usr/bin/env bash
# Issue 41, point 1: the timeline (--timeline on pstrain local, the ps and the worker).
#  - a job's merged file loads with a JSON reader and nests and orders as a step does
#    (tests/timeline_check.py): 2 workers layer by layer; 1 worker over 2 ps shards (the
#    shards' clocks carried over by worker 0's offsets); 1 worker without the layered flags;
#    1 worker whose next step's weights come while its step computes (wk_pull_ahead);
#  - it keeps the steps asked for: --timeline-skip 3 --timeline-steps 10 gives steps 3..12;
#  - recording changes no bit of a sync job (the weights' checksum with and without it);
#  - a timeline in a directory that does not exist is one line and exit 2, from each program.
source "$(dirname "$0")/lib.sh"
CHECK="$(dirname "$0")/timeline_check.py"

timeline_job() { # timeline_job NAME WORKERS SHARDS LAYERED AHEAD ARGS...
  local name=$1 workers=$2 shards=$3 layered=$4 ahead=$5; shift 5
  "$LAUNCHER_BIN" local --workers "$workers" --ps-shards "$shards" --epochs 1 --batch-size 256 \
    --device "${DEVICE:-null}" --seed 7 --run-dir "$OUT/$name" --timeline "$OUT/$name.json" \
    --timeline-skip 3 --timeline-steps 10 "$@" >"$OUT/$name.out" 2>&1 ||
    fail "$name: pstrain local --timeline failed"
  local got
  got=$(/usr/bin/python3 "$CHECK" "$OUT/$name.json" "$workers" "$shards" "$layered" "$ahead" 2>&1) ||
    fail "$name: the merged timeline: $got"
  pass "$name: $got"
}

timeline_job two_workers 2 1 1 0 --model cnn2
timeline_job two_shards 1 2 1 0 --model mlp
timeline_job plain 1 1 0 0 --model mlp --push-by-layer false --pull-by-layer false
# One worker on one shard, mlp's first layer in pieces of 256 KiB chunks (pstrain local's
# default for null workers), paced as a GPU (1.3 ms a step) so that the backward pass's
# pieces leave while it runs: each next step's PULL goes out during the backward pass.
DEVICE=null:193500 timeline_job ahead 1 1 1 1 --model mlp

# The window: the steps kept, per worker, are exactly 3..12.
/usr/bin/python3 - "$OUT/two_workers.json" <<'PY' || fail "the timeline's window of steps"
import json, sys
doc = json.load(open(sys.argv[1]))
pids = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
for pid, name in pids.items():
    steps = sorted({e["args"]["step"] for e in doc["traceEvents"] if e["pid"] == pid and "step" in e.get("args", {})})
    assert steps == list(range(3, 13)), (name, steps)
PY
pass "the window: steps 3 to 12 in every process"

plain=$(local_checksum no_timeline --device null --model cnn2)
recorded=$(local_checksum with_timeline --device null --model cnn2 --timeline "$OUT/checksum.json")
[ "$plain" = "$recorded" ] || fail "the timeline changed the weights: $plain without, $recorded with"
pass "recording changes no bit: checksum $plain with and without"

bad="$OUT/no-such-dir/t.json"
for prog in "$PS_BIN --workers 1" "$WORKER_BIN" "$LAUNCHER_BIN local --epochs 1"; do
  set +e
  $prog --timeline "$bad" >"$OUT/bad.out" 2>&1
  rc=$?
  set -e
  [ "$rc" = 2 ] || fail "$prog --timeline in a missing directory: exit $rc, not 2"
  [ "$(grep -c . "$OUT/bad.out")" = 1 ] && grep -q "no-such-dir" "$OUT/bad.out" ||
    fail "$prog --timeline in a missing directory: not one line naming it: $(cat "$OUT/bad.out")"
done
pass "a timeline in a missing directory: one line and exit 2 from the ps, the worker and pstrain local"
echo "6 passed, 0 failed"
