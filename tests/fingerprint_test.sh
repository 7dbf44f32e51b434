#!/usr/bin/env bash
# (d) A worker whose model fingerprint differs from the ps's is refused with a clear error
# (one line at error level: the log's other lines, such as the two a worker writes when it
# corrects OpenBLAS's kernel choice on some CPUs, are not counted) and exits non-zero; the ps
# keeps serving and a matching worker then trains.
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
[ "$(grep -c '^<[0-3]>' "$OUT/bad.log")" = 1 ] || fail "the refusal should be one line at error level"
grep -q "^<3>.*fingerprint mismatch" "$OUT/bad.log" || fail "no 'fingerprint mismatch' in the worker's error"
kill -0 "$ps_pid" || fail "the ps died after refusing a worker"
start_worker good --ps "127.0.0.1:$port" --model mlp
wait_pid "$LAST_PID" 60 || fail "the matching worker failed"
wait_pid "$ps_pid" 30 || fail "ps exited non-zero"
pass "refused: $(grep -o 'fingerprint mismatch.*' "$OUT/bad.log" | head -c 120)"
echo "1 passed, 0 failed"
