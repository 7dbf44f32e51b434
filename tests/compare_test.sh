#!/usr/bin/env bash
# `pstrain compare` on a tiny run writes three valid PNG plots and a table with one row per
# mode.
source "$(dirname "$0")/lib.sh"
export PSTRAIN_PS_BIN="$PS_BIN" PSTRAIN_WORKER_BIN="$WORKER_BIN"
command -v gnuplot >/dev/null || { echo "SKIP: gnuplot is not installed (./pstrain installs gnuplot-nox)"; echo "0 passed, 0 failed, 1 skipped"; exit 0; }
"$LAUNCHER_BIN" compare --modes sync,async,ssp:1 --workers 2 --epochs 1 --batch-size 512 \
  --out "$OUT/cmp" >"$OUT/compare.log" 2>&1 || fail "compare failed"
for p in loss_vs_time accuracy_vs_time loss_vs_updates; do
  f="$OUT/cmp/$p.png"
  [ -f "$f" ] || fail "$p.png missing"
  [ "$(head -c 8 "$f" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "$p.png is not a PNG"
  [ "$(stat -c %s "$f")" -gt 5000 ] || fail "$p.png is too small to hold a plot"
done
rows=$(grep -cE '^\| (sync|async|ssp:1) ' "$OUT/cmp/summary.md")
[ "$rows" -eq 3 ] || fail "expected 3 table rows, got $rows"
grep -q "^| ssp:1 .* (bound 1) " "$OUT/cmp/summary.md" || fail "no ssp lead in the table"
pass "compare: 3 plots, 3 rows"
echo "1 passed, 0 failed"
