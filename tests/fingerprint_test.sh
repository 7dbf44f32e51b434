#!/usr/bin/env bash
# (d) A worker whose model fingerprint differs from the ps's is refused with a clear error
# and exits non-zero; the ps keeps serving and a matching worker then trains.
source "$(dirname "$0")/lib.sh"
port=$(free_port)
start_ps ps --listen "127.0.0.1:$port" --workers 1 --epochs 1 --batch-size 512 --model mlp \
  --summary-json "$OUT/s.json"
ps_pid=$LAST_PID
start_worker bad --ps "127.0.0.1:$port" --model cnn
bad=$LAST_PID
rc=0
wait_pid "$bad" 30 || rc=$?
[ $rc -ne 0 ] || fail "the mismatched worker exited 0"
grep -q "fingerprint mismatch" "$OUT/bad.log" || fail "no 'fingerprint mismatch' in the worker's error"
[ "$(grep -c . "$OUT/bad.log")" -le 3 ] || fail "the refusal should be a short message"
kill -0 "$ps_pid" || fail "the ps died after refusing a worker"
start_worker good --ps "127.0.0.1:$port" --model mlp
wait_pid "$LAST_PID" 60 || fail "the matching worker failed"
wait_pid "$ps_pid" 30 || fail "ps exited non-zero"
pass "refused: $(grep -o 'fingerprint mismatch.*' "$OUT/bad.log" | head -c 120)"
echo "1 passed, 0 failed"
