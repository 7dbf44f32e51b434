#!/usr/bin/env bash
# The sum of N pushes is exact: for 1..4 clients, sync and async, models of 3001 and 10000
# floats with 4 KiB chunks (neither a multiple of the chunk), SGD with lr 1 and small integer
# gradients, so every float operation is exact or reproducible. Each client checks the
# weights itself (tools/benchclient.c --check sum): sync after every step and at the end,
# async at the end (each element there is pushed by one client only, so the result does not
# depend on the order the ps applied the pushes in). Sync runs once more with each round's
# PULL sent ahead of its push (--pull-first, as pstrain-worker does): the ps then streams
# every chunk of the next version back as soon as it is final, mid-step, and the checks
# show that each streamed chunk holds exactly the step's result. Last, the same over two ps
# shards, with one and with several ps threads.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/transport_lib.sh"
s3001=$(spec m3001 "input 2" "dense 1 relu" "dense 1499 softmax")   # 3 + 2998 floats
s10000=$(spec m10000 "input 1" "dense 5000 softmax")               # 5000 + 5000 floats
passed=0
for model in "$s3001" "$s10000"; do
  for mode in sync sync-pull-first async; do
    pf=()
    [ "$mode" = sync-pull-first ] && pf=(--pull-first)
    for n in 1 2 3 4; do
      port=$(free_port)
      tag="$(basename "$model" .spec)-$mode-$n"
      start_ps "ps-$tag" --listen "127.0.0.1:$port" --model "$model" --mode "${mode%%-*}" \
        --workers "$n" --optimizer sgd --lr 1 --chunk-kib 4 --epochs 1 --log-level warning
      ps_pid=$LAST_PID
      wait_ps_listening "$port" "$ps_pid"
      cpids=()
      for ((i = 0; i < n; i++)); do
        start_client "client-$tag-$i" --ps "127.0.0.1:$port" --index "$i" --rounds 6 \
          --warmup 0 --check sum --lr 1 "${pf[@]}"
        cpids+=("$LAST_PID")
      done
      for i in "${!cpids[@]}"; do wait_pid "${cpids[$i]}" 30 || fail "$tag: client $i failed"; done
      wait_pid "$ps_pid" 10 || fail "$tag: ps exited non-zero"
      passed=$((passed + 1))
    done
  done
done
pass "$passed exact-sum runs (3001 and 10000 floats, 4 KiB chunks, 1..4 clients, sync, sync with streamed pulls, async)"

# Across ps shards and threads (issue 13): 200000 floats over 2 shards (100000 each, one
# chunk, large enough for the ps's helper threads: ps/train/par.h), each client one benchclient
# per shard checking its part; the ps with 1 and with 3 threads.
s200k=$(spec m200k "input 3" "dense 50000 softmax")               # 150000 + 50000 floats
runs=0
for mode in sync async; do
  for threads in 1 3; do
    tag="shards-$mode-t$threads"
    ports=() spids=()
    for s in 0 1; do
      port=$(free_port)
      start_ps "ps-$tag-$s" --listen "127.0.0.1:$port" --model "$s200k" --mode "$mode" \
        --shard "$s/2" --workers 3 --optimizer sgd --lr 1 --chunk-kib 512 --epochs 1 \
        --threads "$threads" --log-level warning
      spids+=("$LAST_PID")
      ports+=("$port")
      wait_ps_listening "$port" "$LAST_PID"
    done
    cpids=()
    for ((i = 0; i < 3; i++)); do
      for s in 0 1; do
        start_client "client-$tag-$i-$s" --ps "127.0.0.1:${ports[$s]}" --shard "$s/2" \
          --index "$i" --rounds 6 --warmup 0 --check sum --lr 1
        cpids+=("$LAST_PID")
      done
    done
    for p in "${cpids[@]}"; do wait_pid "$p" 30 || fail "$tag: a client failed"; done
    for p in "${spids[@]}"; do wait_pid "$p" 10 || fail "$tag: a ps shard exited non-zero"; done
    runs=$((runs + 1))
  done
done
pass "$runs exact-sum runs over 2 ps shards (sync and async, 1 and 3 ps threads, 3 clients)"
echo "2 passed, 0 failed"
