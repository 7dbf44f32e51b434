#!/usr/bin/env bash
# The launcher: bad flags, output paths it cannot write and a port in use give one line and a
# non-zero exit, nothing is left running, and a real `pstrain local` run writes the summary
# and metrics it promises.
source "$(dirname "$0")/lib.sh"
export PSTRAIN_PS_BIN="$PS_BIN" PSTRAIN_WORKER_BIN="$WORKER_BIN"
rc=0; "$LAUNCHER_BIN" local --wrkers 2 >"$OUT/badflag.log" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "unknown flag --wrkers" "$OUT/badflag.log" || fail "bad flag: rc $rc"
rc=0; "$LAUNCHER_BIN" local --mode banana >"$OUT/badmode.log" 2>&1 || rc=$?
[ $rc -eq 2 ] || fail "bad mode accepted"
for gpus in 0,x 2048 -1 "$(seq -s, 0 64)"; do
  rc=0; "$LAUNCHER_BIN" local --gpus "$gpus" --run-dir "$OUT/badgpus" >"$OUT/badgpus.log" 2>&1 || rc=$?
  [ $rc -eq 2 ] && grep -q -- "--gpus wants a list like 0,2,3" "$OUT/badgpus.log" || fail "--gpus $gpus: rc $rc"
done
rc=0; "$LAUNCHER_BIN" local --epochs 1 --data-dir /nonexistent --run-dir "$OUT/nodata" \
  >"$OUT/nodata.log" 2>&1 || rc=$?
[ $rc -eq 1 ] && grep -q "/nonexistent/train-images-idx3-ubyte.gz: cannot open" "$OUT/nodata.log" \
  || fail "missing data: rc $rc"
# Output paths (issue 23, item 9) are checked before anything starts: a missing directory,
# one that cannot take a file (/proc/1, for root too), a directory named as a file, a
# checkpoint value the ps would refuse. Each is one line on stderr, nothing on stdout, exit 2,
# and no process was started (no log in the run directory).
out_error() { # NAME PATTERN ARGS...
  local name=$1 pattern=$2 rc=0; shift 2
  "$LAUNCHER_BIN" local --epochs 1 --run-dir "$OUT/$name" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err" || rc=$?
  [ "$rc" = 2 ] && [ "$(wc -l <"$OUT/$name.err")" = 1 ] && [ ! -s "$OUT/$name.out" ] &&
    grep -q -- "$pattern" "$OUT/$name.err" || fail "$name: exit $rc, $(cat "$OUT/$name.out" "$OUT/$name.err")"
  [ -z "$(ls "$OUT/$name"/*.log 2>/dev/null)" ] || fail "$name: processes were started: $(ls "$OUT/$name")"
}
out_error summary-nodir "--summary-json $OUT/nowhere/s.json: the directory $OUT/nowhere does not exist" \
  --summary-json "$OUT/nowhere/s.json"
out_error summary-isdir "--summary-json $OUT: is a directory" --summary-json "$OUT"
out_error metrics-proc "--metrics /proc/1/m.jsonl: cannot write in /proc/1" --metrics /proc/1/m.jsonl
out_error tb-nodir "--tensorboard $OUT/nowhere/tb: the directory $OUT/nowhere does not exist" \
  --tensorboard "$OUT/nowhere/tb"
touch "$OUT/a-file"
out_error ckpt-file "--checkpoint-dir $OUT/a-file/ck: cannot create it" --checkpoint-dir "$OUT/a-file/ck"
out_error ckpt-keep "checkpoint-keep must be in" --checkpoint-keep 0
# Integers are whole integers (issue 43): "1e300", "1.5" and "2x" were once read as 1, 1 and 2.
for bad in 1e300 1.5 2x 1:2.5 1x:2 99999999999999999999; do
  out_error "workers-$bad" "--workers" --workers "$bad"
done
out_error epochs-2x "epochs" --epochs 2x
ps_refuses "--workers 1e300" "--workers 1.5" "--workers 2x" "--workers 1:2x" "--workers 1.5:2" \
  "--workers 99999999999999999999" "--data-facts 100,10,1e3" "--data-facts 100,1.5,10" \
  "--batch-size 64x" "--listen 127.0.0.1:70x"
# --backup-workers is checked against the workers the job starts: --gpus decides how many.
out_error backup-gpus "--backup-workers 1 must be less than the 1 worker this job starts" \
  --gpus 0 --workers 4 --backup-workers 1
out_error backup-workers "--backup-workers 2 must be less than the 2 workers this job starts" \
  --workers 2 --backup-workers 2
rc=0; "$LAUNCHER_BIN" local --epochs 1 --run-dir "$OUT/nowhere/run" >"$OUT/rundir.out" 2>&1 || rc=$?
[ "$rc" = 2 ] && [ "$(wc -l <"$OUT/rundir.out")" = 1 ] || fail "a run directory that cannot be made: exit $rc, $(cat "$OUT/rundir.out")"
port=$(free_port)
/usr/bin/python3 -c 'import socket,sys,time; s=socket.socket(); s.bind(("127.0.0.1",int(sys.argv[1]))); s.listen(); time.sleep(30)' "$port" &
PIDS+=("$!")
sleep 0.3
rc=0; "$LAUNCHER_BIN" local --epochs 1 --port "$port" --run-dir "$OUT/inuse" >"$OUT/inuse.log" 2>&1 || rc=$?
[ $rc -eq 1 ] && grep -q "address already in use" "$OUT/inuse.log" || fail "port in use: rc $rc"
sleep 0.5
pgrep -f "$OUT/(nodata|inuse)" >/dev/null && fail "a process was left behind"
# A worker killed mid-run is started again with its index (like the units' Restart=), rejoins
# its slot, and the job ends well. The job is long enough for the restarted worker to load its
# data and rejoin: with 2 epochs of batch 128 the other worker once finished alone first (the
# job ended well, but nothing rejoined). Worker 0's steps wait 2 x 3 ms each besides their
# compute (--delay-worker), so that alone it needs at least 11 s for 2 epochs of batch 32 on
# any CPU (a faster one shortened the 4 epochs' 10 s that this took before).
"$LAUNCHER_BIN" local --workers 2 --epochs 2 --batch-size 32 --delay-worker 0:3 \
  --run-dir "$OUT/restart" >"$OUT/restart.log" 2>&1 &
launcher=$!
PIDS+=("$launcher")
for _ in $(seq 200); do grep -q '"train"' "$OUT/restart/metrics.jsonl" 2>/dev/null && break; sleep 0.05; done
pkill -9 -P "$launcher" -f -- "--index=1" || fail "no worker 1 to kill"
rc=0; wait_pid "$launcher" 120 || rc=$?
[ $rc -eq 0 ] && grep -q "worker 1 exited with signal 9; starting it again (1 of 3)" "$OUT/restart.log" \
  && grep -q "worker 1 .* rejoined" "$OUT/restart/ps.log" || fail "a killed worker was not restarted: rc $rc"
"$LAUNCHER_BIN" local --workers 2 --epochs 1 --batch-size 256 --run-dir "$OUT/ok" \
  --summary-json "$OUT/ok.json" >"$OUT/ok.log" 2>&1 || fail "local run failed"
for k in mode workers epochs test_accuracy samples_per_sec wall_seconds; do
  json_field "$OUT/ok.json" "$k" >/dev/null || fail "summary lacks $k"
done
grep -q '"event":"eval"' "$OUT/ok/metrics.jsonl" || fail "no eval record in the metrics file"
grep -q '"event":"train"' "$OUT/ok/metrics.jsonl" || fail "no train record in the metrics file"
grep -q "^epoch 1/1" "$OUT/ok.log" || fail "no per-epoch line"
pass "launcher: errors (bad flags, output paths checked before anything starts), summary and metrics"
echo "1 passed, 0 failed"
