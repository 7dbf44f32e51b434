#!/usr/bin/env bash
# pstrain gpu-check (issue 24, point 4): a bad flag is one line and status 2; without a GPU
# it says so, writes its report and exits non-zero; the dry run on the CPU (--device cpu)
# takes every check through its plumbing (the test binaries, `pstrain local` for each
# preset and two workers, bench-train, the report) and passes them all.
# tests/bundle_test.sh runs the same dry run from an unpacked bundle.
source "$(dirname "$0")/lib.sh"
export PSTRAIN_PS_BIN="$PS_BIN" PSTRAIN_WORKER_BIN="$WORKER_BIN"
export PSTRAIN_BENCHCLIENT_BIN="$RUNFILES/tools/pstrain-benchclient"
for t in cuda_parity_test preset_parity_test layered_test device_test; do
  export "PSTRAIN_${t^^}_BIN=$RUNFILES/kernels/cuda/$t"
done
export PSTRAIN_STAGES_PARITY_TEST_BIN="$RUNFILES/kernels/pipeline/stages_parity_test"
check() { /usr/bin/python3 "$RUNFILES/tests/gpu_report_check.py" "$@"; }

rc=0; "$LAUNCHER_BIN" gpu-check --device gpu0 --out "$OUT/bad" >"$OUT/bad.log" 2>&1 || rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$OUT/bad.log")" -eq 1 ] || fail "bad --device: rc $rc"

if "$WORKER_BIN" --list-devices 2>/dev/null | grep -q '^cuda:'; then
  echo "a GPU is here: the no-GPU case does not apply"
else
  rc=0
  "$LAUNCHER_BIN" gpu-check --out "$OUT/nogpu" --data-dir "$DATA_DIR" >"$OUT/nogpu.log" 2>&1 || rc=$?
  [ $rc -eq 1 ] || fail "no GPU: rc $rc"
  check "$OUT/nogpu/report.json" nogpu || fail "no GPU: the report"
  pass "no GPU: said, non-zero exit, a report with the failed devices check"
fi

rc=0
"$LAUNCHER_BIN" gpu-check --device cpu --out "$OUT/dry" --data-dir "$DATA_DIR" >"$OUT/dry.log" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "dry run: rc $rc"
check "$OUT/dry/report.json" pass || fail "dry run: the report"
[ -s "$OUT/dry/report.md" ] || fail "dry run: no report.md"
pass "dry run: every check passed, the report complete"
echo "1 passed, 0 failed"
