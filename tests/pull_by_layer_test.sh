#!/usr/bin/env bash
# Issue 13, point 3 (on CPU workers here): --pull-by-layer starts a training step while its
# weights are still arriving, and each layer's forward pass waits only for that layer's
# weights (kernels/net.h, pst_net_load_params_streamed; the ps sends a reply's chunks first
# layer first).
#  - sync, 2 workers, 16 KiB chunks so that a reply has 58 chunks: the same final weights
#    with and without it, with --push-by-layer as well, and over 2 ps shards; the workers
#    say how many steps started before their weights were all in, which must be some;
#  - a reply that stops halfway: a proxy between worker 0 and the ps (tests/ps_proxy.py)
#    forwards the first two chunks of the 21st reply and then nothing, so that the step
#    computing on them waits for the rest. The worker's silence check must give the ps up, the waiting step must be
#    dropped (not hang the worker), the worker must connect again and, the ps waiting for it
#    (--on-worker-loss wait), the run must end with the clean run's weights;
#  - the same with null workers paced as a GPU, whose next PULL goes out during the
#    backward pass (wk_pull_ahead): the stalled reply began while the step before computed;
#  - and a SIGTERM while such a step waits: the worker stops at once (status 3).
source "$(dirname "$0")/lib.sh"

early() { # early NAME: the steps started early and all steps, summed over the workers
  grep -ho 'pull-by-layer: [0-9]* of [0-9]*' "$OUT/$1"/worker*.log | awk '{s += $2; t += $4} END {print s + 0, t + 0}'
}

plain=$(local_checksum plain)
for v in "pulled --pull-by-layer" "both --pull-by-layer --push-by-layer" \
         "sharded --pull-by-layer --push-by-layer --ps-shards 2"; do
  read -r name flags <<<"$v"
  # shellcheck disable=SC2086
  sum=$(local_checksum "$name" $flags)
  [ "$sum" = "$plain" ] || fail "$flags: checksum $sum, $plain without"
  read -r e t <<<"$(early "$name")"
  [ "$t" -gt 0 ] && [ "$e" -gt 0 ] || fail "$flags: no step started before its weights were in ($e of $t)"
  pass "$flags: checksum $sum as without; $e of $t steps started before their weights were in"
done

# stalled_reply NAME CLEAN PS_ARGS... -- WORKER_ARGS...: a ps given PS_ARGS (it waits for a
# lost worker: sync steps do not go on without it), worker 1 straight to it and worker 0
# through a proxy (tests/ps_proxy.py) that forwards the first two chunks of the 21st reply
# and then nothing (lib.sh, proxied_pair). Worker 0 must give the silent ps up, drop the
# step that waited, come back, and the run end with exactly the clean run's weights, CLEAN;
# GOT is the checksum.
stalled_reply() {
  local name=$1 clean=$2
  shift 2
  proxied_pair "$name" stall 20 --worker-timeout 1.5 "$@"
  [ -f "$OUT/proxy-$name" ] || fail "$name: the proxy never held a reply back"
  grep -q "lost the ps (no message from the ps for" "$OUT/w0-$name.log" ||
    fail "$name: worker 0 did not give up the silent ps"
  grep -q "dropped the gradient computed on version" "$OUT/w0-$name.log" ||
    fail "$name: worker 0 did not drop the step that waited for the rest of its weights"
  grep -q "worker 0 .* rejoined" "$OUT/ps-$name.log" || fail "$name: the ps did not see worker 0 rejoin"
  GOT=$(json_field "$OUT/s-$name.json" weights_checksum)
  [ "$GOT" = "$clean" ] || fail "$name: checksum $GOT after the stopped reply, $clean in a clean run"
}

# The reply that stops halfway, on CPU workers.
args=(--model mlp --epochs 1 --batch-size 256 --seed 7 --chunk-kib 16)
train sync 2 "$OUT/clean.json" "${args[@]}"
clean=$(json_field "$OUT/clean.json" weights_checksum)
stalled_reply cpu "$clean" "${args[@]}" -- --pull-by-layer
pass "a reply stopped after 2 of 58 chunks: worker 0 gave the ps up, dropped the waiting step, came back; checksum $GOT = clean"

# The same with null workers paced as a GPU (1 ms a step's compute, mlp's first layer in
# pieces of 256 KiB chunks): their next PULL goes out during the backward pass
# (worker/step.c, wk_pull_ahead), so the reply that stops halfway began while the step
# before it still computed.
nargs=(--model mlp --epochs 1 --batch-size 256 --seed 7 --chunk-kib 256)
WORKER_EXTRA=("--device null:250000" "--device null:250000")
train sync 2 "$OUT/clean_null.json" "${nargs[@]}"
WORKER_EXTRA=()
clean_null=$(json_field "$OUT/clean_null.json" weights_checksum)
n_ahead=$(grep -ho '[0-9]* pulls went out' "$OUT"/worker0-sync.log | awk '{n = $1} END {print n + 0}')
[ "$n_ahead" -gt 0 ] || fail "null workers: no PULL went out during the step before"
stalled_reply null "$clean_null" "${nargs[@]}" -- --device null:250000
pass "null workers, $n_ahead pulls sent during the step before: a reply stopped halfway, worker 0 gave the ps up, dropped the waiting step, came back; checksum $GOT = clean"

# SIGTERM while a step waits for the rest of its weights (the ps's silence is not yet past
# its timeout): the wait ends at once and the worker stops with status 3.
port=$(free_port)
proxy_port=$(free_port)
start_bg proxy2 /usr/bin/python3 "$RUNFILES/tests/ps_proxy.py" "$proxy_port" "$port" "$OUT/stalled2" stall 5
start_ps ps2 --listen "127.0.0.1:$port" --workers 2 --worker-timeout 30 "${args[@]}"
start_worker w0b --ps "127.0.0.1:$proxy_port" --index 0 --pull-by-layer --shm false
w0=$LAST_PID
start_worker w1b --ps "127.0.0.1:$port" --index 1 --pull-by-layer
deadline=$((SECONDS + 60))
until [ -f "$OUT/stalled2" ]; do
  [ $SECONDS -lt $deadline ] || fail "the second proxy never held a reply back"
  sleep 0.05
done
sleep 0.5
kill -TERM "$w0"
rc=0; wait_pid "$w0" 5 || rc=$?
[ $rc -eq 3 ] || fail "worker 0, stopped while its step waited for weights, exited $rc, not 3"
pass "SIGTERM while a step waited for the rest of its weights: the worker stopped at once (status 3)"
echo "6 passed, 0 failed"
