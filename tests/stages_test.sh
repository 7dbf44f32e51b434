#!/usr/bin/env bash
# Issue 40: a worker's model on stages, micro-batches pipelined through them.
#  - mlp, sync, 2 epochs: 2 stages on 2 CPU virtual devices (pushing and pulling layer by
#    layer) and 3 stages, with 4 micro-batches, end with the very weights of one stage with 4
#    micro-batches, and within 0.3 points of test accuracy of one stage without; the ps sees
#    one worker;
#  - async with 2 stages trains;
#  - mlp at batch 4096 is refused on one device under a cap below its need, and trains an
#    epoch on 2 stages under it (pipeline_test does the same for mobilenetv2 at batch 256);
#  - checkpoints and resume: a sync job on 2 stages x 4 micro-batches stopped with Ctrl-C
#    resumes from its checkpoint and ends with the weights of the same job run straight
#    through (as tests/local_resume_test.sh does for one stage);
#  - ssp with 2 workers of 2 stages each trains;
#  - `pstrain compare` passes the stage flags on: its sync run ends with the straight job's
#    weights.
# Bad stage flags: tests/stages_flags_test.sh.
source "$(dirname "$0")/lib.sh"
export PSTRAIN_PS_BIN="$PS_BIN" PSTRAIN_WORKER_BIN="$WORKER_BIN"

run() { # run NAME ARGS...: one pstrain local job, its summary in $OUT/NAME.json
  local name=$1; shift
  "$LAUNCHER_BIN" local --workers 1 --model mlp --epochs 1 --batch-size 128 --seed 7 \
    --run-dir "$OUT/$name" --summary-json "$OUT/$name.json" "$@" >"$OUT/$name.out" 2>&1
}

within() { # within A B POINTS: |A - B| <= POINTS/100
  /usr/bin/python3 -c 'import sys; a,b,p=map(float,sys.argv[1:]); sys.exit(0 if abs(a-b) <= p/100 + 1e-12 else 1)' "$@"
}

run one --epochs 2 || fail "one stage: pstrain local failed"
base=$(json_field "$OUT/one.json" test_accuracy)
run mb --epochs 2 --micro-batches 4 || fail "one stage, 4 micro-batches: pstrain local failed"
run two --epochs 2 --stages 2 --virtual-devices 2 --micro-batches 4 --push-by-layer \
  --pull-by-layer --log-placement || fail "2 stages: pstrain local failed"
run three --epochs 2 --stages 3 --micro-batches 4 || fail "3 stages: pstrain local failed"
[ "$(json_field "$OUT/two.json" workers)" = 1 ] || fail "2 stages: the ps saw more than one worker"
# Stages change where the layers run, not what they compute: the same final weights as one
# stage with the same micro-batches, bit for bit.
sum=$(json_field "$OUT/mb.json" weights_checksum)
for n in two three; do
  [ "$(json_field "$OUT/$n.json" weights_checksum)" = "$sum" ] ||
    fail "$n stages: weights checksum $(json_field "$OUT/$n.json" weights_checksum), one stage with 4 micro-batches $sum"
done
two=$(json_field "$OUT/two.json" test_accuracy)
within "$two" "$base" 0.3 || fail "2 stages x 4 micro-batches: accuracy $two, one stage $base"
pass "mlp sync, 2 epochs: test accuracy $base on one stage, $two on 2 and 3 stages x 4 micro-batches (checksum $sum, as one stage's with 4)"

run async --mode async --stages 2 --micro-batches 4 || fail "async on 2 stages: pstrain local failed"
acc=$(json_field "$OUT/async.json" test_accuracy)
at_least "$acc" 0.80 || fail "async on 2 stages: accuracy $acc"
pass "mlp async on 2 stages x 4 micro-batches: accuracy $acc"

# mlp at batch 4096 needs 15.1 MiB on one CPU device (weights, activations, the gradient
# pool); 2 stages need 10.9 and 4.2.
if run capped --batch-size 4096 --device-mem 12; then
  fail "mlp at batch 4096 over a 12 MiB cap on one device: the job ran"
fi
run capped2 --batch-size 4096 --device-mem 12 --stages 2 --virtual-devices 2 --micro-batches 4 ||
  fail "mlp at batch 4096 on 2 stages under a 12 MiB cap: the job failed"
acc=$(json_field "$OUT/capped2.json" test_accuracy)
at_least "$acc" 0.60 || fail "mlp at batch 4096 on 2 stages under the cap: accuracy $acc"
pass "mlp at batch 4096: refused on one device under a 12 MiB cap, accuracy $acc after an epoch on 2 stages"

# Checkpoints and resume on 2 stages x 4 micro-batches, under the cosine schedule (whose
# rate moves with every version): the straight job, then the same job stopped with Ctrl-C
# past step 200 and run again. The worker waits 2 x 2 ms a step besides computing
# (--delay-worker, which changes no bit), so that the signal lands mid-run on any CPU.
staged=(--stages 2 --virtual-devices 2 --micro-batches 4 --lr-schedule cosine)
run straight "${staged[@]}" || fail "2 stages, straight through: pstrain local failed"
ref=$(json_field "$OUT/straight.json" weights_checksum)
total=$(json_field "$OUT/straight.json" updates)
run_bg() { # the same job with a checkpoint directory, in the background; its pid in JOB
  "$LAUNCHER_BIN" local --workers 1 --model mlp --epochs 1 --batch-size 128 --seed 7 \
    --run-dir "$OUT/resume" --summary-json "$OUT/resume.json" "${staged[@]}" \
    --delay-worker 0:2 --checkpoint-every 100 --checkpoint-dir "$OUT/ck" >>"$OUT/resume.out" 2>&1 &
  JOB=$!
  PIDS+=("$JOB")
}
run_bg
wait_step "$OUT/resume/metrics.jsonl" 200 60
kill -INT "$JOB"
rc=0; wait_pid "$JOB" 30 || rc=$?
[ "$rc" = 130 ] || fail "2 stages, Ctrl-C: the launcher exited $rc, not 130"
at=$(json_field "$OUT/resume.json" updates)
[ "$at" -lt "$total" ] || fail "2 stages, Ctrl-C: the job had finished before it (version $at of $total)"
run_bg
rc=0; wait_pid "$JOB" 120 || rc=$?
[ "$rc" = 0 ] || fail "2 stages, started again: exit $rc"
[ "$(json_field "$OUT/resume.json" resumed_from_version)" = "$at" ] ||
  fail "2 stages: resumed from version $(json_field "$OUT/resume.json" resumed_from_version), not $at where it stopped"
[ "$(json_field "$OUT/resume.json" updates)" = "$total" ] ||
  fail "2 stages: resumed, ended at version $(json_field "$OUT/resume.json" updates), not $total"
[ "$(json_field "$OUT/resume.json" weights_checksum)" = "$ref" ] ||
  fail "2 stages: weights $(json_field "$OUT/resume.json" weights_checksum) after resuming, $ref straight through"
pass "2 stages x 4 micro-batches: Ctrl-C at version $at, resumed from it, ended with the straight run's weights ($ref)"

"$LAUNCHER_BIN" local --workers 2 --mode ssp --staleness 2 --model mlp --epochs 1 --batch-size 128 \
  --seed 7 --stages 2 --virtual-devices 2 --micro-batches 4 --run-dir "$OUT/ssp" \
  --summary-json "$OUT/ssp.json" >"$OUT/ssp.out" 2>&1 || fail "ssp, 2 workers of 2 stages: pstrain local failed"
acc=$(json_field "$OUT/ssp.json" test_accuracy)
at_least "$acc" 0.80 || fail "ssp, 2 workers of 2 stages: accuracy $acc"
[ "$(json_field "$OUT/ssp.json" workers)" = 2 ] || fail "ssp: the ps saw $(json_field "$OUT/ssp.json" workers) workers, not 2"
pass "mlp ssp (bound 2), 2 workers of 2 stages x 4 micro-batches: accuracy $acc"

# compare, given the stage flags, runs its settings on them: its sync run is the straight job.
"$LAUNCHER_BIN" compare --modes sync,async --workers 1 --model mlp --epochs 1 --batch-size 128 \
  --seed 7 "${staged[@]}" --out "$OUT/compare" >"$OUT/compare.out" 2>&1 || fail "compare with stages failed"
[ "$(json_field "$OUT/compare/sync/summary.json" weights_checksum)" = "$ref" ] ||
  fail "compare's sync run on 2 stages: weights $(json_field "$OUT/compare/sync/summary.json" weights_checksum), pstrain local's $ref"
acc=$(json_field "$OUT/compare/async/summary.json" test_accuracy)
at_least "$acc" 0.80 || fail "compare's async run on 2 stages: accuracy $acc"
pass "compare --modes sync,async with 2 stages x 4 micro-batches: sync ends with pstrain local's weights ($ref), async accuracy $acc"
echo "6 passed, 0 failed"
