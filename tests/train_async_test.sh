#!/usr/bin/env bash
# (b) async, 2 workers, MLP, 1 epoch: test accuracy >= 0.84.
# Async runs are not reproducible (arrival order decides), and after one epoch at lr 1e-3
# and batch 64 the final model's accuracy spreads over 0.82..0.85 between runs. With lr 5e-4
# and batch 16 (3750 smaller updates) it measured 0.843..0.857 over four seeds on a loaded
# machine, so the bound is checked there.
source "$(dirname "$0")/lib.sh"
train async 2 "$OUT/async.json" --model mlp --epochs 1 --lr 0.0005 --batch-size 16
acc=$(json_field "$OUT/async.json" test_accuracy)
at_least "$acc" 0.84 || fail "async test accuracy $acc < 0.84"
updates=$(json_field "$OUT/async.json" updates)
[ "$updates" = "3750" ] || fail "expected 2 x 1875 async updates, got $updates"
pass "async: test accuracy $acc, mean staleness $(json_field "$OUT/async.json" mean_staleness)"
echo "1 passed, 0 failed"
