#!/usr/bin/env bash
# Issue 13, point 1: the weights split over K ps shards (kernels/partition.h).
#  - sync over 1, 2 and 3 shards (3 with 2 threads each) ends with the same whole-vector
#    checksum: sharding changes no bit. Every shard's summary gives it as weights_checksum
#    (the unsharded ps computes it; a shard, which holds one part, takes it from the workers'
#    evaluations of the last epoch: issue 25), beside its own part ("shard": "I/K") and that
#    part's checksum;
#  - async and ssp over 2 shards train to a sane accuracy;
#  - a worker given the shards in the wrong order is refused by the ps, and says why;
#  - a worker killed with kill -9 over 2 shards: both shards lose it, a replacement takes
#    its slot on both, and the job ends normally;
#  - a shard killed with kill -9 and started again resumes from its own checkpoint
#    directory: in async mode the workers reconnect to every shard and the job ends
#    normally; in sync mode the shards are then steps apart, and the workers have the shard
#    ahead go back to its own checkpoint of the restarted one's version (it starts itself
#    again from it), and the job ends normally at one version;
#  - backup workers over 2 shards;
#  - `pstrain export` joins the shards' last checkpoints into the same model file as the
#    unsharded run's.
source "$(dirname "$0")/lib.sh"
SHARD_WORKER_ARGS=()

# sharded NAME K WORKERS [ps args...]: one job over K shards; the workers' --ps lists them,
# and they take SHARD_WORKER_ARGS too. Sets SHARD_PIDS and WORKER_PIDS; waits for nothing.
sharded() {
  local name=$1 k=$2 workers=$3 list="" i port
  shift 3
  SHARD_PIDS=()
  WORKER_PIDS=()
  for ((i = 0; i < k; i++)); do
    port=$(free_port)
    start_ps "$name-ps$i" --listen "127.0.0.1:$port" --shard "$i/$k" --workers "$workers" \
      --summary-json "$OUT/$name-s$i.json" --metrics "$OUT/$name-m$i.jsonl" "$@"
    SHARD_PIDS+=("$LAST_PID")
    list+="${list:+,}127.0.0.1:$port"
  done
  for ((i = 0; i < k; i++)); do wait_for "$OUT/$name-ps$i.log" "listening on" 20; done
  SHARD_LIST=$list
  for ((i = 0; i < workers; i++)); do
    start_worker "$name-w$i" --ps "$list" --index "$i" "${SHARD_WORKER_ARGS[@]}"
    WORKER_PIDS+=("$LAST_PID")
  done
}

finish() {
  local name=$1 p
  for p in "${WORKER_PIDS[@]}"; do wait_pid "$p" 120 || fail "$name: a worker exited non-zero"; done
  for p in "${SHARD_PIDS[@]}"; do wait_pid "$p" 30 || fail "$name: a ps shard exited non-zero"; done
}

# model_checksum NAME K: the whole model's checksum, which every one of the K shards'
# summaries must give alike (the workers' evaluations of the last epoch agreed on it).
model_checksum() {
  local sum i
  sum=$(json_field "$OUT/$1-s0.json" weights_checksum) || fail "$1: shard 0's summary gives no model checksum"
  for ((i = 1; i < $2; i++)); do
    [ "$(json_field "$OUT/$1-s$i.json" weights_checksum)" = "$sum" ] ||
      fail "$1: shard $i's summary gives another model checksum than shard 0's $sum"
  done
  echo "$sum"
}

common=(--model mlp --epochs 1 --batch-size 128 --seed 7)

# 1. Sync: the same bits over 1, 2 and 3 shards.
sums=()
for k in 1 2 3; do
  extra=()
  [ "$k" = 3 ] && extra=(--threads 2)
  sharded "sync$k" "$k" 2 --mode sync "${common[@]}" "${extra[@]}" \
    --checkpoint-dir "$OUT/ck$k" --checkpoint-seconds 0
  finish "sync$k"
  a=$(model_checksum "sync$k" "$k")
  for ((i = 0; i < k; i++)); do
    f="$OUT/sync$k-s$i.json"
    part=$(json_field "$f" shard_checksum)
    from=$(json_field "$f" weights_checksum_from)
    [ "$(json_field "$f" shard)" = "$i/$k" ] || fail "sync over $k shards: shard $i's summary names its part $(json_field "$f" shard)"
    if [ "$k" = 1 ]; then
      [ "$part" = "$a" ] && [ "$from" = ps ] || fail "one ps: its part $part (from $from) is not the whole $a"
    else
      [ "$part" != "$a" ] && [ "$from" = workers ] ||
        fail "sync over $k shards: shard $i gives its part's checksum $part as the model's ($a, from $from)"
    fi
  done
  sums+=("$a")
  grep -q "shard $((k - 1))/$k: parameters \[" "$OUT/sync$k-ps$((k - 1)).log" || [ "$k" = 1 ] ||
    fail "shard $((k - 1))/$k did not log its part of the weights"
done
whole=${sums[0]}
[ "$(grep -o 'final weights: version [0-9]*, checksum [0-9a-f]*' "$OUT/sync3-w0.log" | awk '{print $NF}')" = "$whole" ] ||
  fail "worker 0 over 3 shards logged other final weights than the summaries' $whole"
[ "${sums[1]}" = "$whole" ] && [ "${sums[2]}" = "$whole" ] ||
  fail "sync over 1/2/3 shards ended with different weights: ${sums[*]}"
acc=$(json_field "$OUT/sync2-s0.json" test_accuracy)
at_least "$acc" 0.80 || fail "sync over 2 shards: accuracy $acc"
pass "sync over 1, 2 and 3 shards (3 with 2 threads each): every shard's summary gives the model's checksum $whole beside its part's, accuracy $acc"

# The final checkpoints: the unsharded one exported, and the 3 shards' joined, are the same.
READER="$RUNFILES/tests/read_safetensors.py"
last=$(basename "$(ls "$OUT/ck1/"ckpt-*.safetensors | tail -1)")
"$LAUNCHER_BIN" export "$OUT/ck1/$last" --out "$OUT/one.safetensors" >/dev/null ||
  fail "export of the unsharded checkpoint failed"
"$LAUNCHER_BIN" export "$OUT/ck3/shard-2-of-3/$last" "$OUT/ck3/shard-0-of-3/$last" \
  "$OUT/ck3/shard-1-of-3/$last" --out "$OUT/three.safetensors" >"$OUT/export3.log" 2>&1 ||
  fail "export of 3 shards failed: $(cat "$OUT/export3.log")"
a=$(/usr/bin/python3 "$READER" "$OUT/one.safetensors" --checksum)
b=$(/usr/bin/python3 "$READER" "$OUT/three.safetensors" --checksum)
[ "$a" = "$whole" ] && [ "$b" = "$whole" ] || fail "exported weights $a (1 ps) and $b (3 shards), the run's $whole"
rc=0
"$LAUNCHER_BIN" export "$OUT/ck3/shard-1-of-3/$last" --out "$OUT/x.safetensors" >"$OUT/export1.log" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q "one ps shard's checkpoint" "$OUT/export1.log" ||
  fail "exporting one shard alone: exit $rc, $(cat "$OUT/export1.log")"
pass "pstrain export: 3 shards' checkpoints joined give the unsharded run's weights ($b)"

# 2. Async and ssp over 2 shards.
for mode in async ssp; do
  sharded "$mode" 2 2 --mode "$mode" --staleness 2 "${common[@]}"
  finish "$mode"
  acc=$(json_field "$OUT/$mode-s0.json" test_accuracy)
  at_least "$acc" 0.78 || fail "$mode over 2 shards: accuracy $acc"
  for i in 0 1; do
    n=$(json_field "$OUT/$mode-s$i.json" gradients_applied)
    [ "$n" -gt 0 ] || fail "$mode: shard $i applied no gradients"
  done
  pass "$mode over 2 shards: accuracy $acc"
done

# 3. The shards in the wrong order: shard 1 refuses a worker that takes it for shard 0.
p0=$(free_port)
p1=$(free_port)
start_ps order-ps0 --listen "127.0.0.1:$p0" --shard 0/2 --workers 1 "${common[@]}"
o0=$LAST_PID
start_ps order-ps1 --listen "127.0.0.1:$p1" --shard 1/2 --workers 1 "${common[@]}"
o1=$LAST_PID
wait_for "$OUT/order-ps0.log" "listening on" 20
wait_for "$OUT/order-ps1.log" "listening on" 20
start_worker order-w --ps "127.0.0.1:$p1,127.0.0.1:$p0" --index 0 --reconnect-timeout 0
rc=0
wait_pid "$LAST_PID" 30 || rc=$?
[ "$rc" = 1 ] || fail "a worker with the shards out of order exited $rc, not 1"
grep -q "this ps is shard 1/2, but the worker took it for shard 0/2" "$OUT/order-w.log" ||
  fail "the worker did not say why it was refused: $(tail -2 "$OUT/order-w.log")"
kill "$o0" "$o1" 2>/dev/null || true
pass "shards out of order: refused with '$(grep -o 'this ps is shard [^(]*' "$OUT/order-w.log" | head -1)'"

# 4. kill -9 of a worker over 2 shards; a replacement takes its slot on both. The workers'
# steps wait 2 x 2 ms each besides their compute (--delay-ms): worker 0 alone then needs at
# least 3 s for the rest of the job on any CPU, time for the replacement to load its data
# and come back.
SHARD_WORKER_ARGS=(--delay-ms 2)
sharded loss 2 2 --mode sync --model mlp --epochs 2 --batch-size 64 --seed 7 \
  --worker-timeout 2 --report-every 10
wait_step "$OUT/loss-m0.jsonl" 100 60
kill -9 "${WORKER_PIDS[1]}"
wait "${WORKER_PIDS[1]}" 2>/dev/null || true
for i in 0 1; do wait_for "$OUT/loss-ps$i.log" "worker 1 .* lost" 20; done
start_worker loss-w1b --ps "$SHARD_LIST" --index 1 "${SHARD_WORKER_ARGS[@]}"
WORKER_PIDS[1]=$LAST_PID
SHARD_WORKER_ARGS=()
for i in 0 1; do wait_for "$OUT/loss-ps$i.log" "worker 1 .* rejoined" 30; done
finish loss
for i in 0 1; do
  lost=$(json_field "$OUT/loss-s$i.json" workers_lost)
  [ "$lost" = 1 ] || fail "shard $i counted $lost lost workers, not 1"
done
# Both shards give one model checksum: the workers' final weights agreed.
model_checksum loss 2 >/dev/null
acc=$(json_field "$OUT/loss-s0.json" test_accuracy)
at_least "$acc" 0.82 || fail "accuracy $acc after a worker loss over 2 shards"
pass "kill -9 of worker 1 over 2 shards: lost and rejoined on both, accuracy $acc"

# 5. kill -9 of shard 1, started again from its own checkpoint directory.
#  async: the workers reconnect to both shards and the job ends normally.
#  sync: the restarted shard is steps behind the other, which in sync mode would leave the
#  parts apart for good: the workers ask the shard ahead to go back to that version.
ck=(--checkpoint-every 100 --checkpoint-seconds 0 --worker-timeout 3)
job=(--model mlp --epochs 2 --batch-size 64 --seed 7 --report-every 10)
for mode in async sync; do
  # sync: the steps wait for workers that are reconnecting (as they all are while a shard
  # goes back): under continue a shard may close a step without one of them while another
  # waits, and the parts then end a step apart, not with the uninterrupted run's weights.
  policy=()
  [ "$mode" = sync ] && policy=(--on-worker-loss wait)
  sharded "restart-$mode" 2 2 --mode "$mode" "${job[@]}" "${ck[@]}" "${policy[@]}" \
    --checkpoint-dir "$OUT/ck-$mode"
  wait_step "$OUT/restart-$mode-m0.jsonl" 150 60
  kill -9 "${SHARD_PIDS[1]}"
  wait "${SHARD_PIDS[1]}" 2>/dev/null || true
  ls "$OUT/ck-$mode/shard-1-of-2/"ckpt-*.safetensors >/dev/null || fail "$mode: shard 1 wrote no checkpoint of its own"
  port1=${SHARD_LIST##*:}
  start_ps "restart-$mode-ps1b" --listen "127.0.0.1:$port1" --shard 1/2 --workers 2 --mode "$mode" \
    "${job[@]}" "${ck[@]}" "${policy[@]}" --checkpoint-dir "$OUT/ck-$mode" \
    --summary-json "$OUT/restart-$mode-s1b.json"
  SHARD_PIDS[1]=$LAST_PID
  if [ "$mode" = async ]; then
    finish "restart-$mode"
    [ "$(json_field "$OUT/restart-$mode-s1b.json" resumed)" = True ] || fail "async: shard 1 did not resume"
    from=$(json_field "$OUT/restart-$mode-s1b.json" resumed_from_version)
    cp "$OUT/restart-$mode-s1b.json" "$OUT/restart-$mode-s1.json"
    model_checksum "restart-$mode" 2 >/dev/null
    acc=$(json_field "$OUT/restart-$mode-s0.json" test_accuracy)
    at_least "$acc" 0.80 || fail "async: accuracy $acc after a shard restart"
    pass "async, kill -9 of shard 1: resumed from its version $from, the workers came back to both, accuracy $acc"
    continue
  fi
  # The workers ask shard 0 to go back to shard 1's version; it starts itself again from
  # its own checkpoint of it, and the job goes on from one version and ends normally.
  finish "restart-$mode"
  grep -q "asking the shards ahead to go back to version" "$OUT/restart-$mode-w0.log" ||
    grep -q "asking the shards ahead to go back to version" "$OUT/restart-$mode-w1.log" ||
    fail "sync: no worker asked the shards ahead to go back"
  grep -q "going back to .*ckpt-" "$OUT/restart-$mode-ps0.log" || fail "sync: shard 0 did not go back"
  grep -q "starting again from" "$OUT/restart-$mode-ps0.log" || fail "sync: shard 0 did not start again"
  cp "$OUT/restart-$mode-s1b.json" "$OUT/restart-$mode-s1.json"
  a=$(model_checksum "restart-$mode" 2)
  v0=$(json_field "$OUT/restart-$mode-s0.json" updates)
  v1=$(json_field "$OUT/restart-$mode-s1b.json" updates)
  [ "$v0" = "$v1" ] || fail "sync: the shards ended at versions $v0 and $v1"
  acc=$(json_field "$OUT/restart-$mode-s0.json" test_accuracy)
  at_least "$acc" 0.82 || fail "sync: accuracy $acc after going back"
  # As a restarted ps does (ps_restart_test), the shards gone back end with the weights of
  # an uninterrupted run.
  sharded restart-ref 2 2 --mode sync "${job[@]}"
  finish restart-ref
  ref=$(model_checksum restart-ref 2)
  [ "$a" = "$ref" ] || fail "sync: weights $a after the shard restart, $ref uninterrupted"
  pass "sync, kill -9 of shard 1: shard 0 went back to shard 1's checkpoint by itself, both ended at version $v0 with the uninterrupted run's weights ($ref), accuracy $acc"
done

# 6. Backup workers: each shard applies a step after N-K gradients.
sharded backup 2 3 --mode sync --backup-workers 1 "${common[@]}"
finish backup
acc=$(json_field "$OUT/backup-s0.json" test_accuracy)
at_least "$acc" 0.78 || fail "backup workers over 2 shards: accuracy $acc"
pass "backup workers (3 workers, 1 backup) over 2 shards: accuracy $acc"
echo "9 passed, 0 failed"
