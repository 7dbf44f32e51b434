#!/usr/bin/env bash
# Graph model specs (issue 14) end to end with real daemons on a generated IDX set (nothing
# is downloaded): a residual block (add) beside a 1x1 tower, joined by concatenate, trains
# for two sync epochs on 2 workers and learns; a second run with the gradients arriving in
# the other order ends with bit-identical weights (the fan-in sums run in a fixed order on
# every worker), another seed with other weights; a worker that names the same spec file is
# accepted (same fingerprint); the ps's summary shows the "Connected to" column; and a spec
# with a cycle is one line with its line number, exit 2.
source "$(dirname "$0")/lib.sh"

# Class c is a noisy gray level of its own, as in image_data_test.sh: 2000 training and 500
# test images of 28x28, so that an epoch takes seconds on two shared cores.
/usr/bin/python3 - "$OUT/idx" <<'PY'
import os, random, struct, sys
idx = sys.argv[1]
os.makedirs(idx)
rng = random.Random(11)
def noisy(level, n):
    table = bytes(min(255, max(0, level + b % 81 - 40)) for b in range(256))
    return rng.randbytes(n).translate(table)
for split, n in (("train", 2000), ("t10k", 500)):
    labels = [rng.randrange(10) for _ in range(n)]
    with open(f"{idx}/{split}-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28))
        for c in labels:
            f.write(noisy(20 + 24 * c, 784))
    with open(f"{idx}/{split}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(labels))
PY
DATA_DIR="$OUT/idx"

cat >"$OUT/res.spec" <<'SPEC'
# A residual block and a side tower from the same stem, joined along the channels.
input 28x28x1
conv2d 8 3x3 stride=2 padding=same relu name=stem
conv2d 8 3x3 padding=same relu
conv2d 8 3x3 padding=same name=branch
add relu inputs=stem,branch name=res
conv2d 4 1x1 relu inputs=stem name=side
concatenate inputs=res,side
maxpool 2x2
flatten
dense 10 softmax
optimizer adam lr=0.003
SPEC

WORKER_EXTRA=("--model $OUT/res.spec" "--slow-factor 3")
train sync 2 "$OUT/run1.json" --model "$OUT/res.spec" --epochs 2 --batch-size 16 --seed 3
cp "$OUT/ps-sync.log" "$OUT/run1-ps.log"
WORKER_EXTRA=("--slow-factor 3" "")
train sync 2 "$OUT/run2.json" --model "$OUT/res.spec" --epochs 2 --batch-size 16 --seed 3
WORKER_EXTRA=()
acc=$(json_field "$OUT/run1.json" test_accuracy)
at_least "$acc" 0.5 || fail "residual/concatenate spec: test accuracy $acc < 0.5 after 2 epochs"
c1=$(json_field "$OUT/run1.json" weights_checksum)
c2=$(json_field "$OUT/run2.json" weights_checksum)
[ -n "$c1" ] && [ "$c1" = "$c2" ] || fail "two sync runs of the graph ended with different weights: $c1 vs $c2"
for row in "Connected to" "stem (Conv2D)" "res (Add)" "concatenate (Concatenate)" \
  "Total params: 7,174"; do
  grep -q "$row" "$OUT/run1-ps.log" || fail "the ps summary has no '$row'"
done
grep -qE "^ +branch$" "$OUT/run1-ps.log" || fail "the summary does not list add's second input"
train sync 2 "$OUT/run3.json" --model "$OUT/res.spec" --epochs 2 --batch-size 16 --seed 4
c3=$(json_field "$OUT/run3.json" weights_checksum)
[ "$c3" != "$c1" ] || fail "another seed gave the same checksum $c3: the check proves nothing"
pass "residual + concatenate graph, 2 sync workers: test accuracy $acc; checksum $c1 twice (other arrival order); seed 4: $c3"

# A cycle, an unknown name and a shape mismatch: one line each with the line number, exit 2.
bad() { # NAME SPEC PATTERN
  printf "$2" >"$OUT/$1.spec"
  local rc=0
  "$PS_BIN" --model "$OUT/$1.spec" >"$OUT/$1.log" 2>&1 || rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$OUT/$1.log")" -eq 1 ] && grep -qF "$1.spec:$3" "$OUT/$1.log" ||
    fail "bad spec $1: rc $rc, $(head -c 300 "$OUT/$1.log")"
}
bad cycle 'input 784 name=x\ndense 8 name=a inputs=c\ndense 8 name=b\ndense 8 name=c\ndense 10 softmax\n' \
  "2: inputs: 'c' (line 4) is computed from this layer (a cycle)"
bad unknown 'input 784 name=x\ndense 8 name=a\nadd inputs=x,b\ndense 10 softmax\n' \
  "3: inputs: unknown layer 'b'"
bad shapes 'input 784 name=x\ndense 8 name=a\nadd inputs=x,a\ndense 10 softmax\n' \
  "3: add: input 'a' is 8 but 'x' is 784 (add needs equal shapes)"
pass "graph spec errors: one line with the line number, exit 2"
echo "2 passed, 0 failed"
