#!/usr/bin/env bash
# What a STATUS_REQ flood costs the ps (issue 23, point 6; docs/benchmarks.md):
#  1. the ps's CPU time for one round of 20 connections x 2000 STATUS_REQ then a reset, on an
#     idle ps (registered workers, no training), ROUNDS times;
#  2. a sync job (2 workers, mlp, Adam, batch 64, 2 epochs) alone and beside a flood round
#     every 2 s, interleaved REPEATS times: samples/s from the summary.
#   tools/status_flood_bench.sh [ROUNDS] [REPEATS]   (after ./pstrain demo has built the daemons)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5} REPEATS=${2:-3}
PS=bazel-bin/ps/pstrain-ps WK=bazel-bin/worker/pstrain-worker
DATA=${PSTRAIN_DATA_DIR:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu() { awk '{print ($14 + $15) / 100}' "/proc/$1/stat"; }
flood() {
  PYTHONPATH=tests python3 - "$1" <<'PY'
import socket, struct, sys, threading
from peer import MSG, frame, vfield
req = frame(vfield(1, MSG["STATUS_REQ"])) * 2000
def one():
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    try:
        s.sendall(req)
    except OSError:
        pass
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
ts = [threading.Thread(target=one) for _ in range(20)]
for t in ts: t.start()
for t in ts: t.join()
PY
}

# 1. One round's CPU on an idle ps.
p=$(port)
$PS --listen 127.0.0.1:$p --workers 1 --status-interval 0 >"$tmp/idle.log" 2>&1 &
ps_pid=$!
sleep 1
for r in $(seq "$ROUNDS"); do
  c0=$(cpu $ps_pid); flood $p; sleep 0.5; c1=$(cpu $ps_pid)
  echo "round $r: the ps used $(python3 -c "print('%.3f' % ($c1 - $c0))") s of CPU for 20 x 2000 STATUS_REQ"
done
kill $ps_pid; wait $ps_pid 2>/dev/null || true

# 2. A job alone and beside floods.
job() {
  local name=$1 flooding=$2 p; p=$(port)
  $PS --listen 127.0.0.1:$p --workers 2 --mode sync --model mlp --epochs 2 --batch-size 64 \
    --status-interval 0 --summary-json "$tmp/$name.json" >"$tmp/$name-ps.log" 2>&1 &
  local ps_pid=$!
  for i in 0 1; do $WK --ps 127.0.0.1:$p --index $i --data-dir "$DATA" >"$tmp/$name-w$i.log" 2>&1 & done
  if [ "$flooding" = 1 ]; then
    sleep 1
    while kill -0 $ps_pid 2>/dev/null; do flood $p 2>/dev/null || true; sleep 2; done
  fi
  wait
  python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["samples_per_sec"]))' "$tmp/$name.json"
}
alone=() flooded=()
for r in $(seq "$REPEATS"); do
  alone+=("$(job alone$r 0)")
  flooded+=("$(job flood$r 1)")
done
echo "job alone: ${alone[*]} samples/s; beside a flood round every 2 s: ${flooded[*]} samples/s"
