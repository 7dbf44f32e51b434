#!/usr/bin/env bash
# Issue 39, point 4 and its CI target: a rank of an all-reduce job killed outright (kill -9 of
# a real pstrain-worker process, mid-run) ends `pstrain local --mode allreduce` within 30 s,
# with a non-zero exit and a line naming that rank; no process of the job is left. A rank
# stopped (SIGSTOP: MPI alone would wait for it for ever) ends the job too, within the stall
# limit (10 s by default) and 20 s more, naming the stopped rank. And a flag only a ps has is
# refused before anything starts (exit 2).
source "$(dirname "$0")/lib.sh"

rc=0
"$LAUNCHER_BIN" local --mode allreduce --workers 2 --ps-shards 2 --run-dir "$OUT/refused" \
  >"$OUT/refused.out" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "--mode allreduce --ps-shards 2: exit $rc, not 2"
pass "--mode allreduce --ps-shards 2 refused: $(head -c 200 "$OUT/refused.out")"

# end_of RUN SIGNAL SECONDS: starts a 2-rank job in RUN, sends rank 1 SIGNAL once training is
# under way, and checks that pstrain local ends within SECONDS, failing, naming rank 1, with no
# rank left.
end_of() {
  local run=$1 sig=$2 secs=$3 name launcher victim rc t0 r
  name=$(basename "$run")
  start_bg "$name" "$LAUNCHER_BIN" local --mode allreduce --workers 2 --epochs 20 --report-every 10 \
    --run-dir "$run"
  launcher=$LAST_PID
  wait_step "$run/metrics.jsonl" 100 60
  victim=$(rank_pid "$run" 1)
  [ -n "$victim" ] || fail "$name: no rank 1 of the job found"
  t0=$SECONDS
  kill "-$sig" "$victim"
  rc=0
  wait_pid "$launcher" "$secs" || rc=$?
  [ "$rc" -ne 0 ] || fail "$name: pstrain local exited 0 after rank 1 got SIG$sig"
  grep -qE "rank 1\b" "$OUT/$name.log" || fail "$name: the failure does not name rank 1"
  for r in 0 1; do
    [ -z "$(rank_pid "$run" "$r")" ] || fail "$name: rank $r still runs"
  done
  pass "rank 1 got SIG$sig: pstrain local exited $rc after $((SECONDS - t0)) s: $(grep -m1 'all-reduce job failed' "$OUT/$name.log" | cut -c1-240)"
}

end_of "$OUT/killed" KILL 30
end_of "$OUT/stopped" STOP 30
echo "3 passed, 0 failed"
