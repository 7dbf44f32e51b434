#!/usr/bin/env bash
# Network mutation fuzzing of the real ps under ASan and UBSan (issue 23), for the sanitizer
# pass of `./pstrain test` (bazel test --config=asan; tagged manual like asan_train_test):
#  1. sessions are recorded: two real workers train a small model for one epoch through a
#     recording proxy (tests/fuzz/net_fuzz.py record);
#  2. for NET_FUZZ_SECONDS (20 in CI; 90 or more by hand), those sessions, cut into frames
#     and mutated, are played to a fresh ps over loopback, up to four connections at a
#     time; the ps is started again whenever it ends by itself;
#  3. the verdict is the sanitizers' own: their reports go to $OUT/sanitizer.<pid> (log_path)
#     and the ps's log is searched too; any report, a ps killed by a signal or one that does
#     not stop on SIGTERM fails the test.
# By hand: bazel test --config=asan //tests/fuzz:net_fuzz_test --test_env=NET_FUZZ_SECONDS=90
set -euo pipefail

RUNFILES="${TEST_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}/pstrain"
[ -d "$RUNFILES" ] || RUNFILES="$(cd "$(dirname "$0")/../.." && pwd)"
PS_BIN="$RUNFILES/ps/pstrain-ps"
WORKER_BIN="$RUNFILES/worker/pstrain-worker"
FUZZ="$RUNFILES/tests/fuzz/net_fuzz.py"
DATA_DIR="${PSTRAIN_DATA_DIR:-/usr/share/datasets/fashion-mnist}"
OUT="${TEST_UNDECLARED_OUTPUTS_DIR:-$(mktemp -d)}"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
SECONDS_TO_FUZZ="${NET_FUZZ_SECONDS:-20}"
mkdir -p "$OUT"
PIDS=()
trap 'for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -KILL "$p" 2>/dev/null || true; done' EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$OUT"/*.log "$OUT"/sanitizer.*; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 60 "$f" >&2; }; done
  exit 1
}
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:allow_user_segv_handler=0:log_path=$OUT/sanitizer"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$OUT/sanitizer"

data="$TMP/data"
mkdir -p "$data"
/usr/bin/python3 "$RUNFILES/tests/fuzz/data_slice.py" "$DATA_DIR" "$data" 1200 200
printf 'input 784\ndense 24 relu\ndense 10 softmax\n' >"$TMP/small.spec"
model=(--model "$TMP/small.spec" --chunk-kib 4 --batch-size 32 --status-interval 0)

# 1. Record.
ps_port=$(free_port)
proxy_port=$(free_port)
"$PS_BIN" --listen "127.0.0.1:$ps_port" --workers 2 --epochs 1 "${model[@]}" >"$OUT/record-ps.log" 2>&1 &
ps_pid=$!
PIDS+=("$ps_pid")
/usr/bin/python3 "$FUZZ" record "$proxy_port" "$ps_port" "$TMP/sessions" >"$OUT/proxy.log" 2>&1 &
PIDS+=($!)
sleep 1
w=()
for i in 0 1; do
  "$WORKER_BIN" --ps "127.0.0.1:$proxy_port" --index "$i" --data-dir "$data" --device cpu \
    --connect-timeout 30 >"$OUT/record-w$i.log" 2>&1 &
  w+=($!)
  PIDS+=($!)
done
for p in "${w[@]}"; do wait "$p" || fail "a recording worker exited with status $?"; done
wait "$ps_pid" || fail "the recording ps exited with status $?"
sleep 1
n=$(ls "$TMP/sessions" | wc -l)
[ "$n" -ge 2 ] || fail "only $n sessions recorded"

# 2. Fuzz a ps that never finishes by itself (a thousand epochs), whose timeouts are short so
# that slots the fuzzer takes are lost and given up, and which is started again when every
# slot is gone.
NET_FUZZ_PS_LOG="$OUT/fuzz-ps.log" /usr/bin/python3 "$FUZZ" fuzz "$TMP/sessions" "$SECONDS_TO_FUZZ" \
  "${NET_FUZZ_SEED:-$RANDOM}" -- "$PS_BIN" --workers 2 --epochs 1000 "${model[@]}" \
  --worker-timeout 1 --hello-timeout 1 --rejoin-timeout 2 --max-connections 32 \
  >"$OUT/fuzz.out" 2>&1 || { cat "$OUT/fuzz.out"; fail "the fuzzed ps failed"; }

# 3. The sanitizers' verdict.
reports=$(grep -lE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: (Address|Leak|UndefinedBehavior)Sanitizer' \
  "$OUT"/*.log "$OUT"/sanitizer.* 2>/dev/null || true)
[ -z "$reports" ] || fail "sanitizer reports in: $reports"
echo "PASS: $(tail -n 1 "$OUT/fuzz.out") from $n recorded sessions; no sanitizer report"
