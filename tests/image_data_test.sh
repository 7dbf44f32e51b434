#!/usr/bin/env bash
# Image data (issue 14, point 4), end to end with real daemons on generated files (nothing
# is downloaded):
#   (a) a CIFAR-10-format set (2000 training images in two batch files, 500 test images)
#       trains a small conv net ("input 32x32x3") for 1 sync epoch on 2 workers with
#       --augment flip,crop:4 and --normalize mean-std, ends with a test accuracy, exit 0,
#       and a second identical run ends with the same weights (augmentation is seeded);
#       `pstrain local` passes the data flags on to its workers;
#   (b) a small IDX set of 28x28 grayscale images, as Fashion-MNIST's, goes to the same
#       32x32x3 model with --image-size 32x32 (the worker repeats the gray channel);
#   (c) a truncated batch file and a corrupt image make the worker exit non-zero at start
#       with one line naming the file, and a model of another input size is refused with
#       the shapes named.
source "$(dirname "$0")/lib.sh"

gen() { /usr/bin/python3 - "$@"; }
# Class c's images have their own colour (a level per channel) under per-pixel noise, which
# flips and crops keep, so a small net learns them in one epoch. bytes.translate maps
# random bytes to noisy levels at C speed.
gen "$OUT/cifar" "$OUT/idx" <<'PY'
import os, random, struct, sys
cifar, idx = sys.argv[1], sys.argv[2]
os.makedirs(cifar); os.makedirs(idx)
rng = random.Random(7)
def noisy(level, n):
    table = bytes(min(255, max(0, level + b % 81 - 40)) for b in range(256))
    return rng.randbytes(n).translate(table)
levels = [(r, g, b) for r in (40, 128, 215) for g in (40, 128, 215) for b in (40, 128, 215)][:10]
def batch(path, n):
    with open(path, "wb") as f:
        for i in range(n):
            c = rng.randrange(10)
            f.write(bytes([c]) + b"".join(noisy(v, 1024) for v in levels[c]))
batch(f"{cifar}/data_batch_1.bin", 1000)
batch(f"{cifar}/data_batch_2.bin", 1000)
batch(f"{cifar}/test_batch.bin", 500)
for split, n in (("train", 2000), ("t10k", 500)):
    labels = [rng.randrange(10) for _ in range(n)]
    with open(f"{idx}/{split}-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28))
        for c in labels:
            f.write(noisy(20 + 24 * c, 784))
    with open(f"{idx}/{split}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(labels))
PY
cat >"$OUT/small.spec" <<'SPEC'
input 32x32x3
conv2d 8 3x3 relu
maxpool 2x2
conv2d 16 3x3 relu
maxpool 2x2
flatten
dense 10 softmax
SPEC

# (a) CIFAR-10 format, augmented and normalised, twice.
DATA_DIR="$OUT/cifar"
aug="--augment flip,crop:4 --normalize mean-std"
WORKER_EXTRA=("$aug" "$aug")
for run in 1 2; do
  train sync 2 "$OUT/cifar$run.json" --model "$OUT/small.spec" --epochs 1 --batch-size 32 --seed 5
  cp "$OUT/worker0-sync.log" "$OUT/cifar$run-worker0.log"
done
acc=$(json_field "$OUT/cifar1.json" test_accuracy)
grep -q "test accuracy" "$OUT/ps-sync.log" || fail "the ps printed no test accuracy"
at_least "$acc" 0.5 || fail "CIFAR format: test accuracy $acc < 0.5 after 1 epoch"
grep -q "data: CIFAR-10 binary files in .*: 2000 training and 500 test images of 32x32x3" \
  "$OUT/cifar1-worker0.log" || fail "the worker did not read the CIFAR-10 files"
grep -qE "epoch 1/1: train loss .* data wait [0-9.]+ s" "$OUT/cifar1-worker0.log" ||
  fail "no data wait in the worker's epoch line"
sum1=$(json_field "$OUT/cifar1.json" weights_checksum)
sum2=$(json_field "$OUT/cifar2.json" weights_checksum)
[ "$sum1" = "$sum2" ] || fail "two augmented sync runs ended with different weights ($sum1, $sum2)"
pass "CIFAR-10 format, flip,crop:4, mean-std: test accuracy $acc after 1 epoch; the same weights twice ($sum1); $(grep -o 'data wait [0-9.]* s' "$OUT/cifar1-worker0.log")"

# ResNet20 (the generated preset: batch norm, residual adds) through the same CIFAR-10
# pipeline: it trains without error, and its loss is a number. (Its accuracy after 31
# steps says nothing; the step time goes to docs/benchmarks.md from bench_compute.)
train sync 2 "$OUT/resnet20.json" --model resnet20:momentum=0.5 --epochs 1 --batch-size 32 --seed 5
/usr/bin/python3 - "$OUT/resnet20.json" <<'PY' || fail "resnet20: no finite test loss and accuracy"
import json, math, sys
s = json.load(open(sys.argv[1]))
assert math.isfinite(s["test_loss"]) and 0 <= s["test_accuracy"] <= 1, s
PY
grep -q "274,442" "$OUT/ps-sync.log" || fail "the ps did not describe resnet20's 274,442 parameters"
pass "resnet20 on the CIFAR-10 format: 1 sync epoch on 2 workers, test accuracy $(json_field "$OUT/resnet20.json" test_accuracy), $(grep -o '[0-9]* samples/s computing' "$OUT/worker0-sync.log")"

# `pstrain local` passes the data flags on to its workers.
"$LAUNCHER_BIN" local --data-dir "$OUT/cifar" --model "$OUT/small.spec" --epochs 1 --augment flip \
  --normalize mean-std --run-dir "$OUT/local" >"$OUT/local.out" 2>&1 || fail "pstrain local failed"
grep -q "^done: test accuracy" "$OUT/local.out" || fail "pstrain local printed no test accuracy"
grep -q "normalised by the training set's mean" "$OUT/local/worker0.log" ||
  fail "pstrain local did not pass --normalize on"

# (b) 28x28 grayscale IDX to the 32x32x3 model.
DATA_DIR="$OUT/idx"
WORKER_EXTRA=("--image-size 32x32 --normalize mean-std" "--image-size 32x32 --normalize mean-std")
train sync 2 "$OUT/idx.json" --model "$OUT/small.spec" --epochs 1 --batch-size 32 --lr 0.005
acc=$(json_field "$OUT/idx.json" test_accuracy)
at_least "$acc" 0.5 || fail "IDX resized to 32x32x3: test accuracy $acc < 0.5"
grep -q "of 32x32x1" "$OUT/worker0-sync.log" || fail "the IDX set was not resized to 32x32"
pass "28x28x1 IDX as 32x32x3 (--image-size 32x32): test accuracy $acc"

# (c) Errors: one line naming the file, non-zero exit, before any ps is contacted.
worker_error() { # DIR PATTERN [flags]: the worker must fail at start with PATTERN
  local dir=$1 pattern=$2 rc=0; shift 2
  "$WORKER_BIN" --ps 127.0.0.1:1 --data-dir "$dir" --connect-timeout 1 "$@" >"$OUT/err.log" 2>&1 || rc=$?
  [ $rc -ne 0 ] || fail "the worker exited 0 on $dir"
  grep -qE -e "$pattern" "$OUT/err.log" || { cat "$OUT/err.log" >&2; fail "no '$pattern' from the worker"; }
  [ "$(grep -c "^<3>" "$OUT/err.log")" = 1 ] || { cat "$OUT/err.log" >&2; fail "not one error line"; }
}
mkdir -p "$OUT/trunc"
cp "$OUT/cifar/"*.bin "$OUT/trunc/"
truncate -s 5000 "$OUT/trunc/data_batch_2.bin"
worker_error "$OUT/trunc" "$OUT/trunc/data_batch_2.bin: truncated: 5000 bytes is not a whole number of 3073-byte records"
mkdir -p "$OUT/folder/cat" "$OUT/folder/dog"
for i in 1 2 3 4 5; do printf '\x89PNG\r\n\x1a\nnot a png at all' >"$OUT/folder/dog/$i.png"; done
worker_error "$OUT/folder" "$OUT/folder/dog/[1-5].png: corrupt PNG"
worker_error "$OUT/cifar" "--augment: 'spin' is not flip or crop:P" --augment flip,spin
# A model of another input size: the worker refuses it with both shapes.
DATA_DIR="$OUT/cifar"
port=$(free_port)
start_ps shape-ps --listen "127.0.0.1:$port" --workers 1 --model cnn --epochs 1
start_worker shape-w --ps "127.0.0.1:$port"
wait_pid "$LAST_PID" 60 && fail "a worker with 32x32x3 data trained a 28x28x1 model"
grep -q "the model takes 28x28x1 images (H x W x C) but $OUT/cifar has 32x32x3" "$OUT/shape-w.log" ||
  fail "no shape message"
pass "truncated batch file, corrupt image, bad --augment and a model of another shape: one line each"
echo "4 passed, 0 failed"
