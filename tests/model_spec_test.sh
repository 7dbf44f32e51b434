#!/usr/bin/env bash
# Models as data: the README's spec file (a conv net) goes to the ps as a file, the workers
# take it from the ps at registration, and one epoch of 2 sync workers reaches a lower bound
# (the full target, cnn >= 0.89 within 3 epochs, is in docs/benchmarks.md: 0.895). A worker
# that names the same spec is accepted (same fingerprint); a bad spec is one line, exit 2.
# The cnn2 preset brings its own optimizer line, which flags, files and the environment
# override.
source "$(dirname "$0")/lib.sh"
cat >"$OUT/my.spec" <<'SPEC'
# my.spec
input 28x28x1
conv2d 32 3x3 relu
maxpool 2x2
flatten
dense 10 softmax
SPEC
WORKER_EXTRA=("--model $OUT/my.spec" "")
train sync 2 "$OUT/cnn.json" --model "$OUT/my.spec" --epochs 1
WORKER_EXTRA=()
acc=$(json_field "$OUT/cnn.json" test_accuracy)
# 0.8688-0.8690 over OpenBLAS's kernel sets (Prescott, Sandybridge, Haswell, SkylakeX,
# Cooperlake) on the development VM, 2026-11-26.
at_least "$acc" 0.85 || fail "cnn spec: test accuracy $acc < 0.85 after 1 epoch"
grep -q "Total params: 54,410" "$OUT/ps-sync.log" || fail "the ps printed no model summary"
printf 'input 28x28x1\nconv2d 32 3x3 relu\ndense 10 softmax\n' >"$OUT/bad.spec"
rc=0; "$PS_BIN" --model "$OUT/bad.spec" >"$OUT/bad.log" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "bad.spec:3: dense needs a flat input" "$OUT/bad.log" || fail "bad spec: rc $rc"
pass "spec file cnn: test accuracy $acc after 1 epoch"

# The cnn2 preset trains with its own optimizer line (Adam, lr 0.002) when nothing else sets
# one: one epoch with the ps taking it from the spec. (5 epochs reach 0.913-0.918 over five
# seeds, docs/benchmarks.md. The first epoch of this run, seed 42, ends at 0.8796-0.8845
# depending on OpenBLAS's kernels: Sandybridge 0.8796, SkylakeX 0.8827, Haswell 0.8832,
# Prescott 0.8845 on the development VM, 2026-11-26; other seeds end it between 0.866 and
# 0.899.)
train sync 2 "$OUT/cnn2.json" --model cnn2 --epochs 1
acc2=$(json_field "$OUT/cnn2.json" test_accuracy)
grep -q "adam lr 0.002" "$OUT/ps-sync.log" || fail "the ps did not take cnn2's lr 0.002"
at_least "$acc2" 0.87 || fail "cnn2: test accuracy $acc2 < 0.87 after 1 epoch"
pass "preset cnn2 with its optimizer line: test accuracy $acc2 after 1 epoch"

# Precedence: the spec's line only replaces built-in defaults; a flag, the environment or
# another optimizer kind wins, for the ps and the launcher alike.
cfg_line() { "$@" --print-config | grep -E "^$KEY +="; }
KEY=lr
cfg_line "$PS_BIN" --model cnn2 | grep -q "0.002 .*# model: cnn2:10" || fail "ps: lr not from cnn2"
cfg_line "$PS_BIN" --model cnn2 --lr 0.01 | grep -q "0.01 .*# flag: --lr" || fail "ps: --lr lost"
PSTRAIN_PS_LR=0.005 cfg_line "$PS_BIN" --model cnn2 | grep -q "0.005 .*# env" || fail "ps: env lr lost"
cfg_line "$PS_BIN" --model cnn2 --optimizer sgd | grep -q "0.001 .*# default" \
  || fail "ps: an Adam lr applied to --optimizer sgd"
cfg_line "$PS_BIN" --model mlp | grep -q "0.001 .*# default" || fail "ps: mlp lr is not the default"
cfg_line "$LAUNCHER_BIN" local --model cnn2 | grep -q "0.002 .*# model: cnn2:10" \
  || fail "launcher: lr not from cnn2"
printf 'input 784\ndense 10 softmax\noptimizer momentum lr=0.05 beta1=0.9\n' >"$OUT/badopt.spec"
for prog in "$PS_BIN" "$LAUNCHER_BIN local"; do
  rc=0; $prog --model "$OUT/badopt.spec" >"$OUT/badopt.log" 2>&1 || rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$OUT/badopt.log")" -eq 1 ] &&
    grep -q "badopt.spec:3: optimizer: beta1 does not apply to momentum" "$OUT/badopt.log" ||
    fail "bad optimizer line ($prog): rc $rc, $(head -c 300 "$OUT/badopt.log")"
done
pass "optimizer line precedence and errors"

# The MobileNet-style layers (issue 14): relu6, avgpool (valid and same), depthwise_conv2d,
# global_avgpool and dropout, in a spec trained by 2 sync workers (whose dropout masks differ by worker index
# and step). One epoch of 1 worker reached 0.80 when this was written; the bound leaves
# room for other seeds and OpenBLAS kernels.
cat >"$OUT/mobile.spec" <<'SPEC'
input 28x28x1
conv2d 16 3x3 relu6 padding=same
avgpool 2x2
conv2d 32 3x3 relu6 padding=same
avgpool 2x2 padding=same
depthwise_conv2d 3x3 relu6 padding=same
conv2d 64 3x3 relu6
global_avgpool
dropout 0.2
dense 10 softmax
optimizer adam lr=0.003
SPEC
train sync 2 "$OUT/mobile.json" --model "$OUT/mobile.spec" --epochs 1
acc3=$(json_field "$OUT/mobile.json" test_accuracy)
for row in "global_average_pooling2d (GlobalAveragePooling2D)" "average_pooling2d_1" \
  "dropout (Dropout)" "depthwise_conv2d (DepthwiseConv2D)" "Total params: 24,266"; do
  grep -q "$row" "$OUT/ps-sync.log" || fail "the ps summary has no '$row'"
done
at_least "$acc3" 0.6 || fail "relu6/avgpool/dropout spec: test accuracy $acc3 < 0.6 after 1 epoch"
printf 'input 28x28x1\nconv2d 4 3x3\nglobal_avgpool\ndropout 1.5\ndense 10 softmax\n' >"$OUT/baddrop.spec"
rc=0; "$PS_BIN" --model "$OUT/baddrop.spec" >"$OUT/baddrop.log" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "baddrop.spec:4: dropout needs one rate in \[0, 1) like 0.5 (got '1.5')" \
  "$OUT/baddrop.log" || fail "bad dropout rate: rc $rc, $(head -c 300 "$OUT/baddrop.log")"
pass "relu6, avgpool, depthwise_conv2d, global_avgpool and dropout spec: test accuracy $acc3 after 1 epoch"
echo "4 passed, 0 failed"
