#!/usr/bin/env bash
# Issue 26, points 1 and 2: the null device and the round trip.
#  - a sync job of null workers (--device null: no compute, a fixed gradient) ends on the
#    same weights layer by layer (the null device's default) and without, and over 2 ps
#    shards: the gradient is of the model's exact size, layer by layer as a backward pass
#    makes it;
#  - the summary gives each worker step's round trip: every step after a worker's first
#    measured, and each part's p50 between 0 and the exposed wait's p99;
#  - layers in pieces through a ps killed with -9 and resumed (below);
#  - null:RATE paces the steps: a job at 20,000 samples/s runs no faster than that;
#  - a bad device is one line and exit 2 before anything starts.
source "$(dirname "$0")/lib.sh"

null_job() { # null_job NAME ARGS...: cnn2 (a model of several layers) on null workers
  local_checksum "$@" --device null --model cnn2
}

plain=$(null_job plain --push-by-layer false --pull-by-layer false)
layered=$(null_job layered)
sharded=$(null_job sharded --ps-shards 2)
asleep=$(null_job asleep --keep-awake false) # on by default for null workers
[ "$plain" = "$layered" ] && [ "$plain" = "$sharded" ] && [ "$plain" = "$asleep" ] ||
  fail "null workers: checksum $plain plain, $layered layer by layer, $sharded over 2 shards, $asleep with the CPUs let sleep"
pass "null workers: checksum $plain plain, layer by layer, over 2 shards and with the CPUs let sleep"

# mlp's first layer in pieces (16 KiB chunks): each next step's PULL goes out during the
# backward pass (worker/step.c, wk_pull_ahead) and its reply lands while the step computes.
# The same weights as without it (--pull-by-layer false sends every PULL after the push).
ahead=$(local_checksum ahead --device null --model mlp)
after=$(local_checksum after --device null --model mlp --pull-by-layer false)
[ "$ahead" = "$after" ] || fail "null mlp workers: checksum $ahead with pulls ahead, $after without"
pass "null mlp workers: checksum $ahead with pulls sent during the step before and without"

/usr/bin/python3 - "$OUT/plain.json" "$OUT/layered.json" <<'PY' || fail "round trip figures"
import json, sys
for path in sys.argv[1:]:
    s = json.load(open(path))
    steps = s["updates"]            # sync: one version per step of both workers
    measured = s["round_trip_steps"]
    # Every step but each worker's first (no step before it) and its last (no push after it).
    assert measured >= 2 * (steps - 2), (path, measured, steps)
    rt = s["round_trip_ms"]
    whole = rt["exposed"]
    assert 0 < whole["p50"] <= whole["p99"], (path, rt)
    for part in ("wire", "queued", "sum", "optimizer", "sending"):
        assert 0 <= rt[part]["p50"] <= rt[part]["p99"], (path, part, rt)
        assert rt[part]["p50"] <= whole["p99"] * 1.02, (path, part, rt)
    print(path, "exposed p50 %.3f ms p99 %.3f ms" % (whole["p50"], whole["p99"]))
PY
pass "the summary gives every step's round trip and its parts"

# null:20000 with batch 2048 is 0.1 s a step, 29 steps to the epoch; the first step counts
# the model's work and takes no time, so the bound is 29/28 of the pace, and 1% over.
# While it trains, its worker keeps the CPUs awake (--keep-awake, on by default for null
# devices; common/keep_awake.h): /dev/cpu_dma_latency held open, or threads at SCHED_IDLE
# (policy 5 in /proc's stat) where it may not write that file.
"$LAUNCHER_BIN" local --workers 1 --model mlp --epochs 1 --batch-size 2048 --device null:20000 \
  --run-dir "$OUT/paced" --summary-json "$OUT/paced.json" >"$OUT/paced.out" 2>&1 &
lp=$!
held=""
for _ in $(seq 1 300); do
  for p in $(pgrep -f "pstrain-worker.*$OUT/paced/" || true); do
    if ls -l "/proc/$p/fd" 2>/dev/null | grep -q cpu_dma_latency; then held="PM QoS"; fi
    for st in /proc/"$p"/task/*/stat; do
      [ "$(sed 's/.*) //' "$st" 2>/dev/null | cut -d' ' -f39)" = 5 ] && held="SCHED_IDLE threads"
    done
  done
  [ -n "$held" ] && break
  kill -0 $lp 2>/dev/null || break
  sleep 0.02
done
wait $lp || fail "null:20000: pstrain local failed"
[ -n "$held" ] || fail "--keep-awake: the null worker held neither /dev/cpu_dma_latency nor idle threads"
pass "a null worker keeps the CPUs awake while it trains: $held"
sps=$(json_field "$OUT/paced.json" samples_per_sec)
at_least 21000 "$sps" || fail "null:20000 trained $sps samples/s, faster than its pace"
pass "null:20000 paces the job: $sps samples/s"

set +e
"$WORKER_BIN" --device null:fast --ps 127.0.0.1:1 >"$OUT/bad.out" 2>&1
rc=$?
set -e
[ $rc -eq 2 ] && [ "$(grep -c . "$OUT/bad.out")" -eq 1 ] || fail "--device null:fast: status $rc"
pass "--device null:fast refused: status $rc"
# Layers in pieces (issue 41) through a ps killed mid-run: null workers paced at 20,000
# samples/s (3.2 ms a step, so the kill lands mid-job), 256 KiB chunks (mlp's first layer in
# 3 pieces and a small one, pushed as growing runs), the ps killed with -9 after step 300 and
# started again: it resumes from its checkpoint, the workers reconnect with pushes that may
# have stopped halfway through a run, and the job ends on the uninterrupted job's weights.
pieces_ps() { # pieces_ps NAME PORT [ps args...]
  local name=$1 port=$2; shift 2
  start_ps "$name" --listen "127.0.0.1:$port" --workers 2 --model mlp --epochs 1 \
    --batch-size 64 --seed 5 --chunk-kib 256 "$@"
}
pieces_workers() { # pieces_workers TAG PORT
  W=()
  for i in 0 1; do
    start_worker "w$i-$1" --ps "127.0.0.1:$2" --index "$i" --device null:20000
    W+=("$LAST_PID")
  done
}
port=$(free_port)
pieces_ps pclean "$port" --summary-json "$OUT/pclean.json"
pclean=$LAST_PID
pieces_workers clean "$port"
for p in "${W[@]}"; do wait_pid "$p" 120 || fail "pieces: a worker of the clean job failed"; done
wait_pid "$pclean" 30 || fail "pieces: the clean job's ps failed"
grep -q "large dense layers in pieces on" "$OUT/w0-clean.log" || fail "pieces: the null worker did not cut its layers"
port=$(free_port)
kargs=(--summary-json "$OUT/pkill.json" --metrics "$OUT/pk.jsonl" --checkpoint-dir "$OUT/pck"
       --checkpoint-every 100 --worker-timeout 5)
pieces_ps pk1 "$port" "${kargs[@]}"
pk1=$LAST_PID
pieces_workers k "$port"
wait_step "$OUT/pk.jsonl" 300 60
kill -9 "$pk1"
wait "$pk1" 2>/dev/null || true
pieces_ps pk2 "$port" "${kargs[@]}"
pk2=$LAST_PID
wait_for "$OUT/pk2.log" "resumed from .*ckpt-0*[1-9][0-9]*.safetensors: version [1-9]" 20
for p in "${W[@]}"; do wait_pid "$p" 120 || fail "pieces: a worker failed after the ps was killed"; done
wait_pid "$pk2" 30 || fail "pieces: the resumed ps failed"
c0=$(json_field "$OUT/pclean.json" weights_checksum)
c1=$(json_field "$OUT/pkill.json" weights_checksum)
[ "$c0" = "$c1" ] || fail "pieces: checksum $c1 after the ps's kill -9, $c0 uninterrupted"
pass "null workers with layers in pieces: the ps killed mid-run and resumed, checksum $c1 = uninterrupted"
echo "5 passed, 0 failed"
