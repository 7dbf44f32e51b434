#!/usr/bin/env bash
# `pstrain bench` runs a small sweep end to end and writes every cell to --json.
source "$(dirname "$0")/lib.sh"
"$LAUNCHER_BIN" bench --sizes 4K,64K --clients 1,2 --rounds 30 --run-dir "$OUT/bench" \
  --json "$OUT/bench.json" >"$OUT/bench.log" 2>&1 || { cat "$OUT/bench.log"; fail "pstrain bench failed"; }
/usr/bin/python3 - "$OUT/bench.json" <<'PY' || fail "bad bench JSON"
import json, sys
d = json.load(open(sys.argv[1]))
cells = d["cells"]
assert len(cells) == 4, cells
for c in cells:
    assert c["ok"] and c["within_bound"], c
    for side in ("pstrain", "raw_tcp"):
        assert c[side]["combined_gbps"] > 0 and c[side]["p50_us"] > 0, c
    assert c["ratio"] > 0
PY
pass "pstrain bench: 4 cells, table and JSON"
echo "1 passed, 0 failed"
