#!/usr/bin/env bash
# Issue 43, item B: the children of `pstrain local` die with it.
#  1. kill -9 of the launcher mid-run: within 10 s no pstrain-ps or pstrain-worker of that
#     run is alive (each asked for SIGTERM when the launcher dies: PR_SET_PDEATHSIG).
#  2. The same with --link, the workers in network namespaces of their own (root, iproute2).
#  3. The sweep of a dead launcher's namespaces: a process left in one (here a sleep in a
#     namespace named after a pid that no longer exists) is killed before the namespace is
#     deleted, when the next --link run starts.
# The run's processes are found by their command lines, which name the run's directory (the
# secret file in it): other processes of the machine are never touched.
source "$(dirname "$0")/lib.sh"
export PSTRAIN_PS_BIN="$PS_BIN" PSTRAIN_WORKER_BIN="$WORKER_BIN"

# of_run DIR: the pids of pstrain-ps and pstrain-worker processes whose command line names DIR.
of_run() {
  local f pid exe
  for f in /proc/[0-9]*/cmdline; do
    pid=${f#/proc/}; pid=${pid%/cmdline}
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue
    case "$(basename "$exe")" in pstrain-ps | pstrain-worker) ;; *) continue ;; esac
    tr '\0' ' ' <"$f" 2>/dev/null | grep -qF -- "$1/" && echo "$pid"
  done
  return 0
}

# killed_outright NAME ARGS...: a run of ARGS in $OUT/NAME, its launcher killed with SIGKILL
# once the job trains; then none of its processes may outlive it by 10 s.
killed_outright() {
  local name=$1; shift
  "$LAUNCHER_BIN" local --workers 2 --model mlp --epochs 20 --batch-size 64 --run-dir "$OUT/$name" \
    "$@" >"$OUT/$name.out" 2>&1 &
  local launcher=$!
  PIDS+=("$launcher")
  wait_step "$OUT/$name/metrics.jsonl" 20 60
  local before
  before=$(of_run "$OUT/$name" | wc -l)
  [ "$before" -eq 3 ] || fail "$name: $before processes of the run found before the kill, not 3"
  kill -KILL "$launcher"
  local deadline=$((SECONDS + 10))
  while [ -n "$(of_run "$OUT/$name")" ]; do
    [ $SECONDS -lt $deadline ] || fail "$name: still alive 10 s after the launcher was killed: $(of_run "$OUT/$name" | tr '\n' ' ')"
    sleep 0.2
  done
  pass "$name: the launcher killed outright, its ps and 2 workers gone within 10 s"
}

killed_outright plain
passed=1

if [ "$(id -u)" = 0 ] && command -v ip >/dev/null && command -v tc >/dev/null &&
  ip netns add "pstlinkprobe-$$" 2>/dev/null; then
  ip netns del "pstlinkprobe-$$"
  killed_outright link --link 1gbit
  passed=$((passed + 1))
  # A pid that no longer exists names the namespace of a launcher that is gone.
  sh -c 'exit 0' &
  dead=$!
  wait "$dead" || true
  ! kill -0 "$dead" 2>/dev/null || fail "pid $dead still exists"
  ns="pstlink-$dead-ps"
  ip netns add "$ns" || fail "cannot make namespace $ns"
  ip netns exec "$ns" sleep 613.$$ &
  stray=$!
  PIDS+=("$stray")
  sleep 0.3
  kill -0 "$stray" 2>/dev/null || fail "the stray process did not start"
  "$LAUNCHER_BIN" local --workers 1 --model mlp --epochs 1 --batch-size 1024 --device null \
    --link 1gbit --run-dir "$OUT/sweep" >"$OUT/sweep.out" 2>&1 || fail "the sweeping run failed"
  deadline=$((SECONDS + 5))
  while kill -0 "$stray" 2>/dev/null && [ "$(ps -o stat= -p "$stray" | cut -c1)" != Z ]; do
    [ $SECONDS -lt $deadline ] || { ip netns del "$ns" 2>/dev/null; fail "the process in $ns outlived the sweep"; }
    sleep 0.1
  done
  ! ip netns list | awk '{print $1}' | grep -qx "$ns" || fail "namespace $ns was not deleted"
  pass "sweep: the process left in $ns was killed and the namespace deleted"
  passed=$((passed + 1))
else
  echo "SKIP: --link cases (they need root, iproute2 and network namespaces)"
fi
echo "$passed passed, 0 failed"
