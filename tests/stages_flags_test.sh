#!/usr/bin/env bash
# Issue 40: a bad --stages, --place, --micro-batches, --virtual-devices or --device-mem is
# refused where the flags are read, before anything connects or starts.
#  - pstrain-worker, pointed at a port where nothing listens and told to keep retrying for
#    20 s: each bad flag exits 2 within a second with one line (a flag it took would have it
#    retry the ps for 20 s);
#  - pstrain local: each bad flag, including those that need the model's layers or the
#    batch size, exits 2 within a second with one line, and makes no run directory (no
#    process started);
#  - what needs the model sent by the ps (the worker's --stages above its layers) ends the
#    worker when the ps sends it: a non-zero exit within 20 s, one error line.
source "$(dirname "$0")/lib.sh"
port=$(free_port)

# refused_fast NAME CMD...: CMD exits 2 within a second, with one line of output.
refused_fast() {
  local name=$1; shift
  local t0=$EPOCHREALTIME rc=0
  timeout 30 "$@" >"$OUT/$name.out" 2>&1 || rc=$?
  local t1=$EPOCHREALTIME
  [ "$rc" = 2 ] || fail "$name: exit $rc, not 2: $(tail -n 2 "$OUT/$name.out")"
  /usr/bin/python3 -c 'import sys; sys.exit(0 if float(sys.argv[2]) - float(sys.argv[1]) < 1.0 else 1)' "$t0" "$t1" ||
    fail "$name: refused after $(/usr/bin/python3 -c 'import sys; print(float(sys.argv[2]) - float(sys.argv[1]))' "$t0" "$t1") s"
  [ "$(wc -l <"$OUT/$name.out")" = 1 ] || fail "$name: $(wc -l <"$OUT/$name.out") lines of output, not one"
}

worker_bad=(
  "--stages 17" "--stages 0" "--micro-batches 0" "--virtual-devices 257" "--device-mem -1"
  "--stages 3 --virtual-devices 2" "--place 1=cpu,3=cpu" "--place 2-3=cpu" "--place 1-2"
  "--place 1=cpu:0,2-3=cpu:1" "--place 1=cpu:0,2-3=cpu:2 --virtual-devices 2"
  "--place 1=gpu,2-3=cpu" "--place 1=cpu,2=cpu --stages 3" "--device cuda --stages 2"
  "--device tpu --stages 2" "--place 1=cpu,2-3=cuda:1"
  "--device cuda:0 --virtual-devices 2 --stages 2"
  "--place 1=cuda:0.0,2-3=cuda:0.2 --virtual-devices 2 --gpu-memory-limit 1024"
  "--place 1=cuda:0,2-3=cuda:0.1 --virtual-devices 2 --gpu-memory-limit 1024"
)
n=0
for a in "${worker_bad[@]}"; do
  # shellcheck disable=SC2086
  refused_fast "worker$n" "$WORKER_BIN" --ps "127.0.0.1:$port" --connect-timeout 20 $a
  n=$((n + 1))
done
pass "pstrain-worker: ${#worker_bad[@]} bad stage flags each exit 2 within a second, before any connection"

local_bad=(
  "--stages 17" "--stages 4" "--micro-batches 129" "--virtual-devices 257" "--device-mem -1"
  "--stages 3 --virtual-devices 2" "--place 1=cpu,3=cpu" "--place 1=cpu,2=cpu"
  "--place 1=cpu,2-4=cpu" "--place 1=cpu:0,2-3=cpu:1" "--place 1=gpu,2-3=cpu"
  "--stages 2 --gpus 0" "--device cuda:0 --stages 2" "--mode allreduce --stages 2"
  "--device cuda:0 --virtual-devices 2 --stages 2"
  "--device cuda:0 --virtual-devices 4 --gpu-memory-limit 3 --stages 2"
)
n=0
for a in "${local_bad[@]}"; do
  # shellcheck disable=SC2086
  refused_fast "local$n" "$LAUNCHER_BIN" local --workers 1 --model mlp --epochs 1 --batch-size 128 \
    --run-dir "$OUT/local$n" $a
  [ ! -e "$OUT/local$n" ] || fail "local $a: a run directory was made"
  n=$((n + 1))
done
pass "pstrain local (mlp, 3 layers, batch 128): ${#local_bad[@]} bad stage flags each exit 2 within a second, no process started"

# The model's own check, once the ps has sent it: mlp has 3 layers, so --stages 5 cannot be.
start_ps ps --listen "127.0.0.1:$port" --workers 1 --model mlp --epochs 1
start_worker w5 --ps "127.0.0.1:$port" --stages 5
rc=0; wait_pid "$LAST_PID" 20 || rc=$?
[ "$rc" != 0 ] || fail "--stages 5 for mlp: the worker exited 0"
errors=$(grep -c '^<3>' "$OUT/w5.log" || true)
[ "$errors" = 1 ] || fail "--stages 5 for mlp: $errors error lines, not one"
pass "--stages 5 for mlp, known once the ps sent the model: the worker exited $rc with one error line"
echo "3 passed, 0 failed"
