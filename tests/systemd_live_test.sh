#!/usr/bin/env bash
# The units under a real systemd (issue 11, "Survive failures"). This machine has no systemd
# as PID 1, so the test boots one in a container of its own: a minimal Debian root made by
# debootstrap (cached in /var/cache/pstrain-test/nspawn-root-HASH, HASH naming the suite,
# mirror and package list; built in a temporary directory and renamed into place only once
# complete), copied afresh for each run, the daemons of this build and deploy/ installed
# into the copy with install.sh --destdir, booted with systemd-nspawn (no bus, no machined:
# --register=no --keep-unit, and --private-network; --system-call-filter=bpf lets the
# container's systemd load the cgroup BPF programs that enforce the units' IPAddressDeny=,
# which nspawn's default filter refuses, so that the jobs run behind the units' real IP
# allow-list) and driven with nsenter. systemd is
# never started on this machine's own root: only inside the copy (see
# /work/shared/notes/systemd-live.md). Whatever happens, the container is powered off and
# waited for when the test ends.
#
# Jobs: the ps and workers pstrain-worker@cpu0 and @cpu1 (enabled, as deploy/README.md
# runs them), sync, mlp, EPOCHS epochs, a checkpoint every CKPT_EVERY steps, worker-timeout
# 3 s, on 127.0.0.1 in the container; ps.conf and worker.conf written by the test.
#   units   the shipped units load with the intended settings, the shipped configs parse
#   security  (issue 12) `systemd-analyze security` in the container scores pstrain-ps,
#           pstrain-worker@0 and @cpu0 at most MAX_EXPOSURE (2.0), and the container's
#           systemd enforces IPAddressDeny= (a unit denied every address cannot connect to
#           127.0.0.1); step a then checks the running daemons' sandbox: a user namespace,
#           a seccomp filter, no capabilities, the ps's /proc without other processes and
#           system files, and each worker instance a user of its own
#   start-limit  (beside the jobs) a worker that fails at once (a bad value: exit 2) is
#           restarted every 5 s until the start limit leaves it failed, as systemd's unit
#           properties show it: NRestarts reaches StartLimitBurst, nothing runs again (its
#           InvocationID and main process start time stay), a start by hand is refused
#           without running it, and reset-failed clears it
#   a       a clean job: units active, the STATUS lines progress
#   e       it finishes: every unit inactive, Result=success, ExecMainStatus=0, and its test
#           accuracy (at least MIN_CLEAN_ACC) is the reference: recovered jobs must reach
#           it minus ACC_SLACK
#   b       systemctl kill -s KILL pstrain-worker@cpu1 mid-run: systemd restarts it, the ps
#           trains on meanwhile, the worker rejoins, the job finishes (@cpu0 waits a fixed
#           time per step in this job, so that it does not finish alone before @cpu1 is back)
#   c       systemctl kill -s KILL pstrain-ps mid-run: systemd restarts it, it resumes from
#           a checkpoint, the workers (not restarted) reconnect, the job finishes with the
#           clean job's weights, bit for bit (a resumed sync job replays the lost steps)
#   f       (issue 28) an elastic job, workers = 1:2: systemctl stop pstrain-worker@cpu1
#           mid-run is a departure: it exits 0, systemd does not restart it, the job finishes
#           with one departure and no loss
#   d       systemctl stop pstrain-ps mid-run: the ps exits 3, the workers exit 3, nothing
#           is restarted (NRestarts unchanged over 10 s), every unit inactive, not failed;
#           starting the units again resumes the job, which finishes (e again), again with
#           the clean job's weights
# Every check reads systemd's unit properties (ActiveState, Result, ExecMainStatus,
# NRestarts, InvocationID, StatusText) or the job's summary, not the wording of systemd's or
# journald's messages, nor what the journal kept: lines from the journal are only shown.
# If the container cannot be made or booted (not root, no systemd-nspawn or debootstrap,
# debootstrap failing, no boot) the test fails with the reason: it never passes vacuously.
source "$(dirname "$0")/lib.sh"

# 6 epochs: every step below needs a job that is still running at version 600 (of 2808)
# and long enough for a restart (5 s) to fall inside it; 16 epochs (7488 versions) gave the
# same checks 2.5 times the training.
EPOCHS=6
CKPT_EVERY=100
# mlp, sync, 2 workers, seed 42, in the container. With 16 epochs: 0.8912 in every clean
# run on the development VM (weights checksum f8cfe5dc5bb736bb with OpenBLAS's Cooperlake
# kernels: both move with the kernels, and the test compares them only with its own clean
# run), and after a ps kill or stop (same weights); with a worker killed (how long its slot
# stays empty varies): 0.8840, 0.8884, 0.8915, 0.8856, 0.8886, at most 0.0072 below clean.
# With 6 epochs (this machine, 2026-11-28): clean 0.8805 (so is `pstrain local` with these
# settings; 0.8738 after 4 epochs), the same after a ps kill or stop; worker killed: 0.8789,
# 0.8782, 0.8791, 0.8787, at most 0.0023 below clean. MIN_CLEAN_ACC 0.86 leaves 0.02 below
# the clean run (0.87 left 0.017 with 16 epochs); ACC_SLACK stays 0.015, 0.0127 below the
# lowest killed-worker run.
MIN_CLEAN_ACC=0.86
ACC_SLACK=0.015
# The most `systemd-analyze security` may give either unit (0 best, 10 worst; it was 3.0 and
# 3.2 before issue 12's hardening).
MAX_EXPOSURE=2.0
SUITE=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
# The root holds the daemons' run-time libraries, the data, and what the tests run inside.
ROOT_PACKAGES=systemd,systemd-sysv,dbus,libnss-systemd,libuv1,libsodium23,libprotobuf-c1,libopenblas0,libinih1,libcjson1,libsystemd0,zlib1g,libpng16-16,libjpeg62-turbo,dataset-fashion-mnist,iproute2,procps
CACHE_BASE=${PSTRAIN_NSPAWN_CACHE:-/var/cache/pstrain-test}
TMP="${TEST_TMPDIR:-$(mktemp -d)}/systemd_live_test.$$"
CTR_PATH=/usr/sbin:/usr/bin:/sbin:/bin
T_START=$(date +%s.%N)
passed=0
failed=0
NSPAWN_PID=
INIT_PID=

# The setup cannot go on: one line saying why, and a failed test.
setup_fail() {
  echo "FAIL: $*"
  echo "0 passed, 1 failed"
  REPORTED=1
  exit 1
}

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------------------------------
# The container

# C CMD...: runs CMD inside the container (all its namespaces), with a clean environment.
C() {
  nsenter -t "$INIT_PID" -a env -i PATH="$CTR_PATH" LANG=C.UTF-8 SYSTEMD_COLORS=0 \
    SYSTEMD_PAGER= "$@"
}

container_alive() { [ -n "$NSPAWN_PID" ] && kill -0 "$NSPAWN_PID" 2>/dev/null; }

# Powers the container off and waits for it (then TERM and KILL nspawn if it hangs), saves
# its journal, and removes the copy of the root once nothing runs in it any more.
live_cleanup() {
  local rc=$?
  if [ "${REPORTED:-0}" = 0 ]; then
    echo "FAIL: the test stopped unexpectedly (status $rc); see the lines above"
    echo "$passed passed, $((failed + 1)) failed"
  fi
  if container_alive; then
    [ -n "$INIT_PID" ] && C journalctl -o short-precise --no-pager >"$OUT/journal.log" 2>&1
    [ -n "$INIT_PID" ] && C systemctl poweroff >/dev/null 2>&1
    for _ in $(seq 150); do container_alive || break; sleep 0.2; done
    if container_alive; then
      echo "note: the container did not power off in 30 s; stopping systemd-nspawn" >&2
      kill -TERM "$NSPAWN_PID" 2>/dev/null
      for _ in $(seq 50); do container_alive || break; sleep 0.2; done
    fi
    container_alive && kill -KILL "$NSPAWN_PID" 2>/dev/null
    for _ in $(seq 50); do container_alive || break; sleep 0.2; done
  fi
  [ -n "$NSPAWN_PID" ] && wait "$NSPAWN_PID" 2>/dev/null
  if ! container_alive && [ -d "$TMP" ]; then rm -rf "$TMP"; fi
}
trap 'live_cleanup; cleanup' EXIT
trap 'exit 143' TERM INT

[ "$(id -u)" = 0 ] || setup_fail "not root: systemd-nspawn and debootstrap need root (run as root; the test is tagged local)"
command -v systemd-nspawn >/dev/null ||
  setup_fail "no systemd-nspawn (Debian package systemd-container, which ./pstrain installs)"
command -v debootstrap >/dev/null ||
  setup_fail "no debootstrap (Debian package debootstrap, which ./pstrain installs)"
command -v nsenter >/dev/null || setup_fail "no nsenter (Debian package util-linux)"
command -v flock >/dev/null || setup_fail "no flock (Debian package util-linux)"

# The mirror the host's own apt uses for its suite's main component.
MIRROR=$(apt-get indextargets --format '$(CODENAME) $(COMPONENT) $(SITE)' 2>/dev/null |
  awk -v s="$SUITE" '$1 == s && $2 == "main" { print $3; exit }')
[ -n "$MIRROR" ] || MIRROR=http://deb.debian.org/debian
KEY=$(printf '%s\n' "minbase" "$SUITE" "$MIRROR" "$ROOT_PACKAGES" | sha256sum | cut -c1-16)
CACHED_ROOT=$CACHE_BASE/nspawn-root-$KEY

# The cached root: made once, under a lock, in a temporary directory that becomes
# nspawn-root-KEY only when debootstrap finished; one left by an interrupted build (its
# builder gone) is removed, never used.
build_root() {
  mkdir -p "$CACHE_BASE" || setup_fail "cannot create $CACHE_BASE"
  exec 9>"$CACHE_BASE/.lock"
  flock -w 900 9 || setup_fail "could not lock $CACHE_BASE/.lock in 15 minutes"
  if [ ! -d "$CACHED_ROOT" ]; then
    local d
    for d in "$CACHE_BASE"/nspawn-root-*.tmp.*; do
      [ -e "$d" ] && rm -rf "$d"
    done
    local tmp=$CACHED_ROOT.tmp.$$ t0 rc=0
    t0=$(now)
    echo "building the container root (cold cache): debootstrap $SUITE from $MIRROR into $CACHED_ROOT"
    debootstrap --variant=minbase --include="$ROOT_PACKAGES" "$SUITE" "$tmp" "$MIRROR" \
      >"$OUT/debootstrap.log" 2>&1 || rc=$?
    if [ "$rc" != 0 ]; then
      rm -rf "$tmp"
      setup_fail "debootstrap $SUITE $MIRROR exited $rc: $(grep -E '^E:|error' "$OUT/debootstrap.log" | tail -n 1)"
    fi
    mv -T "$tmp" "$CACHED_ROOT" || { rm -rf "$tmp"; setup_fail "cannot rename $tmp to $CACHED_ROOT"; }
    echo "figure: debootstrap took $(since "$t0") s"
  else
    echo "container root: cached $CACHED_ROOT"
  fi
  flock -u 9
  exec 9>&-
}

boot_container() {
  local t0 state=
  mkdir -p "$TMP"
  t0=$(now)
  cp -a "$CACHED_ROOT" "$TMP/root" || setup_fail "cannot copy $CACHED_ROOT to $TMP/root"
  echo pstrain-live >"$TMP/root/etc/hostname"
  bash "$RUNFILES/deploy/install.sh" --destdir "$TMP/root" --build-dir "$RUNFILES" \
    >"$OUT/install.log" 2>&1 || setup_fail "install.sh --destdir failed: $(tail -n 1 "$OUT/install.log")"
  local missing
  missing=$(chroot "$TMP/root" ldd /usr/local/bin/pstrain-ps /usr/local/bin/pstrain-worker 2>&1 |
    grep 'not found' | sort -u | tr -s ' \t\n' ' ') || true
  [ -z "$missing" ] || setup_fail "libraries missing in the container root: $missing"
  systemd-nspawn -D "$TMP/root" -b --register=no --keep-unit --private-network \
    --system-call-filter=bpf --machine="pstrain-live-$$" --console=read-only \
    </dev/null >"$OUT/console.log" 2>&1 &
  NSPAWN_PID=$!
  for _ in $(seq 100); do
    container_alive || setup_fail "systemd-nspawn exited at once: $(grep -v '^$' "$OUT/console.log" | tail -n 1)"
    INIT_PID=$(cat "/proc/$NSPAWN_PID/task/$NSPAWN_PID/children" 2>/dev/null | awk '{print $1}')
    [ -n "$INIT_PID" ] && [ "$(cat "/proc/$INIT_PID/comm" 2>/dev/null)" = systemd ] && break
    INIT_PID=
    sleep 0.1
  done
  [ -n "$INIT_PID" ] || setup_fail "no systemd inside the container after 10 s: $(grep -v '^$' "$OUT/console.log" | tail -n 1)"
  for _ in $(seq 300); do
    state=$(C systemctl is-system-running 2>/dev/null) || true
    case "$state" in running|degraded) break ;; esac
    sleep 0.2
  done
  case "$state" in
    running) ;;
    degraded) echo "note: the container's systemd is degraded: $(C systemctl --failed --plain --no-legend | tr -s ' \n' ' ')" ;;
    *) setup_fail "the container did not boot in 60 s (is-system-running: '${state:-nothing}')" ;;
  esac
  echo "figure: container copied, installed and booted in $(since "$t0") s (systemd $(C systemctl --version | awk 'NR == 1 {print $2}'))"
}

# ---------------------------------------------------------------------------------------
# Helpers inside the container

PS=pstrain-ps.service
W0=pstrain-worker@cpu0.service
W1=pstrain-worker@cpu1.service
UNITS=("$PS" "$W0" "$W1")

prop() { C systemctl show -P "$2" "$1" 2>/dev/null; }

# props UNIT...: "unit: ActiveState/Result ExecMainStatus=N NRestarts=N" lines.
props() {
  local u
  for u in "$@"; do
    echo "$u: $(prop "$u" ActiveState)/$(prop "$u" Result) ExecMainStatus=$(prop "$u" ExecMainStatus) NRestarts=$(prop "$u" NRestarts)"
  done
}

# wait_for SECONDS CMD...: polls CMD every 0.2 s until it succeeds; fails after SECONDS.
wait_for() {
  local deadline
  deadline=$(awk -v n="$(now)" -v s="$1" 'BEGIN { printf "%.1f", n + s }'); shift
  while ! "$@"; do
    awk -v n="$(now)" -v d="$deadline" 'BEGIN { exit !(n > d) }' && return 1
    sleep 0.2
  done
}

is_state() { [ "$(prop "$1" ActiveState)" = "$2" ]; }
all_inactive() {
  local u
  for u in "${UNITS[@]}"; do
    case "$(prop "$u" ActiveState)" in inactive|failed) ;; *) return 1 ;; esac
  done
}

# ps_version: the version in the ps's STATUS line (0 when it shows none).
ps_version() {
  prop "$PS" StatusText | sed -n 's/.*version \([0-9][0-9]*\).*/\1/p' | head -n 1 | grep . || echo 0
}
version_at_least() { [ "$(ps_version)" -ge "$1" ]; }
ps_shows_workers() { prop "$PS" StatusText | grep -q "$1 workers"; }
checkpoints() { C sh -c 'ls -A /var/lib/pstrain/checkpoints 2>/dev/null | wc -l'; }
has_checkpoint() { [ "$(checkpoints)" -gt 0 ]; }

# A fresh job: every unit stopped, failed states, restart counters and start limits reset,
# no checkpoints and no summary left from the last job.
reset_job() {
  C systemctl stop "${UNITS[@]}" >/dev/null 2>&1
  C systemctl reset-failed "${UNITS[@]}" >/dev/null 2>&1
  C sh -c 'rm -rf /var/lib/pstrain/checkpoints/* /var/lib/pstrain/summary.json /etc/pstrain/worker-cpu0.env'
}

# start_job: starts the ps and both workers (systemd starts the ps first, After=) and
# waits for all three to be active.
start_job() {
  JOB_T0=$(now)
  timeout 90 nsenter -t "$INIT_PID" -a env -i PATH="$CTR_PATH" systemctl start "${UNITS[@]}" ||
    { why "systemctl start ${UNITS[*]} failed: $(props "${UNITS[@]}" | tr '\n' ';')"; return 1; }
}

# finish_job SECONDS: waits for every unit to be inactive, then checks e: each one
# Result=success and ExecMainStatus=0; ACC is the summary's test accuracy.
finish_job() {
  wait_for "$1" all_inactive || { why "the job did not finish in $1 s: $(props "${UNITS[@]}" | tr '\n' ';')"; return 1; }
  JOB_WALL=$(since "$JOB_T0")
  local u bad=
  for u in "${UNITS[@]}"; do
    # ExecMainPID 0 would be a unit that systemd unloaded, whose status says nothing.
    [ "$(prop "$u" Result)" = success ] && [ "$(prop "$u" ExecMainStatus)" = 0 ] &&
      [ "$(prop "$u" ExecMainPID)" != 0 ] || bad="$bad $(props "$u") ExecMainPID=$(prop "$u" ExecMainPID);"
  done
  [ -z "$bad" ] || { why "not every unit finished with Result=success, ExecMainStatus=0:$bad"; return 1; }
  C cat /var/lib/pstrain/summary.json >"$OUT/summary-$STEP.json" 2>/dev/null ||
    { why "no /var/lib/pstrain/summary.json"; return 1; }
  ACC=$(json_field "$OUT/summary-$STEP.json" test_accuracy) || { why "no test_accuracy in the summary"; return 1; }
  SUM=$(json_field "$OUT/summary-$STEP.json" weights_checksum)
  [ "$(json_field "$OUT/summary-$STEP.json" stopped)" = False ] ||
    { why "the summary of a finished job says stopped"; return 1; }
}

# summary_says KEY VALUE: the last job's summary has KEY = VALUE (Python's spelling).
summary_says() {
  local v
  v=$(json_field "$OUT/summary-$STEP.json" "$1")
  [ "$v" = "$2" ] || { why "the summary's $1 is $v, expected $2"; return 1; }
}

# same_weights: a sync job resumed from a checkpoint replays the steps it lost, so it ends
# with the clean job's weights, bit for bit.
same_weights() {
  [ "$SUM" = "$CLEAN_SUM" ] ||
    { why "weights checksum $SUM, the clean job's is $CLEAN_SUM: the resumed job did not replay it exactly"; return 1; }
}

acc_bound_ok() {
  at_least "$ACC" "$ACC_BOUND" ||
    { why "test accuracy $ACC below the bound $ACC_BOUND (clean run $CLEAN_ACC - $ACC_SLACK)"; return 1; }
}

# journal_of UNIT INVOCATION: that run's log lines.
journal_of() { C journalctl -o cat --no-pager _SYSTEMD_INVOCATION_ID="$2"; }

WHY=
why() { WHY="$*"; }

# step NAME DESCRIPTION FUNCTION: runs one check; a failure is counted and the next one runs.
step() {
  local name=$1 desc=$2 fn=$3 t0
  STEP=$name
  WHY=
  t0=$(now)
  echo "--- step $name: $desc"
  if "$fn"; then
    passed=$((passed + 1))
    echo "PASS: $name: $desc ($(since "$t0") s)"
  else
    failed=$((failed + 1))
    echo "FAIL: $name: $desc: ${WHY:-see the log above}"
    props "${UNITS[@]}" | sed 's/^/  /'
    C journalctl -o short-precise --no-pager -n 30 -u "$PS" -u "$W0" -u "$W1" | sed 's/^/  | /'
  fi
}

# ---------------------------------------------------------------------------------------
# The steps

# The shipped units as the container's systemd loaded them, and the shipped configs.
step_units() {
  local u v expect
  for u in "$PS" "$W0"; do
    local prevent=3
    [ "$u" = "$PS" ] && prevent="3 4 5"
    for expect in Type=notify Restart=on-failure RestartUSec=5s SuccessExitStatus=3 \
                  "RestartPreventExitStatus=$prevent"; do
      v=$(prop "$u" "${expect%%=*}")
      [ "$v" = "${expect#*=}" ] || { why "$u: ${expect%%=*} is '$v', expected '${expect#*=}'"; return 1; }
    done
    v=$(prop "$u" StartLimitBurst)
    [ "$v" -gt 1 ] 2>/dev/null || { why "$u: StartLimitBurst is '$v'"; return 1; }
    v=$(prop "$u" Documentation)
    case "$v" in file:/*) ;; *) why "$u: Documentation=$v is not a file: URL"; return 1 ;; esac
    C test -s "${v#file:}" || { why "$u: Documentation=$v names no file"; return 1; }
  done
  # systemd-analyze verify with its defaults, in a root without man pages (where a
  # Documentation=man: link fails it): no output at all.
  local out
  out=$(C systemd-analyze verify "$PS" "$W0" 2>&1) || { why "systemd-analyze verify in the container: $out"; return 1; }
  [ -z "$out" ] || { why "systemd-analyze verify in the container said: $(echo "$out" | head -n 3 | tr '\n' ' ')"; return 1; }
  echo "  systemd-analyze verify $PS $W0 in the container (no man pages there): no complaints"
  echo "  $PS: StartLimitIntervalUSec=$(prop "$PS" StartLimitIntervalUSec) StartLimitBurst=$(prop "$PS" StartLimitBurst) StateDirectory=$(prop "$PS" StateDirectory)"
  echo "  $W0: StartLimitIntervalUSec=$(prop "$W0" StartLimitIntervalUSec) StartLimitBurst=$(prop "$W0" StartLimitBurst)"
  # The shipped configs parse with this build's daemons, and the checkpoint directory they
  # name is one of the ps unit's state directories.
  C /usr/local/bin/pstrain-ps --config /etc/pstrain/ps.conf --print-config >"$OUT/ps-print-config.txt" 2>&1 ||
    { why "the shipped ps.conf does not parse: $(grep -v '^#' "$OUT/ps-print-config.txt" | tail -n 1)"; return 1; }
  C /usr/local/bin/pstrain-worker --config /etc/pstrain/worker.conf --instance cpu0 --print-config \
    >"$OUT/worker-print-config.txt" 2>&1 ||
    { why "the shipped worker.conf does not parse: $(tail -n 1 "$OUT/worker-print-config.txt")"; return 1; }
  local dir
  dir=$(sed -n 's/^checkpoint-dir *= *\([^ ]*\).*/\1/p' "$RUNFILES/deploy/ps.conf")
  [ -n "$dir" ] || { why "the shipped ps.conf sets no checkpoint-dir"; return 1; }
  prop "$PS" StateDirectory | tr ' ' '\n' | grep -qx "${dir#/var/lib/}" ||
    { why "checkpoint-dir $dir is not one of the ps unit's StateDirectory= ($(prop "$PS" StateDirectory))"; return 1; }
  grep -q '^# reconnect-timeout = ' "$RUNFILES/deploy/worker.conf" ||
    { why "the shipped worker.conf does not mention reconnect-timeout"; return 1; }
}

# The exposure `systemd-analyze security` gives each unit in the container, at most
# MAX_EXPOSURE (--threshold takes tenths and fails above it), and the IP firewall enforced:
# a unit with IPAddressDeny=any times out connecting to a closed port on 127.0.0.1, where
# without the firewall the connection is refused at once.
step_security() {
  local u out rc score threshold
  threshold=$(awk -v m="$MAX_EXPOSURE" 'BEGIN { printf "%d", m * 10 + 0.5 }')
  for u in "$PS" pstrain-worker@0.service "$W0"; do
    rc=0
    out=$(C systemd-analyze security --no-pager --threshold="$threshold" "$u" 2>&1) || rc=$?
    printf '%s\n' "$out" >"$OUT/security-$u.txt"
    # --threshold makes the exit status the verdict; the score is read from the text only
    # to be shown.
    score=$(printf '%s\n' "$out" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
    echo "figure: systemd-analyze security $u: ${score:-(not found in its output)} (at most $MAX_EXPOSURE); still exposed: $(printf '%s\n' "$out" | awk '/^✗/ { print $2 }' | tr '\n' ' ')"
    [ "$rc" = 0 ] ||
      { why "systemd-analyze security $u: ${score:-a score} above $MAX_EXPOSURE (exit $rc): $(printf '%s\n' "$out" | tail -n 2 | tr '\n' ' ')"; return 1; }
  done
  rc=0
  C systemd-run --wait --pipe --quiet --unit=pstrain-ipdeny-probe -p IPAddressDeny=any \
    timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/1' >"$OUT/ipdeny-probe.log" 2>&1 || rc=$?
  case "$rc" in
    124) echo "  IPAddressDeny= is enforced in the container: a unit denied every address timed out connecting to 127.0.0.1:1" ;;
    *) why "the container's systemd does not enforce IPAddressDeny= (a denied unit's connection to 127.0.0.1:1 ended with status $rc: $(tail -n 1 "$OUT/ipdeny-probe.log")); the units' IP allow-list goes untested"
       return 1 ;;
  esac
}

# sandbox_of_running: the hardening as the kernel shows it for the running daemons.
sandbox_of_running() {
  local u pid m users=() map
  for u in "${UNITS[@]}"; do
    pid=$(prop "$u" MainPID)
    [ -n "$pid" ] && [ "$pid" != 0 ] || { why "$u has no main process"; return 1; }
    map=$(C cat "/proc/$pid/uid_map" | awk '{ print $1 }' | tr '\n' ' ')
    users+=("$(C stat -c %U "/proc/$pid")")
    [ "$(C cat "/proc/$pid/uid_map" | wc -l)" = 2 ] ||
      { why "$u (pid $pid) is not in a user namespace of its own: uid_map maps $map"; return 1; }
    C grep -qx 'Seccomp:[[:space:]]*2' "/proc/$pid/status" || { why "$u runs without a seccomp filter"; return 1; }
    C grep -qx 'CapEff:[[:space:]]*0*' "/proc/$pid/status" || { why "$u has capabilities: $(C grep CapEff "/proc/$pid/status")"; return 1; }
    m=$(C awk '$5 == "/proc" { print $NF }' "/proc/$pid/mountinfo")
    case "$u:$m" in
      "$PS":*hidepid=invisible*subset=pid*|"$PS":*subset=pid*hidepid=invisible*) ;;
      "$PS":*) why "$u: its /proc is mounted '$m', expected hidepid=invisible and subset=pid"; return 1 ;;
      *:*hidepid=invisible*) ;;
      *) why "$u: its /proc is mounted '$m', expected hidepid=invisible"; return 1 ;;
    esac
  done
  [ "${users[1]}" = pstrain-worker-cpu0 ] && [ "${users[2]}" = pstrain-worker-cpu1 ] ||
    { why "the workers run as '${users[1]}' and '${users[2]}', expected pstrain-worker-cpu0 and pstrain-worker-cpu1"; return 1; }
  echo "  sandbox: users ${users[*]}, each in a user namespace (uid_map: root and itself), seccomp on, no capabilities; /proc hidepid=invisible (the ps's also subset=pid)"
}

# Settings of this test's jobs. The recovery keys go in only when the daemons know them, so
# that a build without them still runs steps a and e.
write_configs() {
  local recovery=
  if [ "$HAVE_RECOVERY" = 1 ]; then
    recovery="checkpoint-dir = /var/lib/pstrain/checkpoints
checkpoint-every = $CKPT_EVERY
checkpoint-keep = 3
worker-timeout = 3
rejoin-timeout = 60
on-worker-loss = continue"
  fi
  C sh -c "cat >/etc/pstrain/ps.conf" <<EOF
# written by tests/systemd_live_test.sh
[ps]
listen = 127.0.0.1:7070
workers = 2
mode = sync
model = mlp
epochs = $EPOCHS
seed = 42
status-interval = 1
summary-json = /var/lib/pstrain/summary.json
$recovery
EOF
  local wrecovery=
  [ "$HAVE_RECOVERY" = 1 ] && wrecovery="reconnect-timeout = 60"
  C sh -c "cat >/etc/pstrain/worker.conf" <<EOF
# written by tests/systemd_live_test.sh
[worker]
ps = 127.0.0.1:7070
connect-timeout = 30
$wrecovery
EOF
}

# A worker that fails at once (a bad value in its environment file: exit 2) is restarted
# every RestartSec until the start limit leaves the unit failed. It runs beside the jobs
# (it never reaches the ps) and is checked at the end.
BAD=pstrain-worker@cpu9.service
start_bad_worker() {
  C sh -c 'echo PSTRAIN_WORKER_THREADS=not-a-number >/etc/pstrain/worker-cpu9.env'
  C systemctl start --no-block "$BAD"
}
step_start_limit() {
  local burst n0 inv t0 result
  burst=$(prop "$BAD" StartLimitBurst)
  wait_for 90 is_state "$BAD" failed ||
    { why "$BAD not failed after 90 s: $(props "$BAD")"; return 1; }
  # systemd counts each restart it schedules in NRestarts, the one the start limit refused
  # too: StartLimitBurst of them means it ran StartLimitBurst times and then gave up.
  n0=$(prop "$BAD" NRestarts)
  [ "$n0" = "$burst" ] ||
    { why "$BAD failed with NRestarts=$n0, expected StartLimitBurst=$burst: $(props "$BAD")"; return 1; }
  # The refused restart leaves the last run's Result (exit-code, ExecMainStatus=2) when that
  # run failed (systemd 252 gives start-limit-hit only after a run that succeeded); a newer
  # systemd may say start-limit-hit. Either way the runs have ended: checked below.
  result="$(prop "$BAD" Result):$(prop "$BAD" ExecMainStatus)"
  case "$result" in
    start-limit-hit:*|exit-code:2) ;;
    *) why "$BAD: Result and ExecMainStatus are $result, expected start-limit-hit or the last run's exit-code:2"; return 1 ;;
  esac
  inv=$(prop "$BAD" InvocationID)
  t0=$(prop "$BAD" ExecMainStartTimestampMonotonic)
  echo "  $(props "$BAD"): it ran $burst times (exit 2 each) and systemd gave up"
  C systemctl status --no-pager "$BAD" 2>&1 | sed -n '1,4p' | sed 's/^/  | /'
  # No run after that, for longer than RestartSec.
  sleep 6
  is_state "$BAD" failed && [ "$(prop "$BAD" NRestarts)" = "$n0" ] && [ "$(prop "$BAD" InvocationID)" = "$inv" ] &&
    [ "$(prop "$BAD" ExecMainStartTimestampMonotonic)" = "$t0" ] ||
    { why "$BAD ran again after its start limit: $(props "$BAD")"; return 1; }
  # Starting it by hand within the interval is refused too, without running it (a new run
  # would have a new invocation), until reset-failed.
  C systemctl start "$BAD" >/dev/null 2>&1 && { why "systemctl start $BAD succeeded within the start limit"; return 1; }
  [ "$(prop "$BAD" InvocationID)" = "$inv" ] && [ "$(prop "$BAD" ExecMainStartTimestampMonotonic)" = "$t0" ] ||
    { why "systemctl start ran $BAD although its start limit was hit"; return 1; }
  echo "  a start by hand within the limit is refused, and nothing ran: $(props "$BAD")"
  C systemctl reset-failed "$BAD"
  is_state "$BAD" inactive && [ "$(prop "$BAD" NRestarts)" = 0 ] ||
    { why "reset-failed left $(props "$BAD")"; return 1; }
}

# a + e: the clean reference job.
step_clean() {
  reset_job
  start_job || return 1
  echo "  started: $(props "${UNITS[@]}" | tr '\n' ' ')"
  sandbox_of_running || return 1
  local seen=() s last="" wseen=() ws wlast=""
  while ! all_inactive; do
    s=$(prop "$PS" StatusText)
    [ -n "$s" ] && [ "$s" != "$last" ] && { seen+=("$s"); last=$s; }
    ws=$(prop "$W0" StatusText)
    [ -n "$ws" ] && [ "$ws" != "$wlast" ] && { wseen+=("$ws"); wlast=$ws; }
    awk -v a="$JOB_T0" -v b="$(now)" 'BEGIN { exit !(b - a > 120) }' && break
    sleep 0.3
  done
  finish_job 10 || return 1
  echo "  ps STATUS lines seen: ${#seen[@]}, e.g."
  [ "${#seen[@]}" -gt 0 ] && printf '    %s\n' "${seen[0]}" "${seen[$(( ${#seen[@]} / 2 ))]}" "$last"
  echo "  worker cpu0 STATUS lines seen: ${#wseen[@]}, last: '$wlast'"
  local versions
  versions=$(printf '%s\n' "${seen[@]}" | sed -n 's/.*version \([0-9][0-9]*\).*/\1/p' | uniq)
  [ "$(echo "$versions" | grep -c .)" -ge 3 ] && [ "$(echo "$versions" | sort -n | uniq)" = "$versions" ] ||
    { why "the ps's STATUS lines did not progress: $(echo "$versions" | tr "\n" " ")"; return 1; }
  [ "${#wseen[@]}" -ge 3 ] || { why "only ${#wseen[@]} distinct worker STATUS lines"; return 1; }
  CLEAN_ACC=$ACC
  CLEAN_SUM=$SUM
  prop "$PS" StatusText | grep -q '^finished' ||
    { why "the finished ps's last STATUS line is '$(prop "$PS" StatusText)'"; return 1; }
  ACC_BOUND=$(awk -v a="$ACC" -v s="$ACC_SLACK" 'BEGIN { printf "%.4f", a - s }')
  echo "figure: clean job: test accuracy $ACC, weights checksum $SUM, ${JOB_WALL} s from start to every unit inactive"
  echo "  $(props "${UNITS[@]}" | tr '\n' ' ')"
  at_least "$ACC" "$MIN_CLEAN_ACC" || { why "clean test accuracy $ACC below $MIN_CLEAN_ACC"; return 1; }
}

# b: a worker killed mid-run. Alone, the other worker would finish its shard in a few
# seconds, hardly more than systemd takes to restart the killed one (RestartSec 5 s, then
# loading the data; back 7.0 to 9.5 s after the kill here, under a load of 7 to 9): in this
# job each of its steps also waits 2 x 2 ms (delay-ms, from its instance's environment
# file), so that alone it needs at least 11 s for its 2808 steps on any CPU, besides its
# compute, and the job is still running when the killed worker comes back. (A slow-factor,
# in proportion to the compute, would shrink with a faster CPU.)
step_kill_worker() {
  reset_job
  C sh -c 'echo PSTRAIN_WORKER_DELAY_MS=2 >/etc/pstrain/worker-cpu0.env'
  start_job || return 1
  C rm -f /etc/pstrain/worker-cpu0.env
  wait_for 60 version_at_least 50 || { why "the job did not reach version 50"; return 1; }
  local inv v_kill t_kill v_gap t_back
  inv=$(prop "$W1" InvocationID)
  v_kill=$(ps_version)
  t_kill=$(now)
  C systemctl kill -s KILL "$W1"
  echo "  killed $W1 (SIGKILL) at version $v_kill"
  # Training goes on with one worker while systemd waits RestartSec (5 s) to restart it.
  sleep 4
  v_gap=$(ps_version)
  echo "  4 s later, before the restart: version $v_gap, ps STATUS '$(prop "$PS" StatusText)'"
  [ "$v_gap" -gt "$v_kill" ] || { why "the ps did not train on without the killed worker (version $v_kill -> $v_gap)"; return 1; }
  wait_for 30 eval '[ "$(prop "$W1" NRestarts)" -ge 1 ] && is_state "$W1" active' ||
    { why "$W1 was not restarted and active again in 30 s: $(props "$W1")"; return 1; }
  [ "$(prop "$W1" InvocationID)" != "$inv" ] || { why "$W1 still has the killed run's invocation"; return 1; }
  wait_for 20 ps_shows_workers 2/2 || { why "the ps never showed 2/2 workers again: '$(prop "$PS" StatusText)'"; return 1; }
  t_back=$(since "$t_kill")
  echo "  $W1 restarted by systemd (NRestarts=$(prop "$W1" NRestarts)) and rejoined ${t_back} s after the kill: '$(prop "$PS" StatusText)'"
  finish_job 120 || return 1
  echo "figure: worker killed: test accuracy $ACC (bound $ACC_BOUND), job ${JOB_WALL} s, worker back after ${t_back} s, workers_lost $(json_field "$OUT/summary-$STEP.json" workers_lost)"
  acc_bound_ok || return 1
  summary_says workers_lost 1 || return 1
  summary_says workers_abandoned 0 || return 1
  [ "$(prop "$W1" NRestarts)" = 1 ] && [ "$(prop "$W0" NRestarts)" = 0 ] && [ "$(prop "$PS" NRestarts)" = 0 ] ||
    { why "unexpected restarts: $(props "${UNITS[@]}" | tr '\n' ' ')"; return 1; }
}

# c: the ps killed mid-run.
step_kill_ps() {
  reset_job
  start_job || return 1
  wait_for 60 eval 'version_at_least 600 && has_checkpoint' ||
    { why "no checkpoint by version $(ps_version) (checkpoint-every $CKPT_EVERY)"; return 1; }
  local inv v_kill t_kill t_back inv2 resumed
  inv=$(prop "$PS" InvocationID)
  v_kill=$(ps_version)
  t_kill=$(now)
  echo "  $(checkpoints) checkpoint(s): $(C ls /var/lib/pstrain/checkpoints | tr '\n' ' ')"
  C systemctl kill -s KILL "$PS"
  echo "  killed $PS (SIGKILL) at version $v_kill"
  wait_for 40 eval '[ "$(prop "$PS" NRestarts)" -ge 1 ] && is_state "$PS" active' ||
    { why "$PS was not restarted and active again in 40 s: $(props "$PS")"; return 1; }
  inv2=$(prop "$PS" InvocationID)
  [ "$inv2" != "$inv" ] || { why "$PS still has the killed run's invocation"; return 1; }
  # Shown from the journal when it kept the line; that it resumed is the summary's to say
  # (checked once the job has finished).
  wait_for 10 eval 'journal_of "$PS" "$inv2" >"$OUT/ps-after-kill.log"; grep -q "resumed from" "$OUT/ps-after-kill.log"' || true
  resumed=$(grep 'resumed from' "$OUT/ps-after-kill.log" | head -n 1)
  echo "  restarted ps ($(since "$t_kill") s after the kill): ${resumed:-(no line about resuming in its journal)}"
  wait_for 60 ps_shows_workers 2/2 || { why "the workers did not come back to the restarted ps: '$(prop "$PS" StatusText)'"; return 1; }
  t_back=$(since "$t_kill")
  echo "  both workers reconnected ${t_back} s after the kill: '$(prop "$PS" StatusText)'"
  # The workers must have reconnected, not been restarted; the job is still seen through to
  # the end (and its figures printed) before that counts.
  local restarted=
  [ "$(prop "$W0" NRestarts)" = 0 ] && [ "$(prop "$W1" NRestarts)" = 0 ] ||
    restarted="the workers were restarted by systemd instead of reconnecting: $(props "$W0" "$W1" | tr '\n' ' ')"
  [ -z "$restarted" ] || echo "  problem: $restarted"
  finish_job 120 || return 1
  echo "figure: ps killed: test accuracy $ACC (bound $ACC_BOUND), job ${JOB_WALL} s, training again ${t_back} s after the kill, weights checksum $SUM (clean $CLEAN_SUM)"
  acc_bound_ok || return 1
  summary_says resumed True || return 1
  [ "$(json_field "$OUT/summary-$STEP.json" resumed_from_version)" -gt 0 ] ||
    { why "the restarted ps resumed from version 0"; return 1; }
  same_weights || return 1
  [ "$(prop "$PS" NRestarts)" = 1 ] || { why "$PS restarted $(prop "$PS" NRestarts) times, expected once"; return 1; }
  [ -z "$restarted" ] || { why "$restarted"; return 1; }
}

# d, then e: systemctl stop mid-run, then start again to finish.
step_stop_resume() {
  reset_job
  start_job || return 1
  wait_for 60 eval 'version_at_least 600 && has_checkpoint' ||
    { why "no checkpoint by version $(ps_version)"; return 1; }
  local v_stop t0 u r0 r1 inv2 resumed
  v_stop=$(ps_version)
  t0=$(now)
  C systemctl stop "$PS" || { why "systemctl stop $PS failed"; return 1; }
  echo "  systemctl stop $PS at version $v_stop returned after $(since "$t0") s; ps: $(props "$PS")"
  [ "$(prop "$PS" ExecMainStatus)" = 3 ] || { why "the stopped ps exited $(prop "$PS" ExecMainStatus), expected 3"; return 1; }
  wait_for 30 all_inactive || { why "the workers did not end after the ps was stopped: $(props "$W0" "$W1" | tr '\n' ' ')"; return 1; }
  echo "  every unit inactive $(since "$t0") s after the stop"
  r0=$(for u in "${UNITS[@]}"; do prop "$u" NRestarts; done | tr '\n' ' ')
  sleep 10
  r1=$(for u in "${UNITS[@]}"; do prop "$u" NRestarts; done | tr '\n' ' ')
  [ "$r0" = "$r1" ] || { why "NRestarts changed over 10 s ($r0-> $r1): a restart loop"; return 1; }
  for u in "${UNITS[@]}"; do
    [ "$(prop "$u" ActiveState)" = inactive ] && [ "$(prop "$u" Result)" = success ] &&
      [ "$(prop "$u" ExecMainStatus)" = 3 ] ||
      { why "$(props "$u"), expected inactive/success ExecMainStatus=3"; return 1; }
  done
  echo "  10 s later: $(props "${UNITS[@]}" | tr '\n' ' ')"
  prop "$PS" StatusText | grep -q '^stopped before finishing' ||
    { why "the stopped ps's last STATUS line is '$(prop "$PS" StatusText)'"; return 1; }
  echo "  the ps's last STATUS line: '$(prop "$PS" StatusText)'"
  C journalctl -o cat --no-pager -n 3 -u "$PS" | sed 's/^/  | /'
  [ "$(checkpoints)" -gt 0 ] || { why "no checkpoint left after the stop"; return 1; }
  echo "  checkpoints after the stop: $(C ls /var/lib/pstrain/checkpoints | tr '\n' ' ')"
  C cat /var/lib/pstrain/summary.json >"$OUT/summary-stopped.json" 2>/dev/null ||
    { why "the stopped ps wrote no summary"; return 1; }
  [ "$(json_field "$OUT/summary-stopped.json" stopped)" = True ] ||
    { why "the stopped ps's summary does not say stopped"; return 1; }
  echo "  the stopped ps's summary: stopped $(json_field "$OUT/summary-stopped.json" stopped), stop_reason '$(json_field "$OUT/summary-stopped.json" stop_reason)'"
  # Start again: the ps resumes from the checkpoint written on SIGTERM and the job finishes.
  C sh -c 'rm -f /var/lib/pstrain/summary.json'
  start_job || return 1
  inv2=$(prop "$PS" InvocationID)
  wait_for 10 eval 'journal_of "$PS" "$inv2" >"$OUT/ps-after-stop.log"; grep -q "resumed from" "$OUT/ps-after-stop.log"' || true
  resumed=$(grep 'resumed from' "$OUT/ps-after-stop.log" | head -n 1)
  echo "  started again: ${resumed:-(no line about resuming in its journal)}"
  finish_job 120 || return 1
  echo "figure: stopped at version $v_stop and resumed: test accuracy $ACC (bound $ACC_BOUND), second part ${JOB_WALL} s, weights checksum $SUM (clean $CLEAN_SUM)"
  echo "  $(props "${UNITS[@]}" | tr '\n' ' ')"
  acc_bound_ok || return 1
  summary_says resumed True || return 1
  [ "$(json_field "$OUT/summary-$STEP.json" resumed_from_version)" -ge "$v_stop" ] ||
    { why "started again, the ps resumed from version $(json_field "$OUT/summary-$STEP.json" resumed_from_version), before the $v_stop it was stopped at"; return 1; }
  same_weights || return 1
}

# f: an elastic job (ps.conf workers = 1:2, the ps handing out the data): `systemctl stop`
# of a worker mid-run is a departure, not a failure. The worker finishes its step, says
# goodbye and exits 0; systemd leaves it inactive with Result=success and never restarts it
# (Restart=on-failure), and the ps and the other worker finish the job, which counts one
# departure and no loss.
step_elastic_stop() {
  reset_job
  C sed -i 's/^workers = 2$/workers = 1:2/' /etc/pstrain/ps.conf
  local rc=0
  elastic_stop_body || rc=1
  C sed -i 's/^workers = 1:2$/workers = 2/' /etc/pstrain/ps.conf
  return $rc
}
elastic_stop_body() {
  start_job || return 1
  wait_for 60 version_at_least 50 || { why "the elastic job did not reach version 50"; return 1; }
  local v_stop r0 t0
  v_stop=$(ps_version)
  t0=$(now)
  r0=$(prop "$W1" NRestarts)
  C systemctl stop "$W1" || { why "systemctl stop $W1 failed"; return 1; }
  echo "  systemctl stop $W1 at version $v_stop returned after $(since "$t0") s: $(props "$W1")"
  [ "$(prop "$W1" ActiveState)" = inactive ] && [ "$(prop "$W1" Result)" = success ] &&
    [ "$(prop "$W1" ExecMainStatus)" = 0 ] ||
    { why "$(props "$W1"), expected inactive/success ExecMainStatus=0 for a worker that left"; return 1; }
  # Past RestartSec (5 s): still inactive, not restarted.
  sleep 7
  [ "$(prop "$W1" ActiveState)" = inactive ] && [ "$(prop "$W1" NRestarts)" = "$r0" ] ||
    { why "the worker that left was started again: $(props "$W1"), NRestarts $(prop "$W1" NRestarts) (was $r0)"; return 1; }
  [ "$(prop "$PS" ActiveState)" = active ] || { why "the ps is not active after the departure: $(props "$PS")"; return 1; }
  finish_job 300 || return 1
  echo "figure: elastic job, $W1 stopped at version $v_stop: test accuracy $ACC, ${JOB_WALL} s in all"
  summary_says workers_departed 1 || return 1
  summary_says workers_lost 0 || return 1
}

# ---------------------------------------------------------------------------------------

build_root
boot_container
HAVE_RECOVERY=0
C /usr/local/bin/pstrain-ps --help 2>&1 | grep -q -- '--checkpoint-dir' &&
  C /usr/local/bin/pstrain-worker --help 2>&1 | grep -q -- '--reconnect-timeout' && HAVE_RECOVERY=1
[ "$HAVE_RECOVERY" = 1 ] ||
  echo "note: this build's daemons have no --checkpoint-dir/--reconnect-timeout: steps b, c and d cannot pass"

step units "the shipped units and configs as systemd loads them" step_units
step security "systemd-analyze security at most $MAX_EXPOSURE for every unit; IPAddressDeny= enforced" step_security
write_configs
# Enabled, as deploy/README.md says to run them: systemd then keeps the units loaded once
# they are inactive, with their ExecMainStatus (a unit that was only started may be
# unloaded, and then shows ExecMainStatus=0, ExecMainPID=0).
C systemctl enable "${UNITS[@]}" >"$OUT/enable.log" 2>&1 ||
  setup_fail "systemctl enable ${UNITS[*]} failed: $(tail -n 1 "$OUT/enable.log")"
C systemctl daemon-reload
start_bad_worker
step a+e "a clean job: units active, STATUS lines progress, all inactive with Result=success" step_clean
if [ "$HAVE_RECOVERY" = 1 ] && [ -n "${CLEAN_ACC:-}" ]; then
  step b "systemctl kill -s KILL $W1 mid-run: restarted, rejoins, the job finishes" step_kill_worker
  step c "systemctl kill -s KILL $PS mid-run: restarted, resumes, workers reconnect, the job finishes" step_kill_ps
  step d+e "systemctl stop $PS mid-run: exit 3 everywhere, nothing restarts; started again it resumes and finishes" step_stop_resume
  step f "an elastic job (workers 1:2): systemctl stop $W1 is a departure: exit 0, not restarted, the job finishes" step_elastic_stop
else
  for s in b c d+e f; do
    failed=$((failed + 1))
    if [ "$HAVE_RECOVERY" = 1 ]; then echo "FAIL: $s: not run: no clean reference accuracy (step a+e failed)"
    else echo "FAIL: $s: not run: the daemons lack issue 11's checkpoint/reconnect options"; fi
  done
fi
step start-limit "a worker failing at once is restarted until the start limit leaves it failed" step_start_limit

echo "figure: whole test $(since "$T_START") s"
echo "$passed passed, $failed failed"
REPORTED=1
[ "$failed" = 0 ]
