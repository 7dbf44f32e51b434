#!/usr/bin/env bash
# Issue 12: only the cluster may train. With a cluster secret every connection proves it
# holds it before anything else is read; without it, or with the wrong one, or replaying a
# recorded handshake, nothing leaves the ps (no status, no weights). Off the loopback
# interface a ps without a secret refuses to start unless --insecure. Idle, half-sent and
# flooding connections are bounded: --hello-timeout, --max-connections (the oldest
# unregistered connection goes first, so real workers always get in), rate-limited logs, and
# a ps whose memory stays small under 4000 connections and comes back after them.
source "$(dirname "$0")/lib.sh"
secret="$OUT/secret"; other="$OUT/other"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$secret"; chmod 600 "$secret"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$other"; chmod 600 "$other"
port=$(free_port)
start_ps ps --listen "127.0.0.1:$port" --workers 2 --summary-json "$OUT/s.json" --model mlp \
  --epochs 1 --batch-size 128 --secret-file "$secret" --hello-timeout 1
ps_pid=$LAST_PID
wait_for "$OUT/ps.log" "listening on" 20

# 1. Strangers: no handshake, the wrong secret, a replayed handshake, a slowloris.
/usr/bin/python3 - "$port" "$secret" <<'PY' || fail "a stranger got something from the ps"
import hashlib, hmac, os, socket, struct, sys, time
port, key = int(sys.argv[1]), hashlib.blake2b(open(sys.argv[2], "rb").read().strip(), digest_size=32).digest()
def conn():
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    return s
def recv_all(s, n):
    b = b""
    while len(b) < n:
        try:
            c = s.recv(n - len(b))
        except ConnectionResetError:
            break          # a hard close: nothing more comes
        if not c: break
        b += c
    return b
def frame(header): return b"PSTR" + struct.pack("<HHII", 1, 0, len(header), 0) + header
def mac(label, a, b): return hmac.new(key, label + b"\0" + a + b, hashlib.sha256).digest()
# No handshake: a STATUS request gets an ERROR frame saying why, then EOF; never a Status.
s = conn(); s.sendall(frame(b"\x08\x08") * 2); got = recv_all(s, 4096); s.close()
assert b"authentication required" in got and got[:4] == b"PSTR" and b"\x08\x09" not in got[:40], got[:80]
# A good handshake, recorded.
s = conn(); nw = os.urandom(32); s.sendall(b"PSTA" + nw)
ch = recv_all(s, 64); npx, proof_ps = ch[:32], ch[32:]
assert hmac.compare_digest(proof_ps, mac(b"pstrain ps", nw, npx)), "the ps's proof is wrong"
good = mac(b"pstrain worker", npx, nw)
s.sendall(good + frame(b"\x08\x08")); st = recv_all(s, 16); s.close()
assert st[:4] == b"PSTR", "an authenticated STATUS request got no frame"
# Replayed: the same hello and proof on a new connection, whose challenge differs.
s = conn(); s.sendall(b"PSTA" + nw); ch2 = recv_all(s, 64)
assert ch2[:32] != npx, "the ps reused its nonce"
s.sendall(good + frame(b"\x08\x08")); rest = recv_all(s, 4096); s.close()
assert rest == b"", f"a replayed handshake got {rest[:40]!r}"
# The wrong secret.
bad = hashlib.blake2b(b"not the secret at all", digest_size=32).digest()
s = conn(); nw = os.urandom(32); s.sendall(b"PSTA" + nw); ch = recv_all(s, 64)
s.sendall(hmac.new(bad, b"pstrain worker\0" + ch[:32] + nw, hashlib.sha256).digest() + frame(b"\x08\x08"))
assert recv_all(s, 4096) == b"", "a wrong proof got an answer"; s.close()
# Slowloris: half a hello, then silence: closed after --hello-timeout (1 s).
s = conn(); s.sendall(b"PSTA" + b"\0" * 5); t0 = time.time()
assert recv_all(s, 1) == b"" and time.time() - t0 < 4, "a half-sent hello was not closed"
print("strangers refused")
PY
# A worker with the wrong secret and one without: one line each, exit 1.
rc=0; "$WORKER_BIN" --ps "127.0.0.1:$port" --secret-file "$other" --connect-timeout 5 \
  >"$OUT/wrong.log" 2>&1 || rc=$?
[ $rc -eq 1 ] && grep -q "it does not hold this cluster secret\|during authentication" "$OUT/wrong.log" \
  || fail "a worker with the wrong secret: rc $rc: $(tail -1 "$OUT/wrong.log")"
rc=0; "$WORKER_BIN" --ps "127.0.0.1:$port" --connect-timeout 5 >"$OUT/none.log" 2>&1 || rc=$?
[ $rc -eq 1 ] && grep -q "authentication required" "$OUT/none.log" \
  || fail "a worker without the secret: rc $rc: $(tail -1 "$OUT/none.log")"
# 2. The cluster trains.
for i in 0 1; do start_worker "w$i" --ps "127.0.0.1:$port" --index "$i" --secret-file "$secret"; W[$i]=$LAST_PID; done
for i in 0 1; do wait_pid "${W[$i]}" 120 || fail "worker $i with the secret exited non-zero"; done
wait_pid "$ps_pid" 30 || fail "the ps exited non-zero"
at_least "$(json_field "$OUT/s.json" test_accuracy)" 0.80 || fail "training suffered"
grep -q "replayed handshake" "$OUT/ps.log" || fail "the ps did not log the failed authentications"
pass "no secret, a wrong one, a replayed handshake and a slowloris were refused; the cluster trained"

# 3. Off loopback: no secret is an error unless --insecure (checked without training: the
# addresses are this host's own, 0.0.0.0).
rc=0; "$PS_BIN" --listen "0.0.0.0:$(free_port)" --workers 1 >"$OUT/open.log" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "reachable from other hosts" "$OUT/open.log" || fail "0.0.0.0 without a secret: rc $rc"
pass "$(grep -o 'error: .*' "$OUT/open.log" | cut -c1-120)..."

# 4. 1100 idle connections under a descriptor limit of 1024 (soft and hard): real workers
# still register, and the pressure is logged, rate-limited.
cat >"$OUT/flood.py" <<'PY'
import resource, socket, sys, time
port, n, waves, hold = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 64), hard))
for w in range(waves):
    socks = []
    for i in range(n):
        s = socket.socket(); s.setblocking(False); s.connect_ex(("127.0.0.1", port)); socks.append(s)
        if i % 100 == 99: time.sleep(0.01)
    time.sleep(hold)
    for s in socks: s.close()
print(len(socks), "connections per wave")
PY
port=$(free_port)
start_bg ps2 bash -c "ulimit -Sn 1024; ulimit -Hn 1024; exec \"$PS_BIN\" --status-interval 0 \
  --listen 127.0.0.1:$port --workers 2 --summary-json $OUT/s2.json --model mlp --epochs 1 \
  --batch-size 128 --secret-file $secret --hello-timeout 30"
ps2=$LAST_PID
wait_for "$OUT/ps2.log" "listening on" 20
start_bg flood1 /usr/bin/python3 "$OUT/flood.py" "$port" 1100 1 4
flood=$LAST_PID
sleep 1.5
for i in 0 1; do start_worker "v$i" --ps "127.0.0.1:$port" --index "$i" --secret-file "$secret"; V[$i]=$LAST_PID; done
for i in 0 1; do wait_pid "${V[$i]}" 120 || fail "worker $i exited non-zero beside 1100 idle connections"; done
wait_pid "$ps2" 30 || fail "the crowded ps exited non-zero"
wait_pid "$flood" 30 || true
grep -q "max-connections 256" "$OUT/ps2.log" || fail "the pressure was not logged"
lines=$(grep -c "max-connections\|suppressed" "$OUT/ps2.log" || true)
[ "$lines" -le 30 ] || fail "$lines log lines about 1100 connections: not rate-limited"
pass "1100 idle connections under 1024 descriptors: both workers registered and trained; $lines log lines"

# 5. 4000 unauthenticated connections in waves of 1000: the ps's peak memory stays under
# 64 MiB and its resident memory comes back afterwards (a ps waiting for its workers).
port=$(free_port)
start_ps ps3 --listen "127.0.0.1:$port" --workers 1 --model mlp --secret-file "$secret"
ps3=$LAST_PID
wait_for "$OUT/ps3.log" "listening on" 20
rss_before=$(awk '/VmRSS/ {print int($2/1024)}' "/proc/$ps3/status")
/usr/bin/python3 "$OUT/flood.py" "$port" 1000 4 1 >"$OUT/flood2.log" 2>&1 || fail "the flood failed: $(cat "$OUT/flood2.log")"
sleep 0.5
hwm=$(awk '/VmHWM/ {print int($2/1024)}' "/proc/$ps3/status")
rss_after=$(awk '/VmRSS/ {print int($2/1024)}' "/proc/$ps3/status")
kill -TERM "$ps3"
rc=0; wait_pid "$ps3" 10 || rc=$?
[ $rc -eq 3 ] || fail "the flooded ps exited $rc on SIGTERM"
[ "$hwm" -le 64 ] || fail "peak memory $hwm MiB under 4000 connections (bound 64 MiB)"
[ "$rss_after" -le $((rss_before + 4)) ] || fail "memory did not come back: $rss_before -> $rss_after MiB"
pass "4000 unauthenticated connections: peak $hwm MiB (bound 64), RSS $rss_before -> $rss_after MiB"
echo "5 passed, 0 failed"
