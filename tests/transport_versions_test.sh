#!/usr/bin/env bash
# A pull reply never mixes two versions. async, 4 MiB of weights in 64 KiB chunks: three
# clients push a constant gradient as fast as they can while a fourth only pulls. Every
# vector it pulls must equal the initial weights after exactly `version` pushes (the
# client replays them: tools/benchclient.c --check versions); a reply stitched from two
# versions differs in some chunk. The puller must also have seen the version move.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/transport_lib.sh"
model=$(spec m1m "input 15" "dense 65536 softmax")   # 1048576 floats, 4 MiB
port=$(free_port)
start_ps ps --listen "127.0.0.1:$port" --model "$model" --mode async --workers 4 \
  --optimizer sgd --lr 1 --chunk-kib 64 --epochs 1 --log-level warning
ps_pid=$LAST_PID
wait_ps_listening "$port" "$ps_pid"
cpids=()
for i in 0 1 2; do
  start_client "pusher$i" --ps "127.0.0.1:$port" --index "$i" --rounds 150 --grad-value 1
  cpids+=("$LAST_PID")
done
start_client puller --ps "127.0.0.1:$port" --index 3 --role pull --check versions \
  --grad-value 1 --lr 1 --rounds 150 --warmup 0 --out "$OUT/puller.json"
cpids+=("$LAST_PID")
for i in "${!cpids[@]}"; do wait_pid "${cpids[$i]}" 50 || fail "client $i failed"; done
wait_pid "$ps_pid" 10 || fail "ps exited non-zero"
pulls=$(json_field "$OUT/puller.json" pulls)
distinct=$(json_field "$OUT/puller.json" distinct_versions)
[ "$distinct" -ge 20 ] || fail "only $distinct distinct versions in $pulls pulls: the pushes did not overlap the pulls"
pass "$pulls pulls, $distinct distinct versions, none mixed"

# The same over two ps shards with 2 threads each (512 KiB chunks, large enough for the
# helper threads: ps/train/par.h): each shard's replies hold one version of its part.
ports=() spids=()
for s in 0 1; do
  port=$(free_port)
  start_ps "ps-shard$s" --listen "127.0.0.1:$port" --model "$model" --mode async --workers 4 \
    --shard "$s/2" --threads 2 --optimizer sgd --lr 1 --chunk-kib 512 --epochs 1 \
    --log-level warning
  spids+=("$LAST_PID")
  ports+=("$port")
  wait_ps_listening "$port" "$LAST_PID"
done
cpids=()
for s in 0 1; do
  for i in 0 1 2; do
    start_client "pusher$i-shard$s" --ps "127.0.0.1:${ports[$s]}" --shard "$s/2" --index "$i" \
      --rounds 150 --grad-value 1
    cpids+=("$LAST_PID")
  done
  start_client "puller-shard$s" --ps "127.0.0.1:${ports[$s]}" --shard "$s/2" --index 3 \
    --role pull --check versions --grad-value 1 --lr 1 --rounds 150 --warmup 0 \
    --out "$OUT/puller-shard$s.json"
  cpids+=("$LAST_PID")
done
for p in "${cpids[@]}"; do wait_pid "$p" 50 || fail "shards: a client failed"; done
for p in "${spids[@]}"; do wait_pid "$p" 10 || fail "shards: a ps shard exited non-zero"; done
for s in 0 1; do
  d=$(json_field "$OUT/puller-shard$s.json" distinct_versions)
  [ "$d" -ge 10 ] || fail "shard $s: only $d distinct versions: the pushes did not overlap the pulls"
done
pass "2 shards x 2 threads: $(json_field "$OUT/puller-shard0.json" pulls) + $(json_field "$OUT/puller-shard1.json" pulls) pulls, none mixed"
echo "2 passed, 0 failed"
