#!/usr/bin/env bash
# Issue 11: a ps restart loses nothing but the work since the last checkpoint.
#  - kill -9 the ps mid-run and start it again with the same flags: it resumes from its
#    newest checkpoint, the workers reconnect, and later
#  - SIGTERM it: it saves a checkpoint and exits 3 (stopped, not finished), and so do the
#    workers (told the ps was stopped on purpose, they do not reconnect); then start the ps
#    and the workers again:
# the sync run ends with weights bit-identical to an uninterrupted run with the same seed,
# the metrics file holds all three parts, and the final checkpoint, read in Python, holds
# exactly the ps's weights.
source "$(dirname "$0")/lib.sh"
args=(--model mlp --epochs 2 --batch-size 64 --seed 9 --report-every 10)
train sync 2 "$OUT/clean.json" "${args[@]}"
port=$(free_port)
ck="$OUT/ckpt"
ps_args=(--listen "127.0.0.1:$port" --workers 2 --summary-json "$OUT/s.json" --metrics "$OUT/m.jsonl"
         --checkpoint-dir "$ck" --checkpoint-every 100 --worker-timeout 5 "${args[@]}")
# The restarted jobs' workers wait 2 x 3 ms per step besides computing (--delay-ms, which
# changes no bit): the 136 steps between step 800 and the end then take at least 0.8 s on any
# CPU, time for the SIGTERM to land before the job finishes.
workers() {
  W=()
  for i in 0 1; do
    start_worker "w$i-$1" --ps "127.0.0.1:$port" --index "$i" --delay-ms 3
    W+=("$LAST_PID")
  done
}

start_ps ps1 "${ps_args[@]}"
ps1=$LAST_PID
workers a
wait_step "$OUT/m.jsonl" 450 60
kill -9 "$ps1"
wait "$ps1" 2>/dev/null || true
ls "$ck"/ckpt-*.safetensors >/dev/null 2>&1 || fail "no checkpoint before the kill"
start_ps ps2 "${ps_args[@]}"
ps2=$LAST_PID
wait_for "$OUT/ps2.log" "resumed from .*ckpt-0*[1-9][0-9]*.safetensors: version [1-9]" 20
wait_for "$OUT/ps2.log" "all 2 workers registered" 30
wait_step "$OUT/m.jsonl" 800 60
kill -TERM "$ps2"
rc=0; wait_pid "$ps2" 30 || rc=$?
[ $rc -eq 3 ] || fail "the ps exited $rc on SIGTERM, not 3 (stopped before finishing)"
for p in "${W[@]}"; do
  rc=0; wait_pid "$p" 30 || rc=$?
  [ $rc -eq 3 ] || fail "a worker exited $rc when the ps was stopped, not 3"
done
grep -q '"stopped":true' "$OUT/s.json" || fail "the summary of the stopped ps does not say stopped"
start_ps ps3 "${ps_args[@]}"
ps3=$LAST_PID
workers c
for p in "${W[@]}"; do wait_pid "$p" 120 || fail "a worker exited non-zero after the second restart"; done
wait_pid "$ps3" 30 || fail "the resumed ps exited non-zero"
c0=$(json_field "$OUT/clean.json" weights_checksum)
c1=$(json_field "$OUT/s.json" weights_checksum)
[ "$c0" = "$c1" ] || fail "checksum $c1 after kill -9 and SIGTERM restarts, $c0 uninterrupted"
[ "$(json_field "$OUT/s.json" finished)" = "True" ] || fail "the final summary does not say finished"
[ "$(grep -c '"event":"summary"' "$OUT/m.jsonl")" -eq 2 ] || fail "the metrics file was not appended to"
final="$ck/$(basename "$(json_field "$OUT/s.json" checkpoint)")"
[ -f "$final" ] || fail "no final checkpoint $final"
py=$(/usr/bin/python3 "$RUNFILES/tests/read_safetensors.py" "$final" --checksum) || fail "Python cannot read $final"
[ "$py" = "$c1" ] || fail "the checkpoint's weights hash to $py in Python, the ps's to $c1"
[ "$(ls "$ck" | grep -c '^ckpt-')" -le 3 ] || fail "more than --checkpoint-keep 3 checkpoints kept"
pass "kill -9 and SIGTERM mid-run, resumed twice: checksum $c1 = uninterrupted; final checkpoint read in Python: $py"
echo "1 passed, 0 failed"
