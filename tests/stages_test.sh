#!/usr/bin/env bash
# Issue 40: a worker's model on stages, micro-batches pipelined through them.
#  - mlp, sync, 2 epochs: 2 stages on 2 CPU virtual devices (pushing and pulling layer by
#    layer) and 3 stages, with 4 micro-batches, end with the very weights of one stage with 4
#    micro-batches, and within 0.3 points of test accuracy of one stage without; the ps sees
#    one worker;
#  - async with 2 stages trains;
#  - mlp at batch 4096 is refused on one device under a cap below its need, and trains an
#    epoch on 2 stages under it (pipeline_test does the same for mobilenetv2 at batch 256);
#  - bad input exits non-zero: --stages 5 for the 3-layer mlp, a --place that is not
#    contiguous.
source "$(dirname "$0")/lib.sh"

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

if run bad5 --stages 5; then fail "--stages 5 for a 3-layer model: the job ran"; fi
if run badplace --place 1=cpu,3=cpu; then fail "--place 1=cpu,3=cpu: the job ran"; fi
pass "--stages 5 and a --place with a gap exit non-zero"
echo "4 passed, 0 failed"
