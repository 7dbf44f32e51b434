#!/usr/bin/env bash
# Issue 12, item 2: mutual TLS between the ps and its workers (common/tls.h), with a throwaway
# PKI made by tools/tls_pki_tool (two CAs, "a" and "b"; the openssl command is not assumed).
#   (e) bad settings: a lone --tls-cert, a key that does not match, a certificate of another
#       CA, a missing file, --tls-name without TLS, half a setting in a config file: one line
#       each and exit 2; the settings work from a config file and the environment too, and
#       mutual TLS lets a ps listen off loopback without a secret or --insecure.
#   (a) a ps and 2 workers with mutual TLS train 1 sync epoch of mlp: accuracy and steps as
#       train_sync_test's, the ps's log names TLSv1.3 for each worker, and the weights'
#       checksum is the one a plain run with the same seed ends with.
#   (b) beside that run, workers whose certificates do not fit are refused (the ps refusing
#       a certificate of CA b, a worker refusing the ps's): both ends log the TLS reason,
#       the worker exits 2 (a configuration error), the run goes on unaffected;
#   (c) and a plaintext worker is refused: the ps logs that it does not speak TLS and tells
#       it so in a plaintext ERROR frame.
#   (d) a TLS worker against a plaintext ps fails with a clear line.
#   (f) the cluster secret's handshake runs inside TLS, with the ps and a worker taking the
#       secret and the TLS files from systemd's credential directory (as the units'
#       LoadCredential= gives them); `pstrain local --tls` trains.
source "$(dirname "$0")/lib.sh"
PKI_BIN="$RUNFILES/tools/tls_pki_tool"
pki="$OUT/pki"; mkdir -p "$pki"
"$PKI_BIN" "$pki" a >/dev/null && "$PKI_BIN" "$pki" b >/dev/null || fail "cannot make the test PKI"
cat "$pki/a-ca.pem" "$pki/b-ca.pem" >"$pki/ab-ca.pem"
PS_TLS=(--tls-cert "$pki/a-server.pem" --tls-key "$pki/a-server.key" --tls-ca "$pki/a-ca.pem")
WK_TLS=(--tls-cert "$pki/a-client.pem" --tls-key "$pki/a-client.key" --tls-ca "$pki/a-ca.pem")
# Workers that are refused load a tiny data set (they load it before connecting).
tiny="$OUT/tiny-data"; mkdir -p "$tiny"
/usr/bin/python3 - "$tiny" <<'PY'
import struct, sys
for split in ("train", "t10k"):
    open(f"{sys.argv[1]}/{split}-images-idx3-ubyte", "wb").write(struct.pack(">IIII", 0x803, 10, 28, 28) + bytes(7840))
    open(f"{sys.argv[1]}/{split}-labels-idx1-ubyte", "wb").write(struct.pack(">II", 0x801, 10) + bytes(range(10)))
PY

# ---- (e) bad settings ----
# usage_error NAME PATTERN CMD...: CMD exits 2 with one line at error level, matching PATTERN
# (lines at other levels, which some CPUs add, are not counted).
usage_error() {
  local name=$1 pattern=$2 rc=0; shift 2
  "$@" >"$OUT/$name.log" 2>&1 || rc=$?
  [ $rc -eq 2 ] || fail "$name: exit status $rc, not 2: $(head -c 300 "$OUT/$name.log")"
  [ "$(grep -c '^<[0-3]>' "$OUT/$name.log")" -eq 1 ] ||
    fail "$name: not one line at error level: $(cat "$OUT/$name.log")"
  grep -q -- "^<[0-3]>.*$pattern" "$OUT/$name.log" || fail "$name: no '$pattern' in: $(cat "$OUT/$name.log")"
}
port=$(free_port)
usage_error e-ps-lone-cert "tls-ca go together: --tls-key and --tls-ca are missing" \
  "$PS_BIN" --listen "127.0.0.1:$port" --tls-cert "$pki/a-server.pem"
usage_error e-wk-lone-cert "tls-ca go together: --tls-key and --tls-ca are missing" \
  "$WORKER_BIN" --ps "127.0.0.1:$port" --tls-cert "$pki/a-client.pem"
usage_error e-ps-bad-key "TLS key $pki/a-client.key does not match the certificate in $pki/a-server.pem" \
  "$PS_BIN" --listen "127.0.0.1:$port" --tls-cert "$pki/a-server.pem" --tls-key "$pki/a-client.key" \
  --tls-ca "$pki/a-ca.pem"
usage_error e-wk-bad-key "TLS key $pki/b-client.key does not match" \
  "$WORKER_BIN" --ps "127.0.0.1:$port" --tls-cert "$pki/a-client.pem" --tls-key "$pki/b-client.key" \
  --tls-ca "$pki/a-ca.pem"
usage_error e-ps-other-ca "TLS certificate $pki/b-server.pem is not signed by the CA in $pki/a-ca.pem" \
  "$PS_BIN" --listen "127.0.0.1:$port" --tls-cert "$pki/b-server.pem" --tls-key "$pki/b-server.key" \
  --tls-ca "$pki/a-ca.pem"
usage_error e-wk-no-ca "TLS CA $pki/nonexistent.pem: No such file" \
  "$WORKER_BIN" --ps "127.0.0.1:$port" --tls-cert "$pki/a-client.pem" --tls-key "$pki/a-client.key" \
  --tls-ca "$pki/nonexistent.pem"
usage_error e-wk-name "tls-name needs mutual TLS" "$WORKER_BIN" --ps "127.0.0.1:$port" --tls-name ps.example
printf 'tls-cert = %s\ntls-key = %s\n' "$pki/a-server.pem" "$pki/a-server.key" >"$OUT/ps.conf"
usage_error e-ps-conf "tls-ca go together: --tls-ca is missing" "$PS_BIN" --config "$OUT/ps.conf"
PSTRAIN_PS_TLS_CA="$pki/a-ca.pem" "$PS_BIN" --config "$OUT/ps.conf" --print-config >"$OUT/e-conf.txt" 2>&1 ||
  fail "config file + environment: $(cat "$OUT/e-conf.txt")"
grep -q "^tls-ca .*env: PSTRAIN_PS_TLS_CA" "$OUT/e-conf.txt" && grep -q "^tls-key .*file: " "$OUT/e-conf.txt" ||
  fail "the TLS settings from the file and the environment: $(grep tls "$OUT/e-conf.txt")"
# Off loopback, mutual TLS is enough (no secret, no --insecure): the ps starts and listens.
start_ps e-open --listen "0.0.0.0:$(free_port)" --workers 1 "${PS_TLS[@]}"
open_pid=$LAST_PID
wait_for "$OUT/e-open.log" "listening on 0.0.0.0" 20
grep -q "connections use mutual TLS 1.3" "$OUT/e-open.log" || fail "the ps did not say it uses TLS"
kill -TERM "$open_pid"; rc=0; wait_pid "$open_pid" 10 || rc=$?
[ $rc -eq 3 ] || fail "the ps on 0.0.0.0 with TLS exited $rc on SIGTERM"
pass "bad TLS settings: one line and exit 2 each; the config file and environment work; TLS lets a ps listen on 0.0.0.0"

# ---- (a) training over TLS, with (b) and (c) beside it ----
port=$(free_port)
start_ps ps --listen "127.0.0.1:$port" --mode sync --workers 2 --summary-json "$OUT/tls.json" \
  --model mlp --epochs 1 --seed 42 "${PS_TLS[@]}"
ps_pid=$LAST_PID
for i in 0 1; do start_worker "w$i" --ps "127.0.0.1:$port" --index "$i" "${WK_TLS[@]}"; W[$i]=$LAST_PID; done
wait_for "$OUT/ps.log" "all 2 workers registered" 60
# refused NAME STATUS PATTERN ARGS...: a worker against the training ps, its status and line.
refused() {
  local name=$1 want=$2 pattern=$3 rc=0; shift 3
  "$WORKER_BIN" --ps "127.0.0.1:$port" --data-dir "$tiny" --connect-timeout 10 "$@" \
    >"$OUT/$name.log" 2>&1 || rc=$?
  [ $rc -eq "$want" ] || fail "$name: exit status $rc, not $want: $(tail -2 "$OUT/$name.log")"
  grep -q "error: .*$pattern" "$OUT/$name.log" || fail "$name: no '$pattern': $(tail -2 "$OUT/$name.log")"
}
# (b) A certificate of CA b, the worker trusting both CAs: the ps refuses it.
refused b-ps-refuses 2 "TLS session failed: the peer refused the session" \
  --tls-cert "$pki/b-client.pem" --tls-key "$pki/b-client.key" --tls-ca "$pki/ab-ca.pem"
# A worker of CA b alone: it refuses the ps's certificate.
refused b-worker-refuses 2 "TLS handshake failed: the peer's certificate is not signed by our CA" \
  --tls-cert "$pki/b-client.pem" --tls-key "$pki/b-client.key" --tls-ca "$pki/b-ca.pem"
# The right CA, but the ps's certificate does not carry the name asked for.
refused b-name 2 "does not carry the expected name" "${WK_TLS[@]}" --tls-name ps.example
# (c) No TLS at all.
refused c-plain 1 "the ps refused this worker: this ps requires TLS"
for i in 0 1; do wait_pid "${W[$i]}" 120 || fail "TLS worker $i exited non-zero"; done
wait_pid "$ps_pid" 30 || fail "the TLS ps exited non-zero"
acc=$(json_field "$OUT/tls.json" test_accuracy)
at_least "$acc" 0.84 || fail "TLS: test accuracy $acc < 0.84"
[ "$(json_field "$OUT/tls.json" updates)" = "468" ] || fail "TLS: expected 468 sync steps"
[ "$(grep -c "registered from .* over TLSv1.3 TLS_" "$OUT/ps.log")" -eq 2 ] ||
  fail "the ps's log does not name TLSv1.3 for both workers"
grep -q "ps over TLSv1.3" "$OUT/w0.log" || fail "the worker's log does not name TLSv1.3"
for p in "TLS handshake failed: the peer's certificate is not signed by our CA" \
         "TLS handshake failed: the peer refused the session" \
         "TLS handshake failed: the peer does not speak TLS (it sent \"PSTR"; do
  grep -qF "$p" "$OUT/ps.log" || fail "the ps's log lacks: $p"
done
[ "$(json_field "$OUT/tls.json" workers_lost)" = "0" ] || fail "the refusals cost the run a worker"
pass "mutual TLS: test accuracy $acc, 468 steps; the ps refused a certificate of another CA, a worker refused the ps's, a plaintext worker was told TLS is required"

# The same job in plaintext ends with the same weights.
train sync 2 "$OUT/plain.json" --model mlp --epochs 1 --seed 42
c_tls=$(json_field "$OUT/tls.json" weights_checksum)
c_plain=$(json_field "$OUT/plain.json" weights_checksum)
[ "$c_tls" = "$c_plain" ] || fail "checksums differ: TLS $c_tls, plain $c_plain"
pass "same seed over TLS and in plaintext: weights checksum $c_tls both"

# ---- (d) a TLS worker against a plaintext ps ----
port=$(free_port)
start_ps plain-ps --listen "127.0.0.1:$port" --workers 1
plain_pid=$LAST_PID
rc=0; "$WORKER_BIN" --ps "127.0.0.1:$port" --data-dir "$tiny" --connect-timeout 10 "${WK_TLS[@]}" \
  >"$OUT/d-tls-worker.log" 2>&1 || rc=$?
[ $rc -eq 1 ] || fail "a TLS worker against a plaintext ps exited $rc"
grep -q "error: the ps at 127.0.0.1:$port: TLS handshake failed: the peer closed the connection during the handshake" \
  "$OUT/d-tls-worker.log" || fail "the TLS worker's line: $(tail -2 "$OUT/d-tls-worker.log")"
wait_for "$OUT/plain-ps.log" "a TLS handshake: the peer uses TLS, this end does not" 5
kill -TERM "$plain_pid"; wait_pid "$plain_pid" 10 || true
pass "a TLS worker against a plaintext ps: $(grep -o 'TLS handshake failed: [^(]*' "$OUT/d-tls-worker.log")"

# ---- (f) the cluster secret inside TLS, and pstrain local --tls ----
secret="$OUT/secret"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$secret"; chmod 600 "$secret"
# What LoadCredential= makes: one directory per unit, the files under their credential names.
for who in ps:server wk:client; do
  d="$OUT/creds-${who%%:*}"; mkdir -p "$d"
  cp "$secret" "$d/pstrain-secret"
  cp "$pki/a-${who#*:}.pem" "$d/pstrain-tls-cert"; cp "$pki/a-${who#*:}.key" "$d/pstrain-tls-key"
  cp "$pki/a-ca.pem" "$d/pstrain-tls-ca"
done
port=$(free_port)
start_bg ps-secret env CREDENTIALS_DIRECTORY="$OUT/creds-ps" "$PS_BIN" --status-interval 0 \
  --listen "127.0.0.1:$port" --workers 2 --epochs 1 --batch-size 4 --summary-json "$OUT/secret.json"
sp=$LAST_PID
refused f-no-secret 1 "authentication required" "${WK_TLS[@]}"
start_bg s0 env CREDENTIALS_DIRECTORY="$OUT/creds-wk" "$WORKER_BIN" --ps "127.0.0.1:$port" \
  --index 0 --data-dir "$tiny" --connect-timeout 20
S[0]=$LAST_PID
start_worker s1 --ps "127.0.0.1:$port" --index 1 --data-dir "$tiny" --secret-file "$secret" "${WK_TLS[@]}"
S[1]=$LAST_PID
for i in 0 1; do wait_pid "${S[$i]}" 60 || fail "worker $i with TLS and the secret exited non-zero"; done
wait_pid "$sp" 30 || fail "the ps with TLS and the secret exited non-zero"
[ "$(grep -c "registered from .* over TLSv1.3" "$OUT/ps-secret.log")" -eq 2 ] || fail "no TLS with the secret"
grep -q "mutual TLS 1.3: .*(systemd credentials)" "$OUT/ps-secret.log" && grep -q "cluster secret from .*creds-ps/pstrain-secret" "$OUT/ps-secret.log" ||
  fail "the ps did not take the TLS files and the secret from its credentials"
grep -q "mutual TLS 1.3: .*(systemd credentials)" "$OUT/s0.log" || fail "the worker did not take its TLS files from its credentials"
rc=0; "$LAUNCHER_BIN" local --tls --workers 2 --epochs 1 --batch-size 4 --data-dir "$tiny" \
  --run-dir "$OUT/local" >"$OUT/local.log" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "pstrain local --tls exited $rc: $(tail -3 "$OUT/local.log")"
[ "$(grep -c "over TLSv1.3" "$OUT/local/ps.log")" -eq 2 ] || fail "pstrain local --tls: no TLS in its ps log"
pass "the cluster secret's handshake inside TLS (a TLS worker without the secret refused), settings from systemd credentials; pstrain local --tls trains"
echo "5 passed, 0 failed"
