#!/usr/bin/env bash
# Parameter server or all-reduce, placed (issue 39; docs/benchmarks.md, "All-reduce beside the
# ps"): 4 workers, mlp, 1 epoch, sync, every process behind a link of RATE (default
# 1gbit,1ms), as one `pstrain compare`:
#   one separate ps (separate:1), 4 colocated shards, 4 separate shards, and a ring
#   all-reduce (--ar-algorithm ring);
# then each setting's training time per step beside the bytes model's (the busiest link's
# bytes in each phase at the link's rate, plus the step's round trips: launcher/links/place.h)
# and its busiest link's bytes per step beside the model's. Says whether each time is within
# 25% of the model and whether 4 separate shards beat the all-reduce.
#   tools/placement_bench.sh [LINK [OUT]]   (as root, after `bazel build //...`)
set -euo pipefail
cd "$(dirname "$0")/.."
LINK=${1:-1gbit,1ms}
OUT=${2:-$(mktemp -d /tmp/pstrain-placement-XXXXXX)}
rm -rf "$OUT"
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE bazel-bin/launcher/pstrain compare --workers 4 \
  --model mlp --epochs 1 --modes sync,allreduce --ar-algorithm ring \
  --placements separate:1,colocated,separate:4 --links "$LINK" --targets 0.80,0.84 \
  --out "$OUT" >"$OUT.log" 2>&1 || { tail -20 "$OUT.log"; exit 1; }
python3 - "$OUT/compare.json" "$LINK" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
print(f"link {sys.argv[2]}, 4 workers, mlp, 1 epoch (sync; all-reduce: Open MPI's ring)")
print(f"{'setting':34} {'ms/step':>8} {'model':>7} {'ratio':>6} {'MB/step':>8} {'model':>7} "
      f"{'samples/s':>9} {'accuracy':>8}")
times, ok = {}, True
for s in doc["settings"]:
    r = s["runs"][0]
    st, ms = r["step_seconds"], r["model_step_seconds"]
    b, mb = r["busiest_link_bytes_per_step"], r["model_bytes_per_step"]
    if st is None or ms is None:
        print(f"{s['label']:34} (no figures: run failed, exit {r['exit_status']})")
        ok = False
        continue
    ratio = st / ms
    times[s["label"]] = st
    within = abs(ratio - 1) <= 0.25
    ok &= within
    print(f"{s['label']:34} {st * 1e3:8.1f} {ms * 1e3:7.1f} {ratio:6.2f} {b / 1e6:8.3f} "
          f"{mb / 1e6:7.3f} {r['samples_per_sec']:9.0f} {r['test_accuracy']:8.4f}"
          f"{'' if within else '  (not within 25%)'}")
sep = [v for k, v in times.items() if "separate:4" in k]
ar = [v for k, v in times.items() if k.startswith("allreduce")]
if sep and ar:
    faster = sep[0] < ar[0]
    print(f"4 separate shards {'faster' if faster else 'NOT faster'} than the all-reduce: "
          f"{sep[0] * 1e3:.1f} against {ar[0] * 1e3:.1f} ms a step")
    ok &= faster
print("targets:", "held" if ok else "missed (see docs/benchmarks.md for why)")
PY
echo "compare's report: $OUT/report.html"
