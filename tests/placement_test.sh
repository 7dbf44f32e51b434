#!/usr/bin/env bash
# Issue 39: where the ps sits, and all-reduce, behind emulated links.
#  1. bad placements: one line and exit 2 (colocated without --link, colocated with
#     --ps-shards other than --workers, a placement with --mode allreduce, an unknown name);
#  2. 2 workers, --ps-shards 2 --ps-placement colocated --link 200mbit (mlp, 1 epoch, batch
#     256): it trains (accuracy above 0.7), links.json says colocated, and the busiest link
#     carried 2(n-1)/n M a step (the bytes model's M for n = 2) within 0.98 to 1.10 of it
#     (TCP/IP headers ride on top, Ethernet's not counted by the veths);
#  3. --mode allreduce --link 200mbit, the same job: it trains, every rank's checksum is the
#     same, and the busiest link's bytes per step are the model's within the same bounds.
# No namespace of either run is left. Needs root, iproute2 and network namespaces; without
# them it says why in one line and skips.
source "$(dirname "$0")/lib.sh"

skip() {
  echo "SKIP: $*"
  echo "0 passed, 0 failed (skipped)"
  exit 0
}
[ "$(id -u)" = 0 ] || skip "--link needs root (running as uid $(id -u))"
command -v ip >/dev/null && command -v tc >/dev/null || skip "no ip or tc (iproute2)"
if ! err=$(ip netns add "pstplaceprobe-$$" 2>&1); then
  skip "cannot create a network namespace (ip netns add: $err)"
fi
ip netns del "pstplaceprobe-$$"

left() { ip netns list 2>/dev/null | awk '{print $1}' | grep -c "^pstlink-$1-" || true; }

# ---- 1. bad placements ----
bad() { # WHAT ARGS...: exit 2 and one line
  local what=$1 rc=0
  shift
  "$LAUNCHER_BIN" local --run-dir "$OUT/bad" "$@" >"$OUT/bad.log" 2>&1 || rc=$?
  [ "$rc" -eq 2 ] || fail "$what: exit $rc, not 2: $(cat "$OUT/bad.log")"
  [ "$(wc -l <"$OUT/bad.log")" -eq 1 ] || fail "$what: not one line: $(cat "$OUT/bad.log")"
  grep -q "$what" "$OUT/bad.log" || fail "$what: the line does not say so: $(cat "$OUT/bad.log")"
}
bad "needs --link" --workers 2 --ps-shards 2 --ps-placement colocated
bad "must equal the workers" --workers 2 --ps-shards 3 --ps-placement colocated --link 200mbit
bad "mode allreduce" --workers 2 --mode allreduce --ps-placement colocated --link 200mbit
bad "is not one-host, colocated or separate" --ps-placement nowhere
pass "bad placements: one line, exit 2"

# ---- 2 and 3: a job each ----
job() { # NAME ARGS...
  local name=$1
  shift
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$LAUNCHER_BIN" local --workers 2 --model mlp \
    --epochs 1 --batch-size 256 --seed 5 --link 200mbit --run-dir "$OUT/$name" \
    --summary-json "$OUT/$name.json" "$@" >"$OUT/$name.out" 2>&1 &
  local pid=$!
  wait "$pid" || fail "$name: pstrain local failed: $(tail -3 "$OUT/$name.out")"
  [ "$(left "$pid")" = 0 ] || fail "$name: namespaces left behind"
}
check() { # NAME PLACEMENT
  /usr/bin/python3 - "$OUT/$1.json" "$OUT/$1/links.json" "$2" <<'PY' || fail "$1: figures"
import json, sys
s, links, placement = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
n, M = 2, 235146 * 4
model = 2 * (n - 1) / n * M
b = links["busiest_link"]
print(f"{placement}: accuracy {s['test_accuracy']:.4f}, busiest link {b['node']}: "
      f"{b['bytes_per_step']:.0f} bytes a step (model {b['model_bytes_per_step']:.0f}, "
      f"{b['model_formula']}), {b['step_seconds'] * 1e3:.1f} ms a step (model "
      f"{b['model_comm_seconds'] * 1e3:.1f} of communication)")
assert s["test_accuracy"] > 0.7, s["test_accuracy"]
assert links["placement"] == placement, links["placement"]
assert abs(b["model_bytes_per_step"] - model) < 1, b
assert 0.98 <= b["bytes_per_step"] / model <= 1.10, (b["bytes_per_step"], model)
if placement == "ring":
    ranks = s["rank_checksums"]
    assert len(ranks) == n and len(set(ranks)) == 1 and ranks[0] == s["weights_checksum"], ranks
PY
}
job colocated --ps-shards 2 --ps-placement colocated
check colocated colocated
pass "colocated shards over 200 Mbit/s links: trains, the busiest link's bytes are the model's"

job allreduce --mode allreduce
check allreduce ring
pass "all-reduce over 200 Mbit/s links: trains, one checksum, the busiest link's bytes are the model's"

echo "4 passed, 0 failed"
