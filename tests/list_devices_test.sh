#!/usr/bin/env bash
# pstrain-worker --list-devices (issue 43, item E): the CPU is listed first, without a GPU,
# with its cores (the ones this process may run on, as nproc counts them) and the OpenBLAS
# kernel set; a taskset of one core lists one. Exit 0. No training: quick.
source "$(dirname "$0")/lib.sh"

# cores_of FILE: the "cores N" of the first line, which must be the CPU's.
cores_of() {
  /usr/bin/python3 - "$1" <<'PY'
import re, sys
first = open(sys.argv[1]).readline()
m = re.match(r"cpu: model (.+); cores (\d+); OpenBLAS kernels (\S+) ", first)
if not m or not m.group(3):
    sys.exit("first line is not the CPU's: %r" % first)
print(int(m.group(2)))
PY
}

rc=0
"$WORKER_BIN" --list-devices >"$OUT/list.out" 2>"$OUT/list.err" || rc=$?
[ "$rc" -eq 0 ] || fail "--list-devices: exit $rc"
n=$(cores_of "$OUT/list.out") || fail "--list-devices: $(head -n 1 "$OUT/list.out")"
[ "$n" -eq "$(nproc)" ] || fail "--list-devices: $n cores, nproc says $(nproc)"
pass "--list-devices: the CPU first, $n cores as nproc says"

if command -v taskset >/dev/null; then
  taskset -c 0 "$WORKER_BIN" --list-devices >"$OUT/one.out" 2>"$OUT/one.err" || fail "under taskset: exit $?"
  n=$(cores_of "$OUT/one.out") || fail "under taskset: $(head -n 1 "$OUT/one.out")"
  [ "$n" -eq 1 ] || fail "under taskset -c 0: $n cores, not 1"
  pass "under taskset -c 0: 1 core"
fi
echo "passed"
