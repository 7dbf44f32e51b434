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
echo "1 passed, 0 failed"
