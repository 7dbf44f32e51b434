#!/usr/bin/env bash
# (a) sync, 2 workers, MLP, 1 epoch: test accuracy >= 0.84, every process exits 0. The
# figure depends on OpenBLAS's kernels (their sums round differently): 0.8434 (Prescott),
# 0.8436 (Nehalem), 0.8444 (Sandybridge, Cooperlake), 0.8452 (Haswell, Zen) and 0.8410
# (SkylakeX) on the development VM, 2026-11-26; the bound is issue 1's.
source "$(dirname "$0")/lib.sh"
train sync 2 "$OUT/sync.json" --model mlp --epochs 1 --seed 42
acc=$(json_field "$OUT/sync.json" test_accuracy)
at_least "$acc" 0.84 || fail "sync test accuracy $acc < 0.84"
[ "$(json_field "$OUT/sync.json" updates)" = "468" ] || fail "expected 468 sync steps"
pass "sync: test accuracy $acc, $(json_field "$OUT/sync.json" samples_per_sec) samples/s"
echo "1 passed, 0 failed"
