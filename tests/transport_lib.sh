# Shared by the transport tests (after lib.sh): a ps with a model spec written here, and
# pstrain-benchclient processes (tools/benchclient.c) as its workers.
BENCH_BIN="$RUNFILES/tools/pstrain-benchclient"
[ -x "$BENCH_BIN" ] || fail "pstrain-benchclient not found at $BENCH_BIN"

# spec NAME LINES...: writes a model spec file, prints its path.
spec() {
  local f="$OUT/$1.spec"; shift
  printf '%s\n' "$@" >"$f"
  echo "$f"
}

# start_client NAME ARGS...: a bench client in the background; its pid is in LAST_PID.
start_client() {
  local name=$1; shift
  start_bg "$name" "$BENCH_BIN" --connect-timeout 20 "$@"
}

# wait_ps_listening PORT PID: until the ps accepts connections (it fills its buffers first).
wait_ps_listening() {
  local deadline=$((SECONDS + 20))
  until /usr/bin/python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$1" 2>/dev/null; do
    kill -0 "$2" 2>/dev/null || fail "the ps exited before listening on port $1"
    [ $SECONDS -lt $deadline ] || fail "the ps never listened on port $1"
    sleep 0.05
  done
}

# The clients push synthetic gradients (integer patterns and constants of any size) to check
# the transport's arithmetic, not to train: the ps's default gradient-norm rule (issue 43)
# would refuse them as poison, so these jobs run without it.
start_ps() {
  local name=$1; shift
  start_bg "$name" "$PS_BIN" --status-interval 0 --grad-norm-factor 0 "$@"
}
