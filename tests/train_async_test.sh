#!/usr/bin/env bash
# (b) async, 2 workers, MLP, 1 epoch: test accuracy >= 0.84; and the ps's CPU per gradient.
# Async runs are not reproducible: arrival order decides which weights each gradient sees.
# After one epoch the final model's accuracy spreads with the seed (0.82..0.86 at lr 1e-3,
# batch 64; the sync run's spread over seeds is 0.844..0.854). Smaller, more numerous
# updates leave a less noisy final model. With lr 3e-4 and batch 16 (3750 updates), seed 4
# gave 0.8399..0.8566 over 19 runs, the 0.8399 inside the full suite: a flaky test.
# With lr 2e-4 and batch 8 (7500 updates), seed 4 gave 0.8462..0.8565 over 20 runs with a
# CPU hog beside them (seeds 1, 3, 5: 0.850..0.854; seed 2: 0.840..0.842), in about 5 s.
source "$(dirname "$0")/lib.sh"
train async 2 "$OUT/async.json" --model mlp --epochs 1 --lr 0.0002 --batch-size 8 --seed 4
acc=$(json_field "$OUT/async.json" test_accuracy)
at_least "$acc" 0.84 || fail "async test accuracy $acc < 0.84"
updates=$(json_field "$OUT/async.json" updates)
[ "$updates" = "7500" ] || fail "expected 2 x 3750 async updates, got $updates"
pass "async: test accuracy $acc, mean staleness $(json_field "$OUT/async.json" mean_staleness)"

# A regression guard on the ps's CPU time per applied gradient (from its summary), 4 workers.
# 0.15-0.3 ms on the 2-core VM (0.5 ms before its summing and finite check were vectorised);
# 2.4-4.3 ms was the issue's figure for a build that let the optimizer state go denormal on an
# Intel server. The bound catches such a fall, not noise: a busy machine costs the ps cache
# misses, not CPU time of its own.
train async 4 "$OUT/async4.json" --model mlp --epochs 1 --seed 4
ms=$(printf "%.3f" "$(json_field "$OUT/async4.json" ps_cpu_ms_per_gradient)")
grads=$(json_field "$OUT/async4.json" gradients_applied)
[ "$grads" -ge 900 ] || fail "async, 4 workers: only $grads gradients applied"
at_least 1.5 "$ms" || fail "async, 4 workers: the ps used $ms ms of CPU per gradient (bound 1.5)"
pass "async, 4 workers: the ps used $ms ms of CPU per gradient over $grads gradients"

# The staleness-aware learning rate (issue 26): each gradient applied with the rate divided by
# 1 + its staleness. It trains (chance is 0.10; 0.82-0.84 without it here) and the summary says
# so; a sync ps refuses the flag, one line and status 2 (update_test checks the rates).
train async 4 "$OUT/async4sa.json" --model mlp --epochs 1 --seed 4 --staleness-lr
acc=$(json_field "$OUT/async4sa.json" test_accuracy)
at_least "$acc" 0.78 || fail "async with --staleness-lr: accuracy $acc"
[ "$(json_field "$OUT/async4sa.json" staleness_lr)" = "True" ] || fail "the summary says no staleness_lr"
set +e
"$PS_BIN" --mode sync --staleness-lr --listen 127.0.0.1:0 >"$OUT/sync-sa.out" 2>&1
rc=$?
set -e
[ $rc -eq 2 ] && [ "$(grep -c . "$OUT/sync-sa.out")" -eq 1 ] || fail "sync --staleness-lr: status $rc"
pass "async, 4 workers, --staleness-lr: accuracy $acc; refused in sync (status $rc)"
echo "3 passed, 0 failed"
