#!/usr/bin/env bash
# Issue 13, point 2: the ps's I/O threads (ps/net/io.h) read gradient payloads and write weight
# replies off its loop thread. Every ps here hands each one of them over (--threads 3
# --io-offload-kib 1; 64 KiB chunks, so a push or a reply is 15 of them), and:
#  - sync, 2 workers: the same final weights as a ps with the loop thread alone;
#  - a push that stops halfway: a proxy between worker 0 and the ps (tests/ps_proxy.py)
#    forwards half of the payload of worker 0's 300th PUSH frame and then nothing, so that an
#    I/O thread waits for the rest. The ps must still find the worker silent (its silence
#    check looks at the job's progress), close it, take the job back and, waiting for it
#    (--on-worker-loss wait), end on the clean run's weights once the worker is back;
#  - kill -9 of a worker mid-run and a replacement: the run ends, its accuracy sane;
#  - SIGTERM to the ps mid-run: it stops within seconds with status 3 and a clean loop close.
source "$(dirname "$0")/lib.sh"

args=(--model mlp --epochs 1 --batch-size 256 --seed 7 --chunk-kib 64)
# Over TCP: through shared memory (proto/ring.h) no payload would reach the I/O threads.
io=(--threads 3 --io-offload-kib 1 --shm false)

train sync 2 "$OUT/plain.json" "${args[@]}" --threads 1
plain=$(json_field "$OUT/plain.json" weights_checksum)
train sync 2 "$OUT/io.json" "${args[@]}" "${io[@]}"
got=$(json_field "$OUT/io.json" weights_checksum)
[ "$got" = "$plain" ] || fail "checksum $got with I/O threads, $plain without"
grep -q "2 I/O threads" "$OUT/ps-sync.log" || fail "the ps did not say it runs I/O threads"
pass "sync, 2 workers: checksum $got with every payload and reply on I/O threads, as without"

# The push that stops halfway (lib.sh, proxied_pair).
proxied_pair stall stall_push 300 --worker-timeout 1.5 "${args[@]}" "${io[@]}" --
[ -f "$OUT/proxy-stall" ] || fail "the proxy never held a push back"
grep -q "worker 0 .*no message for" "$OUT/ps-stall.log" || fail "the ps did not find worker 0 silent mid-payload"
grep -q "worker 0 .* rejoined" "$OUT/ps-stall.log" || fail "the ps did not see worker 0 rejoin"
got=$(json_field "$OUT/s-stall.json" weights_checksum)
[ "$got" = "$plain" ] || fail "checksum $got after the push stopped halfway, $plain in a clean run"
pass "a push stopped halfway on an I/O thread: the ps found worker 0 silent, it came back; checksum $got = clean"

# kill -9 of a worker mid-run, and a replacement.
kill_one_worker k "${args[@]}" "${io[@]}"
acc=$(json_field "$OUT/k.json" test_accuracy)
at_least "$acc" 0.7 || fail "accuracy $acc after a worker was killed"
pass "kill -9 of a worker mid-run with I/O threads: replaced, the run ended at accuracy $acc"

# SIGTERM to the ps mid-run.
port=$(free_port)
start_ps tps --listen "127.0.0.1:$port" --workers 2 --metrics "$OUT/t.jsonl" --report-every 5 \
  "${args[@]}" "${io[@]}"
ps_pid=$LAST_PID
# Steps of at least 2 x 5 ms (--delay-ms): the SIGTERM lands mid-run on any CPU.
start_worker tw0 --ps "127.0.0.1:$port" --index 0 --delay-ms 5
start_worker tw1 --ps "127.0.0.1:$port" --index 1 --delay-ms 5
wait_step "$OUT/t.jsonl" 20 60
kill -TERM "$ps_pid"
rc=0; wait_pid "$ps_pid" 10 || rc=$?
[ $rc -eq 3 ] || fail "the ps, stopped mid-run, exited $rc, not 3"
! grep -q "did not close cleanly" "$OUT/tps.log" || fail "the ps's loop did not close cleanly"
pass "SIGTERM mid-run with I/O threads: the ps stopped with status 3, its loop closed cleanly"
echo "4 passed, 0 failed"
