#!/usr/bin/env bash
# Issue 25, point 2: the kernel-choice path, on any CPU. OpenBLAS picks old kernels for a CPU
# whose model it does not know (a cloud VM's "Intel(R) Xeon(R) Processor" got Prescott's);
# the worker then sets OPENBLAS_CORETYPE from CPUID's feature flags and runs itself again,
# and its log starts with two lines at info level saying so. A development machine whose
# CPU OpenBLAS knows never takes that path, so here PSTRAIN_TEST_OPENBLAS_CORENAME=Prescott
# makes pstrain take OpenBLAS's choice for Prescott's (kernels/blas_setup.h), with neither
# OPENBLAS_CORETYPE nor OPENBLAS_L2_SIZE set, as in most users' shells:
#  - a mistyped flag is one line and exit 2, with no kernel lines before it;
#  - a worker refused by the ps (another model's fingerprint) says why in one line at error
#    level, after the two kernel lines;
#  - a sync job trains on the kernels pstrain chose: both workers' logs say OpenBLAS uses
#    them, and the weights are bit for bit those of the same job with OPENBLAS_CORETYPE set
#    by hand to that choice.
# The expected choice comes from /proc/cpuinfo's flags. A CPU with neither AVX2 and FMA nor
# AVX-512 has nothing better than Prescott's kernels: then nothing may run again, and the
# test says that the re-run was not exercised.
source "$(dirname "$0")/lib.sh"
export PSTRAIN_TEST_OPENBLAS_CORENAME=Prescott
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE

flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { [[ "$flags" == *" $1 "* ]]; }
want=
if has avx2 && has fma; then
  want=Haswell
  has avx512f && has avx512bw && has avx512dq && has avx512vl && want=SkylakeX
fi

# errors LOG: the lines at error level (journald's <3>; the log is not a terminal).
errors() { grep -c '^<[0-3]>' "$1" || true; }

# 1. A mistyped flag.
rc=0
"$WORKER_BIN" --ps 127.0.0.1:1 --threads many >"$OUT/usage.log" 2>&1 || rc=$?
[ "$rc" = 2 ] && [ "$(wc -l <"$OUT/usage.log")" = 1 ] && [ "$(errors "$OUT/usage.log")" = 1 ] ||
  fail "a bad --threads: exit $rc, $(cat "$OUT/usage.log")"
pass "a mistyped flag: exit 2, one line: $(cat "$OUT/usage.log")"

# kernel_lines LOG: the worker ran itself again with OPENBLAS_CORETYPE=$want, and OpenBLAS
# then used those kernels (the second line reads OpenBLAS's own name for them).
kernel_lines() {
  if [ -n "$want" ]; then
    grep -q "^<6>.*running again with OPENBLAS_CORETYPE=$want\$" "$1" &&
      grep -q "^<6>.*OpenBLAS uses $want kernels, set by pstrain (OPENBLAS_CORETYPE=$want)" "$1"
  else
    ! grep -q "running again with OPENBLAS_CORETYPE" "$1"
  fi
}

# 2. A refused worker, then a good one on the same ps.
port=$(free_port)
start_ps ps --listen "127.0.0.1:$port" --workers 1 --epochs 1 --batch-size 512 --model mlp \
  --summary-json "$OUT/refusal.json"
ps_pid=$LAST_PID
start_worker bad --ps "127.0.0.1:$port" --model cnn
rc=0
wait_pid "$LAST_PID" 30 || rc=$?
[ "$rc" != 0 ] || fail "the worker with another model exited 0"
kernel_lines "$OUT/bad.log" || fail "the refused worker's log lacks the kernel lines for $want"
[ "$(errors "$OUT/bad.log")" = 1 ] && grep -q '^<3>.*fingerprint mismatch' "$OUT/bad.log" ||
  fail "the refusal is not one line at error level: $(cat "$OUT/bad.log")"
start_worker good --ps "127.0.0.1:$port" --model mlp
wait_pid "$LAST_PID" 60 || fail "the matching worker failed"
wait_pid "$ps_pid" 30 || fail "the ps exited non-zero"
pass "refused, beside $(grep -c '^<6>' "$OUT/bad.log") lines at info level: $(grep '^<3>' "$OUT/bad.log" | cut -c1-140)"

# 3. A sync job on the kernels pstrain chose, and the same job on them by hand.
args=(--model mlp --epochs 1 --batch-size 256 --seed 7)
train sync 2 "$OUT/chosen.json" "${args[@]}"
for i in 0 1; do
  cp "$OUT/worker$i-sync.log" "$OUT/chosen-worker$i.log"
  kernel_lines "$OUT/chosen-worker$i.log" || fail "worker $i: no kernel lines for '$want'"
done
chosen=$(json_field "$OUT/chosen.json" weights_checksum)
if [ -z "$want" ]; then
  pass "this CPU has neither AVX2 and FMA nor AVX-512: nothing ran again (the re-run is not exercised here); checksum $chosen"
  echo "3 passed, 0 failed"
  exit 0
fi
export OPENBLAS_CORETYPE=$want
unset PSTRAIN_TEST_OPENBLAS_CORENAME
train sync 2 "$OUT/byhand.json" "${args[@]}"
unset OPENBLAS_CORETYPE
byhand=$(json_field "$OUT/byhand.json" weights_checksum)
[ "$chosen" = "$byhand" ] ||
  fail "weights $chosen on the kernels pstrain chose, $byhand with OPENBLAS_CORETYPE=$want by hand"
pass "sync job on the kernels pstrain chose ($want): checksum $chosen, as with OPENBLAS_CORETYPE=$want by hand"
echo "3 passed, 0 failed"
