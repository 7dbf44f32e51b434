#!/usr/bin/env bash
# (b) async, 2 workers, MLP, 1 epoch: test accuracy >= 0.84.
# Async runs are not reproducible: arrival order decides which weights each gradient sees.
# After one epoch the final model's accuracy spreads with the seed (0.82..0.86 at lr 1e-3,
# batch 64; the sync run's spread over seeds is 0.844..0.854). With lr 3e-4 and batch 16
# (3750 smaller updates) five seeds gave 0.842..0.852, and seed 4 gave 0.845..0.853 over
# seven runs, the spread due to arrival order alone; the bound is checked there.
source "$(dirname "$0")/lib.sh"
train async 2 "$OUT/async.json" --model mlp --epochs 1 --lr 0.0003 --batch-size 16 --seed 4
acc=$(json_field "$OUT/async.json" test_accuracy)
at_least "$acc" 0.84 || fail "async test accuracy $acc < 0.84"
updates=$(json_field "$OUT/async.json" updates)
[ "$updates" = "3750" ] || fail "expected 2 x 1875 async updates, got $updates"
pass "async: test accuracy $acc, mean staleness $(json_field "$OUT/async.json" mean_staleness)"
echo "1 passed, 0 failed"
