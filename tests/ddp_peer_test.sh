#!/usr/bin/env bash
# Issue 39, point 7: `pstrain bench-train` runs PyTorch DDP (gloo) beside pstrain on the same
# job and puts it in the same table. 2 workers, mlp, 1 epoch, batch 128, --modes allreduce:
#  - the JSON has an all-reduce row and a "PyTorch DDP (gloo)" row, both with samples/s > 0
#    and test accuracy above 0.80 (0.83 to 0.85 on the development VM, 2026-11-28: the same
#    data shards, batch and Adam 1e-3, PyTorch's own initial weights);
#  - where PyTorch does not import under /usr/bin/python3 (python3-torch missing) the peer's
#    row says it skipped with a one-line reason and the command still succeeds;
#  - a job the peer's script cannot run (SGD) is not run, with one line saying why.
source "$(dirname "$0")/lib.sh"

env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE timeout 300 "$LAUNCHER_BIN" bench-train \
  --worker-counts 2 --modes allreduce --batch-size 128 --out "$OUT/bt" --json "$OUT/bt.json" \
  >"$OUT/bt.out" 2>&1 || { cat "$OUT/bt.out"; fail "bench-train with the peer failed"; }
torch=0
/usr/bin/python3 -c "import torch.distributed" 2>/dev/null && torch=1
/usr/bin/python3 - "$OUT/bt.json" "$torch" <<'PY' || { cat "$OUT/bt.out"; fail "the table is wrong"; }
import json, sys
rows = {r["mode"]: r for r in json.load(open(sys.argv[1]))["runs"]}
torch = sys.argv[2] == "1"
ar, peer = rows["allreduce"], rows["PyTorch DDP (gloo)"]
assert ar["ok"] and ar["samples_per_sec"] > 0 and ar["test_accuracy"] > 0.80, ar
if torch:
    assert peer["ok"] and "skipped" not in peer, peer
    assert peer["samples_per_sec"] > 0 and peer["test_accuracy"] > 0.80, peer
    assert peer["workers"] == 2, peer
    print(f"allreduce {ar['samples_per_sec']:.0f} samples/s ({ar['test_accuracy']:.4f}), "
          f"DDP {peer['samples_per_sec']:.0f} ({peer['test_accuracy']:.4f})")
else:
    assert peer.get("skipped"), peer
    print("PyTorch is missing here: the peer skipped:", peer["skipped"])
PY
pass "allreduce and the DDP peer in one table"

# SGD is not the peer's optimizer: it is not run, one line says why, and the table has
# pstrain's rows only.
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE timeout 120 "$LAUNCHER_BIN" bench-train \
  --worker-counts 1 --modes sync --optimizer sgd --lr 0.05 --batch-size 256 --out "$OUT/bt2" \
  --json "$OUT/bt2.json" >"$OUT/bt2.out" 2>&1 || { cat "$OUT/bt2.out"; fail "bench-train (sgd) failed"; }
/usr/bin/python3 - "$OUT/bt2.json" <<'PY' || { cat "$OUT/bt2.out"; fail "the sgd table is wrong"; }
import json, sys
rows = {r["mode"]: r for r in json.load(open(sys.argv[1]))["runs"]}
assert rows["sync"]["ok"] and rows["sync"]["test_accuracy"] > 0.7, rows["sync"]
assert list(rows) == ["sync"], rows
PY
grep -q "PyTorch DDP: not run beside this job: .*Adam" "$OUT/bt2.out" || fail "no line saying why the peer did not run"
pass "a job the peer cannot run is skipped with its reason"
echo "2 passed, 0 failed"
