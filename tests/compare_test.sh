#!/usr/bin/env bash
# `pstrain compare` on a tiny run writes three valid PNG plots, a table with one row per
# mode, and compare.json with each mode's run: finished, its figures those of the run's own
# summary.json, and no link round trips (no --link). Without gnuplot on PATH (a GPU host
# running the bundle) it still writes its table and compare.json and exits 0, without plots.
source "$(dirname "$0")/lib.sh"
export PSTRAIN_PS_BIN="$PS_BIN" PSTRAIN_WORKER_BIN="$WORKER_BIN"
PATH=/nonexistent "$LAUNCHER_BIN" compare --modes sync --workers 2 --epochs 1 --batch-size 512 \
  --out "$OUT/nogp" >"$OUT/nogp.log" 2>&1 || fail "compare without gnuplot failed: $(tail -3 "$OUT/nogp.log")"
[ -z "$(ls "$OUT/nogp"/*.png 2>/dev/null)" ] || fail "plots without gnuplot?"
grep -qE '^\| sync ' "$OUT/nogp/summary.md" || fail "no table row without gnuplot"
/usr/bin/python3 -c 'import json,sys; (s,)=json.load(open(sys.argv[1]))["settings"]; assert s["runs"][0]["finished"]' \
  "$OUT/nogp/compare.json" || fail "compare.json without gnuplot"
pass "compare without gnuplot: its table and compare.json, no plots, exit 0"
command -v gnuplot >/dev/null || { echo "SKIP: gnuplot is not installed (./pstrain installs gnuplot-nox)"; echo "1 passed, 0 failed, 1 skipped"; exit 0; }
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
/usr/bin/python3 - "$OUT/cmp/compare.json" <<'EOF' || fail "compare.json"
import json, math, os, sys
doc = json.load(open(sys.argv[1]))
modes = [s["mode"] for s in doc["settings"]]
assert modes == ["sync", "async", "ssp"], modes
assert doc["targets"] == [0.85, 0.88, 0.9], doc["targets"]
for s in doc["settings"]:
    (r,) = s["runs"]
    summary = json.load(open(os.path.join(r["dir"], "summary.json")))
    assert r["finished"] and r["exit_status"] == 0, r
    assert math.isclose(r["test_accuracy"], summary["test_accuracy"]), (r, summary)
    assert math.isclose(r["samples_per_sec"], summary["samples_per_sec"]), (r, summary)
    assert r["updates"] == summary["updates"] and r["wire_bytes_per_update"] > 0, r
    assert len(r["time_to_target_s"]) == len(r["samples_to_target"]) == 3, r
    assert r["round_trip_ms_min"] is None and r["delay_by"] == "", r
EOF
pass "compare: 3 plots, 3 rows, compare.json"
echo "2 passed, 0 failed"
