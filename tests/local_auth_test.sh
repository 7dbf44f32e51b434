#!/usr/bin/env bash
# Issue 23, item 8: `pstrain local` authenticates by default. Each run makes a throwaway
# cluster secret in its run directory (mode 600) and gives it to its ps and workers, so that
# another user of this machine cannot join the job on 127.0.0.1 or change its weights:
#  - while a job trains, a client that sends HELLO without the handshake gets an ERROR frame
#    and the connection closed, never a WELCOME; a worker started by hand without the secret
#    is refused (exit 1); `pstrain status` with the run's secret answers;
#  - the job ends as it would have (every worker finished, none lost);
#  - --insecure makes no secret, and then `pstrain status` answers without one.
source "$(dirname "$0")/lib.sh"
export PSTRAIN_PS_BIN="$PS_BIN" PSTRAIN_WORKER_BIN="$WORKER_BIN"


# A job that lasts a few seconds on any CPU: its workers wait 2 x 3 ms per step.
port=$(free_port)
"$LAUNCHER_BIN" local --workers 2 --epochs 1 --batch-size 64 --port "$port" \
  --delay-worker 0:3,1:3 --run-dir "$OUT/job" --summary-json "$OUT/job.json" >"$OUT/job.out" 2>&1 &
job=$!
PIDS+=("$job")
wait_step "$OUT/job/metrics.jsonl" 20 60
secret="$OUT/job/secret"
[ -f "$secret" ] && [ "$(stat -c %a "$secret")" = 600 ] && [ "$(wc -c <"$secret")" -ge 32 ] ||
  fail "no secret of mode 600 in the run directory: $(ls -l "$OUT/job")"

/usr/bin/python3 - "$port" <<'PY' || fail "an unauthenticated HELLO was not refused"
import socket, struct, sys
port = int(sys.argv[1])
def varint(n):
    out = b""
    while True:
        b = n & 0x7f; n >>= 7
        out += bytes([b | (0x80 if n else 0)])
        if not n: return out
def field(num, wire, payload): return varint(num << 3 | wire) + payload
hello = field(1, 2, varint(8) + b"intruder") + field(3, 0, varint(0))       # name, index 0
header = field(1, 0, varint(1)) + field(10, 2, varint(len(hello)) + hello)   # Header{HELLO}
s = socket.create_connection(("127.0.0.1", port), timeout=10)
s.sendall(b"PSTR" + struct.pack("<HHII", 1, 0, len(header), 0) + header)
got = b""
try:
    while True:
        c = s.recv(4096)
        if not c: break
        got += c
except (ConnectionResetError, socket.timeout):
    pass
s.close()
# The answer is one ERROR frame (type 7) saying why, then EOF: never a WELCOME (type 2).
assert got[:4] == b"PSTR" and b"authentication required" in got, got[:80]
hlen = struct.unpack_from("<I", got, 8)[0]
assert got[16:18] == b"\x08\x07" and len(got) == 16 + hlen, got[:40]
print("HELLO without the handshake: ERROR 'authentication required', then the ps closed")
PY
rc=0
"$WORKER_BIN" --ps "127.0.0.1:$port" --index 0 --data-dir "$DATA_DIR" --connect-timeout 5 \
  >"$OUT/stranger.log" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "^<3>.*authentication required" "$OUT/stranger.log" ||
  fail "a worker without the secret: exit $rc, $(grep '^<[0-3]>' "$OUT/stranger.log")"
"$LAUNCHER_BIN" status "127.0.0.1:$port" --secret-file "$secret" --json >"$OUT/status.json" 2>"$OUT/status.err" ||
  fail "pstrain status with the run's secret: $(cat "$OUT/status.err")"
[ "$(json_field "$OUT/status.json" registered)" = 2 ] || fail "status: $(cat "$OUT/status.json")"
rc=0; wait_pid "$job" 120 || rc=$?
[ "$rc" = 0 ] || fail "the job failed beside the strangers: $(tail -n 3 "$OUT/job.out")"
[ "$(json_field "$OUT/job.json" workers_lost)" = 0 ] && [ "$(json_field "$OUT/job.json" finished)" = True ] ||
  fail "the strangers cost the job: $(cat "$OUT/job.json")"
pass "pstrain local: secret of mode 600 in the run directory; an unauthenticated HELLO and a worker without it refused; status with it answers; the job finished, no worker lost"

# --insecure: no secret made, and a client without one is answered.
port=$(free_port)
"$LAUNCHER_BIN" local --insecure --workers 2 --epochs 1 --batch-size 64 --port "$port" \
  --delay-worker 0:3,1:3 --run-dir "$OUT/open" >"$OUT/open.out" 2>&1 &
job=$!
PIDS+=("$job")
wait_step "$OUT/open/metrics.jsonl" 20 60
[ ! -e "$OUT/open/secret" ] || fail "--insecure made a secret"
"$LAUNCHER_BIN" status "127.0.0.1:$port" --json >"$OUT/open-status.json" 2>"$OUT/open-status.err" ||
  fail "--insecure: status without a secret: $(cat "$OUT/open-status.err")"
wait_pid "$job" 120 || fail "the --insecure job failed: $(tail -n 3 "$OUT/open.out")"
pass "--insecure: no secret, and pstrain status answers without one"
echo "2 passed, 0 failed"
