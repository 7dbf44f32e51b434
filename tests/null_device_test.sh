#!/usr/bin/env bash
# Issue 26, points 1 and 2: the null device and the round trip.
#  - a sync job of null workers (--device null: no compute, a fixed gradient) ends on the
#    same weights layer by layer (the null device's default) and without, and over 2 ps
#    shards: the gradient is of the model's exact size, layer by layer as a backward pass
#    makes it;
#  - the summary gives each worker step's round trip: every step after a worker's first
#    measured, and each part's p50 between 0 and the exposed wait's p99;
#  - null:RATE paces the steps: a job at 20,000 samples/s runs no faster than that;
#  - a bad device is one line and exit 2 before anything starts.
source "$(dirname "$0")/lib.sh"

null_job() { # null_job NAME ARGS...: cnn2 (a model of several layers) on null workers
  local_checksum "$@" --device null --model cnn2
}

plain=$(null_job plain --push-by-layer false --pull-by-layer false)
layered=$(null_job layered)
sharded=$(null_job sharded --ps-shards 2)
[ "$plain" = "$layered" ] && [ "$plain" = "$sharded" ] ||
  fail "null workers: checksum $plain plain, $layered layer by layer, $sharded over 2 shards"
pass "null workers: checksum $plain plain, layer by layer and over 2 shards"

/usr/bin/python3 - "$OUT/plain.json" "$OUT/layered.json" <<'PY' || fail "round trip figures"
import json, sys
for path in sys.argv[1:]:
    s = json.load(open(path))
    steps = s["updates"]            # sync: one version per step of both workers
    measured = s["round_trip_steps"]
    # Every step but each worker's first (no step before it) and its last (no push after it).
    assert measured >= 2 * (steps - 2), (path, measured, steps)
    rt = s["round_trip_ms"]
    whole = rt["exposed"]
    assert 0 < whole["p50"] <= whole["p99"], (path, rt)
    for part in ("wire", "queued", "sum", "optimizer", "sending"):
        assert 0 <= rt[part]["p50"] <= rt[part]["p99"], (path, part, rt)
        assert rt[part]["p50"] <= whole["p99"] * 1.02, (path, part, rt)
    print(path, "exposed p50 %.3f ms p99 %.3f ms" % (whole["p50"], whole["p99"]))
PY
pass "the summary gives every step's round trip and its parts"

# null:20000 with batch 2048 is 0.1 s a step, 29 steps to the epoch; the first step counts
# the model's work and takes no time, so the bound is 29/28 of the pace, and 1% over.
"$LAUNCHER_BIN" local --workers 1 --model mlp --epochs 1 --batch-size 2048 --device null:20000 \
  --run-dir "$OUT/paced" --summary-json "$OUT/paced.json" >"$OUT/paced.out" 2>&1 ||
  fail "null:20000: pstrain local failed"
sps=$(json_field "$OUT/paced.json" samples_per_sec)
at_least 21000 "$sps" || fail "null:20000 trained $sps samples/s, faster than its pace"
pass "null:20000 paces the job: $sps samples/s"

set +e
"$WORKER_BIN" --device null:fast --ps 127.0.0.1:1 >"$OUT/bad.out" 2>&1
rc=$?
set -e
[ $rc -eq 2 ] && [ "$(grep -c . "$OUT/bad.out")" -eq 1 ] || fail "--device null:fast: status $rc"
pass "--device null:fast refused: status $rc"
echo "4 passed, 0 failed"
