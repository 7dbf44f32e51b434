#!/usr/bin/env bash
# A worker survives a ps that lies. Between worker 0 and a real ps stands a proxy
# (tests/ps_proxy.py, mode lie) that, on each new connection, changes one chunk of its third
# reply:
# a chunk past the end of the shard's part, a count that does not match the payload, a
# prefix that is not pstrain's, a header length far over the cap, a frame type that does not
# exist, the reply's last chunk twice, and two chunks swapped. Each lie but the last must
# make the worker close that connection with a one-line reason and connect again (never
# crash, never train on the lie); the swapped chunks carry their offsets and must be taken
# as they are. Twice: with --pull-by-layer, whose step computes on a reply while the rest
# of it is still coming, and without. The ps waits for the lost worker (--on-worker-loss
# wait), so each run must end with exactly the weights of a clean run. Then, with delta
# pulls, a delta chunk whose scale is a NaN (proxy mode nanscale); and with the data handed
# out by the ps, a range past the end of the training set (proxy mode baddata); with sparse
# delta pulls, a pair past its chunk (proxy mode badpair); and a WELCOME
# whose top-k momentum is outside [0, 1) (proxy mode badmomentum).
source "$(dirname "$0")/lib.sh"
args=(--model mlp --epochs 1 --batch-size 256 --seed 5 --chunk-kib 16)
train sync 2 "$OUT/clean.json" "${args[@]}"
clean=$(json_field "$OUT/clean.json" weights_checksum)

# lied_to NAME WORKER_FLAGS...: the run with the lying proxy before worker 0 (lib.sh,
# proxied_pair).
lied_to() {
  local name=$1; shift
  proxied_pair "$name" lie 3 --worker-timeout 3 "${args[@]}" -- "$@"
  local told bad got log="$OUT/w0-$name.log"
  told=$(tr '\n' ' ' <"$OUT/proxy-$name" 2>/dev/null || true)
  [ "$told" = "offset count magic huge type twice reorder " ] || fail "$name: the proxy told: '$told'"
  # One reconnection per lie but the swap, each at once (a bad frame, not silence) with its
  # reason in one line. (A reconnection may also be refused a few times while the ps has not
  # yet seen the old connection close: those say so, and are not counted.)
  bad=$(grep -c "lost the ps (bad frame from the ps: " "$log" || true)
  [ "$bad" -eq 6 ] || fail "$name: worker 0 dropped $bad connections for a bad frame, not 6 (one per lie but the swap)"
  for reason in "unexpected tensor chunk (offset 10737" "tensor chunk of [0-9]* values of 4 bytes with a" \
                "bad magic" "header length 1073741824" "unknown message type 99"; do
    grep -q "lost the ps (bad frame from the ps: $reason" "$log" || fail "$name: no one-line reason '$reason'"
  done
  if grep -q "lost the ps (no message" "$log"; then fail "$name: worker 0 waited for silence instead of refusing a lie"; fi
  if grep -qiE "segmentation|abort|sanitizer|assert" "$log"; then fail "$name: worker 0 crashed"; fi
  got=$(json_field "$OUT/s-$name.json" weights_checksum)
  [ "$got" = "$clean" ] || fail "$name: checksum $got after the lies, $clean in a clean run"
  pass "$name: 7 lies from the ps (told: $told): 6 reconnections with a reason each, the swap taken; checksum $got = clean"
  grep -h "lost the ps (bad frame" "$log" | sed 's/^.*lost the ps (/  reason: (/; s/; reconnecting.*//'
}

lied_to streamed --pull-by-layer
lied_to whole

# delta_lie NAME MODE REASON PS_FLAGS...: a job of 2 workers with delta pulls, worker 0
# behind the proxy in MODE (from the 3rd reply on). Worker 0 must refuse the lie with REASON,
# connect again (its new connection's first reply is float32) and end with the ps's weights;
# sets $got to the ps's checksum.
delta_lie() {
  local name=$1 mode=$2 reason=$3; shift 3
  proxied_pair "$name" "$mode" 3 --worker-timeout 3 --pull-compress delta "$@" "${args[@]}" --
  [ "$(cat "$OUT/proxy-$name" 2>/dev/null)" = "$mode" ] || fail "$name: the proxy told no lie ($mode)"
  grep -q "lost the ps (bad frame from the ps: $reason" "$OUT/w0-$name.log" ||
    fail "$name: worker 0 did not refuse the lie ($mode) with its reason"
  got=$(json_field "$OUT/s-$name.json" weights_checksum)
  grep -q "final weights: .*checksum $got" "$OUT/w0-$name.log" ||
    fail "$name: worker 0 did not end with the ps's weights $got"
}

# Delta pulls (--pull-compress delta): a delta chunk whose scale is a NaN would make every
# weight it touches a NaN.
delta_lie delta nanscale "a delta chunk whose scale is not finite"
at_least "$(json_field "$OUT/s-delta.json" test_accuracy)" 0.8 || fail "delta: accuracy after the NaN scale"
pass "delta: a NaN scale refused with its reason, the worker reconnected and ended with the ps's weights ($got)"

# Sparse delta pulls (top-k pushes with momentum correction): a pair whose index is past its
# chunk.
delta_lie sparse badpair "a sparse delta chunk with a bad pair" --push-compress topk:0.01 \
  --optimizer momentum --lr 0.05
pass "sparse: a pair past its chunk refused with its reason, the worker reconnected and ended with the ps's weights ($got)"

# The data handed out by the ps (issue 28): a DATA frame naming positions past the end of the
# training set. The worker refuses it with its reason and connects again; the ps takes the
# worker's range back and hands it out again, so every sample is still trained once.
port=$(free_port)
proxy_port=$(free_port)
start_bg proxy-data /usr/bin/python3 "$RUNFILES/tests/ps_proxy.py" "$proxy_port" "$port" \
  "$OUT/lies-data" baddata 5
start_ps ps-data --listen "127.0.0.1:$port" --workers 2 --data-order ps --metrics "$OUT/data.jsonl" \
  --summary-json "$OUT/s-data.json" "${args[@]}"
ps_pid=$LAST_PID
start_worker w0-data --ps "127.0.0.1:$proxy_port" --shm false
w0=$LAST_PID
start_worker w1-data --ps "127.0.0.1:$port"
w1=$LAST_PID
wait_pid "$w0" 120 || fail "data: worker 0 exited non-zero after the bad range"
wait_pid "$w1" 120 || fail "data: worker 1 exited non-zero"
wait_pid "$ps_pid" 30 || fail "data: the ps exited non-zero"
[ "$(cat "$OUT/lies-data" 2>/dev/null)" = baddata ] || fail "data: the proxy told no bad range"
grep -q "lost the ps (bad frame from the ps: a range this worker cannot train" "$OUT/w0-data.log" ||
  fail "data: worker 0 did not refuse the bad range with its reason"
/usr/bin/python3 "$RUNFILES/tests/data_coverage.py" "$OUT/data.jsonl" 60000 1 >"$OUT/data-coverage.txt" ||
  fail "data: not every sample was trained once after the bad range: $(tail -n 2 "$OUT/data-coverage.txt")"
pass "data: a range past the training set refused with its reason, the worker reconnected, every sample once"

# A WELCOME whose momentum for top-k's correction is 2 (outside [0, 1)): the worker stops
# with its reason and exit 1, and trains nothing on it.
port=$(free_port)
proxy_port=$(free_port)
start_bg proxy-mom /usr/bin/python3 "$RUNFILES/tests/ps_proxy.py" "$proxy_port" "$port" \
  "$OUT/lies-mom" badmomentum 2
start_ps ps-mom --listen "127.0.0.1:$port" --workers 1 --push-compress topk:0.1 \
  --optimizer momentum --lr 0.05 "${args[@]}"
ps_pid=$LAST_PID
start_worker w0-mom --ps "127.0.0.1:$proxy_port" --shm false
w0=$LAST_PID
rc=0
wait_pid "$w0" 60 || rc=$?
[ "$rc" -eq 1 ] || fail "momentum: the worker told a momentum of 2 exited $rc, not 1"
[ "$(cat "$OUT/lies-mom" 2>/dev/null)" = badmomentum ] || fail "momentum: the proxy told no momentum"
grep -q "asked for encodings 3 and 0 (top-k fraction 0.1, momentum 2)" "$OUT/w0-mom.log" ||
  fail "momentum: the worker did not give its reason: $(tail -n 2 "$OUT/w0-mom.log")"
kill "$ps_pid" 2>/dev/null || true
wait "$ps_pid" 2>/dev/null || true
pass "momentum: a WELCOME with a top-k momentum of 2 stops the worker with its reason"
echo "6 passed, 0 failed"
