#!/usr/bin/env bash
# Parameter server or all-reduce, placed (issue 39; docs/benchmarks.md, "Where the ps sits,
# beside the ring, behind links"): 4 workers, mlp, 1 epoch, sync, every process behind a link
# of LINK (default 1gbit,1ms), as one `pstrain compare`:
#   one separate ps (separate:1), 4 colocated shards, 4 separate shards, and a ring
#   all-reduce (--ar-algorithm ring);
# each once behind LINK and once behind COMPUTE (default 10gbit, no delay: links that cost
# next to nothing), REPEATS times (default 3), alternating: repeat k of every setting runs
# before repeat k+1 of any. The step-time model (launcher/links/place.h) is each setting's
# measured time per step behind COMPUTE in the same repeat (compute, the ps's sums, the
# network stacks) plus its communication: the busiest link's bytes in each phase at LINK's
# rate plus the step's latency-bound hops at LINK's delay. Prints the medians over repeats
# of each setting's time per step beside the model's and its parts, and the busiest link's
# bytes per step beside the model's; says whether each time is within 25% of the model and
# whether 4 separate shards beat the all-reduce.
#   tools/placement_bench.sh [LINK [OUT [REPEATS [COMPUTE]]]]   (as root, after bazel build //...)
set -euo pipefail
cd "$(dirname "$0")/.."
LINK=${1:-1gbit,1ms}
OUT=${2:-$(mktemp -d /tmp/pstrain-placement-XXXXXX)}
REPEATS=${3:-3}
COMPUTE=${4:-10gbit}
rm -rf "$OUT"
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE bazel-bin/launcher/pstrain compare --workers 4 \
  --model mlp --epochs 1 --modes sync,allreduce --ar-algorithm ring \
  --placements separate:1,colocated,separate:4 --links "$LINK;$COMPUTE" \
  --compute-link "$COMPUTE" --repeats "$REPEATS" --targets 0.80,0.84 \
  --out "$OUT" >"$OUT.log" 2>&1 || { tail -20 "$OUT.log"; exit 1; }
python3 - "$OUT/compare.json" "$LINK" "$COMPUTE" "$REPEATS" <<'PY'
import json, statistics, sys
doc = json.load(open(sys.argv[1]))
link, compute, repeats = sys.argv[2], sys.argv[3], sys.argv[4]
print(f"link {link}, 4 workers, mlp, 1 epoch (sync; all-reduce: Open MPI's ring); medians of "
      f"{repeats} alternating repeats; compute measured behind {compute}")
print(f"{'setting':34} {'ms/step':>8} {'model':>7} {'ratio':>6} {'compute':>8} {'comm':>6} "
      f"{'MB/step':>8} {'model':>7} {'late ms':>7} {'accuracy':>8}")
def med(runs, key):
    v = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(v) if v else None
times, ok = {}, True
for s in doc["settings"]:
    if not s["label"].endswith("@" + link):
        continue
    runs = s["runs"]
    st, ms = med(runs, "step_seconds"), med(runs, "model_step_seconds")
    cs, cm = med(runs, "compute_seconds"), med(runs, "model_comm_seconds")
    b, mb = med(runs, "busiest_link_bytes_per_step"), med(runs, "model_bytes_per_step")
    late, acc = med(runs, "delay_line_late_mean_ms"), med(runs, "test_accuracy")
    if None in (st, ms, cs, cm, b, mb):
        print(f"{s['label']:34} (no figures: {sum(r['exit_status'] != 0 for r in runs)} runs failed)")
        ok = False
        continue
    ratio = st / ms
    times[s["label"]] = st
    within = abs(ratio - 1) <= 0.25
    ok &= within
    print(f"{s['label']:34} {st * 1e3:8.1f} {ms * 1e3:7.1f} {ratio:6.2f} {cs * 1e3:8.1f} "
          f"{cm * 1e3:6.1f} {b / 1e6:8.3f} {mb / 1e6:7.3f} "
          f"{late if late is not None else float('nan'):7.2f} {acc:8.4f}"
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
