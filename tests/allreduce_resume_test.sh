#!/usr/bin/env bash
# Issue 39, point 4: an all-reduce job's checkpoints. Rank 0 writes the ps's format into
# --checkpoint-dir (every 100 steps and at each epoch's end); a job whose rank is killed
# outright mid-epoch resumes when the same command runs again, and ends with the weights of a
# run straight through, bit for bit (checksums compared as integers); `pstrain export` reads
# its checkpoints.
source "$(dirname "$0")/lib.sh"

common=(local --mode allreduce --workers 2 --model mlp --epochs 2 --seed 42 --report-every 10)
timeout 120 "$LAUNCHER_BIN" "${common[@]}" --run-dir "$OUT/straight" --summary-json "$OUT/straight.json" \
  >"$OUT/straight.out" 2>&1 || fail "the job straight through failed"

CK="$OUT/ck"
start_bg first "$LAUNCHER_BIN" "${common[@]}" --run-dir "$OUT/run" --checkpoint-dir "$CK" \
  --checkpoint-every 100
launcher=$LAST_PID
wait_step "$OUT/run/metrics.jsonl" 620 90
victim=$(rank_pid "$OUT/run" 1)
[ -n "$victim" ] || fail "no rank 1 of the job found"
kill -9 "$victim"
rc=0
wait_pid "$launcher" 30 || rc=$?
[ "$rc" -ne 0 ] || fail "the job whose rank 1 was killed exited 0"

timeout 120 "$LAUNCHER_BIN" "${common[@]}" --run-dir "$OUT/run" --checkpoint-dir "$CK" \
  --checkpoint-every 100 --summary-json "$OUT/resumed.json" >"$OUT/resumed.out" 2>&1 ||
  fail "the same command again did not finish the job"
/usr/bin/python3 - "$OUT/straight.json" "$OUT/resumed.json" <<'PY' || fail "the resumed job is not the job straight through"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert 600 <= b["resumed_from"] < 936, b["resumed_from"]
assert int(a["weights_checksum"], 16) == int(b["weights_checksum"], 16), (a["weights_checksum"], b["weights_checksum"])
assert a["updates"] == b["updates"] == 936, (a["updates"], b["updates"])
PY
pass "killed past step 620, resumed from step $(json_field "$OUT/resumed.json" resumed_from): weights $(json_field "$OUT/resumed.json" weights_checksum), as straight through"
newest=$(ls "$CK"/ckpt-*.safetensors | sort | tail -1)
"$LAUNCHER_BIN" export "$newest" --format safetensors --out "$OUT/w.safetensors" >"$OUT/export.out" 2>&1 ||
  fail "pstrain export cannot read $(basename "$newest")"
pass "pstrain export reads $(basename "$newest")"
echo "2 passed, 0 failed"
