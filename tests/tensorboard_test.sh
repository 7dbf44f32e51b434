#!/usr/bin/env bash
# TensorBoard event files (issue 15, item 3): a sync job of 2 workers, 2 epochs, with
# --tensorboard. The file is read back by tests/read_tfevents.py, which checks every
# record's two CRC32Cs and decodes the Event protos by hand: the first record is
# file_version "brain.Event:2", the training scalars (loss, accuracy, samples/s, learning
# rate, staleness) come at growing steps, and the test scalars of each epoch are the metrics
# file's eval records.
source "$(dirname "$0")/lib.sh"
READER="$RUNFILES/tests/read_tfevents.py"
tb="$OUT/tb"
train sync 2 "$OUT/summary.json" --model mlp --epochs 2 --tensorboard "$tb" \
  --metrics "$OUT/metrics.jsonl"
files=("$tb"/events.out.tfevents.*)
[ ${#files[@]} = 1 ] && [ -s "${files[0]}" ] || fail "expected one event file in $tb: ${files[*]}"
/usr/bin/python3 "$READER" "${files[0]}" >"$OUT/events.jsonl" || fail "bad event file: $(tail -1 "$OUT/events.jsonl")"
/usr/bin/python3 - "$OUT/events.jsonl" "$OUT/metrics.jsonl" "$OUT/summary.json" <<'PY' || fail "wrong scalars"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
evals = {r["epoch"]: r for r in map(json.loads, open(sys.argv[2])) if r.get("event") == "eval"}
summary = json.load(open(sys.argv[3]))
assert ev[0].get("file_version") == "brain.Event:2", ev[0]
assert all(e["wall_time"] > 1.6e9 for e in ev)
train = [e for e in ev if "loss/train" in e.get("scalars", {})]
test = [e for e in ev if "loss/test" in e.get("scalars", {})]
assert len(train) >= 10, len(train)
for e in train:
    s = e["scalars"]
    assert set(s) == {"loss/train", "accuracy/train", "samples_per_sec", "learning_rate", "staleness/mean"}, s
    assert abs(s["learning_rate"] - 0.001) < 1e-9 and 0 <= s["accuracy/train"] <= 1 and s["loss/train"] > 0
    assert s["staleness/mean"] == 0  # sync
steps = [e["step"] for e in train]
assert steps[-1] > steps[0] and steps[-1] <= summary["updates"], steps
assert train[-1]["scalars"]["samples_per_sec"] > 0
assert len(test) == 2, test
for epoch, e in zip((1, 2), test):
    assert e["step"] == evals[epoch]["version"], (e, evals[epoch])
    assert abs(e["scalars"]["accuracy/test"] - evals[epoch]["accuracy"]) < 1e-6
    assert abs(e["scalars"]["loss/test"] - evals[epoch]["loss"]) < 1e-5
assert abs(test[-1]["scalars"]["accuracy/test"] - summary["test_accuracy"]) < 1e-6
print(f"{len(ev)} records: {len(train)} training, steps {steps[0]}..{steps[-1]}, "
      f"test accuracy {test[0]['scalars']['accuracy/test']:.4f} -> {test[1]['scalars']['accuracy/test']:.4f}")
PY
pass "the event file reads back with both CRCs right and the expected scalars"

# `pstrain compare --tensorboard DIR`: one sub-directory per mode, so TensorBoard overlays them.
"$LAUNCHER_BIN" compare --modes sync,ssp:1 --workers 2 --epochs 1 --batch-size 512 \
  --out "$OUT/cmp" --tensorboard "$OUT/cmp-tb" >"$OUT/compare.log" 2>&1 || fail "compare failed"
for mode in sync ssp-1; do
  f=("$OUT/cmp-tb/$mode"/events.out.tfevents.*)
  [ -s "${f[0]}" ] || fail "no event file for $mode in $OUT/cmp-tb"
  /usr/bin/python3 "$READER" "${f[0]}" >"$OUT/$mode.jsonl" || fail "$mode: bad event file"
  grep -q '"accuracy/test"' "$OUT/$mode.jsonl" || fail "$mode: no test accuracy"
done
pass "compare --tensorboard: one event file per mode (sync, ssp-1)"
echo "2 passed, 0 failed"
