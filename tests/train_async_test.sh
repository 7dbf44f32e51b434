#!/usr/bin/env bash
# (b) async, 2 workers, MLP, 1 epoch: test accuracy >= 0.84.
# Async runs are not reproducible (arrival order decides), and after one epoch at lr 1e-3
# and batch 64 the accuracy spreads over 0.82..0.85 between runs. lr 5e-4 with batch 32 was
# measured at 0.844..0.848 over four seeds, so the bound is checked there.
source "$(dirname "$0")/lib.sh"
train async 2 "$OUT/async.json" --model mlp --epochs 1 --lr 0.0005 --batch-size 32
acc=$(json_field "$OUT/async.json" test_accuracy)
at_least "$acc" 0.84 || fail "async test accuracy $acc < 0.84"
updates=$(json_field "$OUT/async.json" updates)
[ "$updates" = "1874" ] || fail "expected 2 x 937 async updates, got $updates"
pass "async: test accuracy $acc, mean staleness $(json_field "$OUT/async.json" mean_staleness)"
echo "1 passed, 0 failed"
