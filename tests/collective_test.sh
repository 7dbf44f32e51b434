#!/usr/bin/env bash
# collective/ over real ranks (mpirun on loopback): broadcast, blocking and started sums,
# gather; 2 and 3 ranks, Open MPI's own choice and the ring forced (and read back as forced).
source "$(dirname "$0")/lib.sh"
CHECK="$RUNFILES/collective/collective_check"
MPIRUN=(mpirun --oversubscribe --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
for np in 2 3; do
  for alg in auto ring; do
    timeout 60 "${MPIRUN[@]}" -np "$np" "$CHECK" "$alg" >"$OUT/check-$np-$alg.log" 2>&1 ||
      fail "$np ranks, $alg: collective_check failed"
    [ "$(grep -c '; 0 wrong' "$OUT/check-$np-$alg.log")" = "$np" ] || fail "$np ranks, $alg: not every rank checked out"
    if [ "$alg" = ring ]; then
      [ "$(grep -c 'ring, forced' "$OUT/check-$np-$alg.log")" = "$np" ] || fail "$np ranks: the ring was not forced"
    fi
  done
done
pass "2 and 3 ranks, auto and ring: every sum, broadcast and gather right"

# NCCL (collective/nccl.c, loaded at run time). Two ranks on one GPU: refused on every rank
# alike before NCCL is touched. Each rank on its own GPU: with two GPUs or more, the same
# checks through NCCL; without (this machine, CI), every rank refuses with the same reason
# (no NCCL library, no CUDA driver, no device) and exits 3 within the timeout, none hanging.
same_reason() { # LOG: two "NCCL refused" lines with one reason
  [ "$(grep -c 'NCCL refused: ' "$1")" = 2 ] && [ "$(sed -n 's/.*NCCL refused: //p' "$1" | sort -u | wc -l)" = 1 ]
}
rc=0; timeout 60 "${MPIRUN[@]}" -np 2 "$CHECK" auto nccl-same >"$OUT/nccl-same.log" 2>&1 || rc=$?
[ "$rc" = 3 ] && same_reason "$OUT/nccl-same.log" && grep -q 'both on cuda:0' "$OUT/nccl-same.log" ||
  fail "two ranks on one GPU: not refused alike (status $rc)"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
rc=0; timeout 120 "${MPIRUN[@]}" -np 2 "$CHECK" auto nccl >"$OUT/nccl.log" 2>&1 || rc=$?
if [ "${gpus:-0}" -ge 2 ]; then
  [ "$rc" = 0 ] && [ "$(grep -c 'NCCL .*; 0 wrong' "$OUT/nccl.log")" = 2 ] || fail "NCCL on 2 GPUs: wrong sums (status $rc)"
  pass "NCCL on 2 GPUs: every sum right; two ranks on one GPU refused alike"
else
  [ "$rc" = 3 ] && same_reason "$OUT/nccl.log" || fail "NCCL without GPUs: not refused alike (status $rc)"
  pass "NCCL: two ranks on one GPU refused alike; without GPUs every rank refuses alike ($(sed -n '1s/.*NCCL refused: //p' "$OUT/nccl.log"))"
fi
echo "3 passed, 0 failed"
