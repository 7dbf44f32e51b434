#!/usr/bin/env bash
# Issue 39, point 4 and its CI target: a rank of an all-reduce job killed outright (kill -9 of
# a real pstrain-worker process, mid-run) ends `pstrain local --mode allreduce` within 30 s,
# with a non-zero exit and a line naming that rank; no process of the job is left. And a flag
# only a ps has is refused before anything starts (exit 2).
source "$(dirname "$0")/lib.sh"

rc=0
"$LAUNCHER_BIN" local --mode allreduce --workers 2 --ps-shards 2 --run-dir "$OUT/refused" \
  >"$OUT/refused.out" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "--mode allreduce --ps-shards 2: exit $rc, not 2"

RUN="$OUT/run"
start_bg launcher "$LAUNCHER_BIN" local --mode allreduce --workers 2 --epochs 20 --report-every 10 \
  --run-dir "$RUN"
launcher=$LAST_PID
wait_step "$RUN/metrics.jsonl" 100 60
# The ranks: pstrain-worker processes of this run (mpirun's own command line names them too,
# but its process is mpirun).
victim="" rank=""
for p in $(pgrep -x pstrain-worker); do
  grep -qF "$RUN/" "/proc/$p/cmdline" 2>/dev/null || continue
  r=$(tr '\0' '\n' <"/proc/$p/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
  if [ "$r" = 1 ]; then victim=$p rank=$r; fi
done
[ -n "$victim" ] || fail "no rank 1 of the job found"
t0=$SECONDS
kill -9 "$victim"
rc=0
wait_pid "$launcher" 30 || rc=$?
[ "$rc" -ne 0 ] || fail "pstrain local exited 0 after rank $rank was killed"
grep -qE "rank $rank\b" "$OUT/launcher.log" || fail "the failure does not name rank $rank"
for p in $(pgrep -x pstrain-worker); do
  grep -qF "$RUN/" "/proc/$p/cmdline" 2>/dev/null && fail "rank process $p still runs"
done
pass "rank $rank killed: pstrain local exited $rc after $((SECONDS - t0)) s: $(grep -m1 'all-reduce job failed' "$OUT/launcher.log" | cut -c1-200)"
echo "2 passed, 0 failed"
