#!/usr/bin/env bash
# --lr-schedule cosine (ps/train/update.h): a job under it trains, its summary says so and gives
# the last step's learning rate, a small positive share of --lr (a constant job's is --lr
# itself), the weights differ from the constant job's, and two cosine jobs end bit-identical.
# `pstrain local` passes the flag on; bad values and a schedule over workers that come and
# go are refused with exit 2. `pstrain local` passes --lr-scaling on too.
source "$(dirname "$0")/lib.sh"
cos=$(local_checksum cos --optimizer momentum --lr 0.05 --lr-schedule cosine)
again=$(local_checksum cos2 --optimizer momentum --lr 0.05 --lr-schedule cosine)
const=$(local_checksum const --optimizer momentum --lr 0.05)
[ "$cos" = "$again" ] || fail "two cosine jobs ended with other weights: $cos, $again"
[ "$cos" != "$const" ] || fail "the cosine job's weights are the constant job's"
[ "$(json_field "$OUT/cos.json" lr_schedule)" = cosine ] || fail "the summary's lr_schedule is not cosine"
[ "$(json_field "$OUT/const.json" lr_schedule)" = constant ] || fail "the constant job's lr_schedule"
/usr/bin/python3 - "$OUT/cos.json" "$OUT/const.json" <<'PY' || fail "learning rates or accuracy"
import json, math, sys
cos, const = (json.load(open(f)) for f in sys.argv[1:])
# The job planned its steps (n: 1 epoch of 2 workers at batch 256) and ran them all; the
# last runs at (1 + cos(pi (n - 1) / n)) / 2 of 0.05.
n = cos["updates"]
want = 0.05 * (1 + math.cos(math.pi * (n - 1) / n)) / 2
assert n == 117 and const["updates"] == n, (n, const["updates"])
assert math.isclose(cos["learning_rate_last"], want, rel_tol=1e-3), (cos["learning_rate_last"], want)
assert math.isclose(const["learning_rate_last"], 0.05, rel_tol=1e-6), const["learning_rate_last"]
assert cos["test_accuracy"] >= 0.80, cos["test_accuracy"]
PY
pass "cosine: trained ($(json_field "$OUT/cos.json" test_accuracy)), last rate $(json_field "$OUT/cos.json" learning_rate_last), bit-identical twice, other weights than constant"
ps_refuses "--lr-schedule step" "--lr-schedule=" "--workers 2:4 --lr-schedule cosine" \
  "--data-order ps --lr-schedule cosine"
rc=0
"$LAUNCHER_BIN" local --lr-schedule bogus --run-dir "$OUT/bogus" >"$OUT/bogus.log" 2>&1 || rc=$?
[ "$rc" -eq 2 ] && [ "$(wc -l <"$OUT/bogus.log")" -eq 1 ] || fail "pstrain local --lr-schedule bogus: exit $rc"
pass "bad --lr-schedule values and a schedule over a handout: exit 2 (the ps, and pstrain local in one line)"
# --lr-scaling linear (issue 43, item D): pstrain local passes it on to the ps of an elastic job.
"$LAUNCHER_BIN" local --workers 2:3 --mode sync --model mlp --epochs 1 --batch-size 256 --seed 7 \
  --lr-scaling linear --run-dir "$OUT/scaled" --summary-json "$OUT/scaled.json" >"$OUT/scaled.out" 2>&1 ||
  fail "pstrain local --workers 2:3 --lr-scaling linear failed"
[ "$(json_field "$OUT/scaled.json" lr_scaling)" = linear ] || fail "the elastic job's summary: lr_scaling is not linear"
[ "$(json_field "$OUT/const.json" lr_scaling)" = none ] || fail "a job without --lr-scaling: lr_scaling is not none"
rc=0
"$LAUNCHER_BIN" local --lr-scaling sqrt --run-dir "$OUT/sqrt" >"$OUT/sqrt.log" 2>&1 || rc=$?
[ "$rc" -eq 2 ] && [ "$(wc -l <"$OUT/sqrt.log")" -eq 1 ] || fail "pstrain local --lr-scaling sqrt: exit $rc"
pass "pstrain local --lr-scaling linear reaches the ps (its summary says linear); sqrt: exit 2"
echo "3 passed, 0 failed"
