#!/usr/bin/env bash
# The emulated GPU worker's share of its rate (issue 41; docs/benchmarks.md, "The timeline and
# the emulated GPU worker"): 1 sync worker on `--device null:RATE` at the H100's compute-only
# rates (mlp and cnn2, batch 256 and 64), 1 epoch each, ROUNDS rounds with the builds in turns,
# and each cell's median share of the rate per build.
#   tools/emulated_share.sh [ROUNDS] [BUILD_DIR...]   (after `bazel build //...`)
# A BUILD_DIR holds ps/pstrain-ps, worker/pstrain-worker and launcher/pstrain (this tree's
# bazel-bin by default; a copy of another build's to compare with it). As root, the jobs run
# at real-time priority (chrt -f 10) so that other tenants' load does not decide the figures
# on a shared machine; PSTRAIN_SHARE_PRIO="" runs them as they are. PSTRAIN_SHARE_FLAGS, a
# ';'-separated list of `pstrain local` flag sets (e.g. "--shm true;--shm false"), runs each
# build once per set, in turns, as columns of their own.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
shift || true
BUILDS=("$@")
[ ${#BUILDS[@]} -gt 0 ] || BUILDS=("$PWD/bazel-bin")
IFS=';' read -r -a FLAGSETS <<<"${PSTRAIN_SHARE_FLAGS:-}"
[ ${#FLAGSETS[@]} -gt 0 ] || FLAGSETS=("")
COLS=()
for b in "${BUILDS[@]}"; do for f in "${FLAGSETS[@]}"; do COLS+=("$b|$f"); done; done
PRIO=${PSTRAIN_SHARE_PRIO-chrt -f 10}
[ "$(id -u)" = 0 ] || PRIO=""
OUT=$(mktemp -d /tmp/pstrain-share-XXXXXX)
CELLS=("mlp 256 193500" "cnn2 256 69100" "mlp 64 100800" "cnn2 64 33700")
for cell in "${CELLS[@]}"; do
  read -r model batch rate <<<"$cell"
  for r in $(seq 1 "$ROUNDS"); do
    for b in "${!COLS[@]}"; do
      bin=${COLS[$b]%%|*}
      read -r -a flags <<<"${COLS[$b]#*|}"
      tag="$model-$batch-b$b-$r"
      # shellcheck disable=SC2086
      $PRIO env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE PSTRAIN_PS_BIN="$bin/ps/pstrain-ps" \
        PSTRAIN_WORKER_BIN="$bin/worker/pstrain-worker" "$bin/launcher/pstrain" local \
        --workers 1 --mode sync --model "$model" --epochs 1 --batch-size "$batch" \
        --device "null:$rate" --run-dir "$OUT/$tag" --summary-json "$OUT/$tag.json" ${flags[@]+"${flags[@]}"} \
        >"$OUT/$tag.log" 2>&1 || { echo "$tag failed: $OUT/$tag.log" >&2; exit 1; }
    done
  done
done
for b in "${!COLS[@]}"; do echo "column $b: ${COLS[$b]%%|*} ${COLS[$b]#*|}"; done
python3 - "$OUT" "$ROUNDS" "${#COLS[@]}" "${CELLS[@]}" <<'PY'
import json, statistics, sys
out, rounds, nb, cells = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
print(f"1 sync worker, 1 epoch, {rounds} rounds in turns; share of the emulated rate, median (range)")
for cell in cells:
    model, batch, rate = cell.split()
    row = []
    for b in range(nb):
        runs = [json.load(open(f"{out}/{model}-{batch}-b{b}-{r}.json")) for r in range(1, rounds + 1)]
        shares = [100 * s["samples_per_sec"] / float(rate) for s in runs]
        sums = {s["weights_checksum"] for s in runs}
        row.append(f"column {b}: {statistics.median(shares):5.1f}% ({min(shares):.1f}-{max(shares):.1f})"
                   + ("" if len(sums) == 1 else " CHECKSUMS DIFFER"))
    print(f"{model:5} batch {batch:>3} null:{rate:<7} " + "  ".join(row))
PY
