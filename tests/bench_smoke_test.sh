#!/usr/bin/env bash
# `pstrain bench` and `pstrain bench-train` run small sweeps end to end, with tables and JSON.
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

# Two ps shards: each client is two benchclients, one per shard.
"$LAUNCHER_BIN" bench --sizes 64K --clients 2 --rounds 20 --repeat 1 --shards 2 \
  --run-dir "$OUT/bench-shards" --json "$OUT/bench-shards.json" >"$OUT/bench-shards.log" 2>&1 ||
  { cat "$OUT/bench-shards.log"; fail "pstrain bench --shards 2 failed"; }
/usr/bin/python3 - "$OUT/bench-shards.json" <<'PY' || fail "bad bench --shards JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["ps_shards"] == 2, d
(c,) = d["cells"]
assert c["ok"] and c["within_bound"] and c["pstrain"]["combined_gbps"] > 0, c
PY
[ "$(ls "$OUT/bench-shards"/ps-*.log | wc -l)" = 2 ] || fail "bench --shards 2 did not start 2 ps"
pass "pstrain bench --shards 2: 2 ps, 4 client processes"

# `pstrain bench-train` (pstrain alone, --peer none: the PyTorch peer is ddp_peer_test's): a
# short sweep over worker counts (1 epoch each, a few seconds),
# each row with the job's rate, the workers' compute-only rate and the ps's CPU per gradient.
"$LAUNCHER_BIN" bench-train --peer none --worker-counts 1,2 --out "$OUT/bench-train" \
  --json "$OUT/bench-train.json" >"$OUT/bench-train.log" 2>&1 ||
  { cat "$OUT/bench-train.log"; fail "pstrain bench-train failed"; }
/usr/bin/python3 - "$OUT/bench-train.json" <<'PY' || fail "bad bench-train JSON"
import json, sys
d = json.load(open(sys.argv[1]))
runs = d["runs"]
assert [r["workers"] for r in runs] == [1, 2], runs
for r in runs:
    assert r["ok"] and r["samples_per_sec"] > 0, r
    assert r["compute_samples_per_sec_per_worker"] > 0, r
    assert 0 < r["ps_cpu_ms_per_gradient"] < 100, r
    assert r["test_accuracy"] > 0.5, r
    # Bytes between the workers and the ps (issue 27; on the ps's port and, the workers being
    # on its host, through shared memory, issue 41): at least one float32 push and pull each.
    assert r["wire_bytes_per_step"] >= 8 * 235146 * r["workers"], r
    assert r["wire_bytes_per_sample"] > 0, r
PY
grep -q "| 2 | " "$OUT/bench-train/summary.md" || fail "no row for 2 workers in summary.md"
pass "pstrain bench-train: 1 and 2 workers, table and JSON"

# The ceiling (issue 26): null workers, two models, each row with its round trip.
"$LAUNCHER_BIN" bench-train --peer none --device null --models mlp,cnn --worker-counts 1 \
  --out "$OUT/bench-null" --json "$OUT/bench-null.json" >"$OUT/bench-null.log" 2>&1 ||
  { cat "$OUT/bench-null.log"; fail "pstrain bench-train --device null failed"; }
/usr/bin/python3 - "$OUT/bench-null.json" <<'PY' || fail "bad bench-train --device null JSON"
import json, sys
d = json.load(open(sys.argv[1]))
runs = d["runs"]
assert d["device"] == "null" and [r["model"] for r in runs] == ["mlp", "cnn"], d
for r in runs:
    assert r["ok"] and r["steps_per_sec_per_worker"] > 0, r
    assert 0 < r["round_trip_p50_ms"] <= r["round_trip_p99_ms"], r
PY
pass "pstrain bench-train --device null: the ceiling and the round trip of two models"

# Issue 41, point 3: with --device null:RATE each row gives the job's share of the emulated
# rate; without --worker-counts the counts stop at the cores there are (one core here, by
# taskset: a row of 1 worker only).
taskset -c 0 "$LAUNCHER_BIN" bench-train --peer none --device null:20000 --model mlp \
  --out "$OUT/bench-rate" --json "$OUT/bench-rate.json" >"$OUT/bench-rate.log" 2>&1 ||
  { cat "$OUT/bench-rate.log"; fail "pstrain bench-train --device null:RATE failed"; }
/usr/bin/python3 - "$OUT/bench-rate.json" <<'PY' || fail "bad bench-train --device null:RATE JSON"
import json, sys
d = json.load(open(sys.argv[1]))
runs = d["runs"]
assert d["emulated_samples_per_sec_per_worker"] == 20000, d
assert [r["workers"] for r in runs] == [1], runs  # one core: the counts stop at 1
r = runs[0]
share = r["samples_per_sec"] / 20000
assert 0 < r["emulated_rate_share"] <= 1.05 and abs(r["emulated_rate_share"] - share) < 1e-9, r
PY
grep -q "of workers x emulated rate" "$OUT/bench-rate/summary.md" ||
  fail "no column of the emulated rate's share in summary.md"
pass "pstrain bench-train --device null:RATE: the emulated rate's share; the counts up to the cores"
echo "5 passed, 0 failed"
