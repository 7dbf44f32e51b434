#!/usr/bin/env bash
# The ps's memory does not grow over 1000 rounds: sync and async, 2 clients, 1 MiB of weights.
# Client 0 reads the ps's VmRSS from /proc after 100 rounds and again after the last one;
# the end may exceed the warm figure by 8 MiB at most, and the peak (VmHWM) must respect
# the bound weights x (2 + 0 optimizer slots) + 32 MiB.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/transport_lib.sh"
model=$(spec m256k "input 3" "dense 65536 softmax")   # 262144 floats, 1 MiB
weights_kib=1024
for mode in sync async; do
  port=$(free_port)
  start_ps "ps-$mode" --listen "127.0.0.1:$port" --model "$model" --mode "$mode" --workers 2 \
    --optimizer sgd --lr 1e-6 --chunk-kib 256 --epochs 1 --log-level warning
  ps_pid=$LAST_PID
  wait_ps_listening "$port" "$ps_pid"
  start_client "c0-$mode" --ps "127.0.0.1:$port" --index 0 --rounds 1000 --warmup 0 \
    --watch-pid "$ps_pid" --rss-after 100 --out "$OUT/c0-$mode.json"
  c0=$LAST_PID
  start_client "c1-$mode" --ps "127.0.0.1:$port" --index 1 --rounds 1000 --warmup 0
  c1=$LAST_PID
  wait_pid "$c0" 50 || fail "$mode: client 0 failed"
  wait_pid "$c1" 50 || fail "$mode: client 1 failed"
  wait_pid "$ps_pid" 10 || fail "$mode: ps exited non-zero"
  warm=$(json_field "$OUT/c0-$mode.json" ps_rss_warm_kib)
  end=$(json_field "$OUT/c0-$mode.json" ps_rss_end_kib)
  hwm=$(json_field "$OUT/c0-$mode.json" ps_hwm_kib)
  [ "$warm" -gt 0 ] && [ "$end" -gt 0 ] || fail "$mode: no RSS figures (warm $warm, end $end)"
  [ "$end" -le $((warm + 8192)) ] || fail "$mode: ps RSS grew from $warm KiB to $end KiB"
  bound=$((2 * weights_kib + 32768))
  [ "$hwm" -le "$bound" ] || fail "$mode: ps peak $hwm KiB over the bound $bound KiB"
  pass "$mode: ps RSS $warm KiB after 100 rounds, $end KiB after 1000; peak $hwm KiB <= $bound KiB"
done
echo "1 passed, 0 failed"
