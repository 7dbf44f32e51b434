#!/usr/bin/env bash
# ssp: with one worker 3x slower and --staleness 2, no worker ever gets more than 2 pushes
# ahead of the slowest unfinished one, by the ps's own counter of the largest lead it let
# a pull have (max_lead); and the bound is reached, so the check can fail.
source "$(dirname "$0")/lib.sh"
WORKER_EXTRA=("" "" "--slow-factor 3")
train ssp 3 "$OUT/ssp.json" --model mlp --epochs 1 --batch-size 256 --staleness 2
WORKER_EXTRA=()
lead=$(json_field "$OUT/ssp.json" max_lead)
[ "$lead" -le 2 ] || fail "a worker led by $lead > 2"
[ "$lead" -eq 2 ] || fail "the bound was never reached (max lead $lead): the slow worker did not hold anyone"
updates=$(json_field "$OUT/ssp.json" updates)
[ "$updates" -eq 234 ] || fail "expected 3 x 78 updates, got $updates"
at_least "$(json_field "$OUT/ssp.json" test_accuracy)" 0.75 || fail "ssp did not train"
pass "ssp: max lead $lead (bound 2), $updates updates, max staleness $(json_field "$OUT/ssp.json" max_staleness)"
echo "1 passed, 0 failed"
