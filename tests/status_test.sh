#!/usr/bin/env bash
# `pstrain status` (issue 15, item 2) against a running ps that has a cluster secret: the
# table shows every worker, --json is one parseable object with the cluster's and each
# worker's figures (agreeing with the ps's own /metrics for the job's settings), --watch
# refreshes, and without the secret, or with nothing listening, it says why in one line and
# exits 1.
source "$(dirname "$0")/lib.sh"
secret="$OUT/secret"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$secret"; chmod 600 "$secret"
port=$(free_port)
start_ps ps --listen "127.0.0.1:$port" --workers 2 --epochs 2 --model mlp --secret-file "$secret" \
  --summary-json "$OUT/summary.json"
ps_pid=$LAST_PID
wait_for "$OUT/ps.log" "listening on" 20
# Each step waits 2 x 6 ms besides its compute (--delay-ms): the job lasts at least 11 s on
# any CPU, longer than the asks below take.
start_worker w0 --ps "127.0.0.1:$port" --secret-file "$secret" --delay-ms 6
w0=$LAST_PID
start_worker w1 --ps "127.0.0.1:$port" --secret-file "$secret" --delay-ms 6
w1=$LAST_PID
wait_for "$OUT/ps.log" "all 2 workers registered" 30
sleep 0.5

"$LAUNCHER_BIN" status "127.0.0.1:$port" --secret-file "$secret" >"$OUT/table.txt" 2>"$OUT/table.err" \
  || fail "pstrain status failed: $(cat "$OUT/table.err")"
cat "$OUT/table.txt"
grep -qE "^ps 127.0.0.1:$port: sync, adam lr 0.001; version [0-9]+; 2/2 workers registered" "$OUT/table.txt" \
  || fail "no cluster line"
[ "$(grep -cE '^[01] +[^ ]+ +training ' "$OUT/table.txt")" = 2 ] || fail "not 2 training workers in the table"
grep -qE "last seen step waits$" "$OUT/table.txt" || fail "no 'step waits' column"
pass "the table shows the cluster and both workers"

# Without the secret: the ps says nothing, and the command says why in one line.
rc=0
"$LAUNCHER_BIN" status "127.0.0.1:$port" --timeout 2 >"$OUT/nosecret.out" 2>"$OUT/nosecret.err" || rc=$?
[ "$rc" = 1 ] || fail "without the secret: exit $rc"
[ ! -s "$OUT/nosecret.out" ] && [ "$(wc -l <"$OUT/nosecret.err")" = 1 ] \
  && grep -q "the ps refused: authentication required" "$OUT/nosecret.err" \
  || fail "without the secret: $(cat "$OUT/nosecret.out" "$OUT/nosecret.err")"
pass "without the secret: exit 1, '$(cat "$OUT/nosecret.err")'"

"$LAUNCHER_BIN" status --ps "127.0.0.1:$port" --secret-file "$secret" --json >"$OUT/status.json" \
  || fail "pstrain status --json failed"
/usr/bin/python3 - "$OUT/status.json" <<'PY' || fail "bad JSON"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["mode"] == "sync" and s["workers"] == 2 and s["registered"] == 2, s
assert s["optimizer"] == "adam" and s["learning_rate"] == 0.001 and s["epochs"] == 2, s
assert s["version"] > 0 and 0 < s["progress"] < 1, s
slots = s["worker_slots"]
assert [w["index"] for w in slots] == [0, 1], slots
for w in slots:
    assert w["connected"] and w["state"] == "training" and w["pushes"] > 0, w
    assert 0 <= w["last_seen_seconds"] < 5, w
    assert isinstance(w["waited_for"], bool), w
# sync: every applied gradient is one worker's share of a version
assert s["gradients_applied"] == sum(w["pushes"] for w in slots), s
print(f"version {s['version']}, progress {s['progress']:.3f}, ETA {s['eta_seconds']:.1f}s")
PY
pass "--json: one object with the cluster's and each worker's figures"

timeout 3 "$LAUNCHER_BIN" status "127.0.0.1:$port" --secret-file "$secret" --json --watch 0.5 \
  >"$OUT/watch.jsonl" 2>"$OUT/watch.err" || true
/usr/bin/python3 - "$OUT/watch.jsonl" <<'PY' || fail "--watch: $(head -c 300 "$OUT/watch.jsonl")"
import json, sys
v = [json.loads(l)["version"] for l in open(sys.argv[1])]
assert len(v) >= 3 and v == sorted(v) and v[-1] > v[0], v
print(f"{len(v)} refreshes, versions {v}")
PY
pass "--watch refreshes"

wait_pid "$w0" 120 || fail "worker 0 failed"
wait_pid "$w1" 120 || fail "worker 1 failed"
wait_pid "$ps_pid" 30 || fail "ps failed"

# Nothing listening (the ps has exited): one line, exit 1.
rc=0
"$LAUNCHER_BIN" status "127.0.0.1:$port" --timeout 1 >"$OUT/gone.out" 2>"$OUT/gone.err" || rc=$?
[ "$rc" = 1 ] && [ "$(wc -l <"$OUT/gone.err")" = 1 ] && [ ! -s "$OUT/gone.out" ] \
  || fail "nothing listening: exit $rc, $(cat "$OUT/gone.err")"
grep -q "connection refused" "$OUT/gone.err" || fail "nothing listening: $(cat "$OUT/gone.err")"
pass "nothing listening: exit 1, '$(cat "$OUT/gone.err")'"

# A ps with mutual TLS answers with the worker's TLS flags (PKI by tools/tls_pki_tool), and
# a plain-TCP ask gets one line and exit 1.
pki="$OUT/pki"; mkdir -p "$pki"
"$RUNFILES/tools/tls_pki_tool" "$pki" a >/dev/null || fail "cannot make the test PKI"
tport=$(free_port)
start_ps tls-ps --listen "127.0.0.1:$tport" --workers 1 \
  --tls-cert "$pki/a-server.pem" --tls-key "$pki/a-server.key" --tls-ca "$pki/a-ca.pem"
tls_pid=$LAST_PID
wait_for "$OUT/tls-ps.log" "listening on" 20
"$LAUNCHER_BIN" status "127.0.0.1:$tport" --json --tls-cert "$pki/a-client.pem" \
  --tls-key "$pki/a-client.key" --tls-ca "$pki/a-ca.pem" >"$OUT/tls.json" 2>"$OUT/tls.err" \
  || fail "status over TLS: $(cat "$OUT/tls.err")"
[ "$(json_field "$OUT/tls.json" registered)" = 0 ] && [ "$(json_field "$OUT/tls.json" workers)" = 1 ] \
  || fail "status over TLS: $(cat "$OUT/tls.json")"
rc=0
"$LAUNCHER_BIN" status "127.0.0.1:$tport" --timeout 2 >/dev/null 2>"$OUT/notls.err" || rc=$?
[ "$rc" = 1 ] && [ "$(wc -l <"$OUT/notls.err")" = 1 ] || fail "plain TCP to a TLS ps: exit $rc, $(cat "$OUT/notls.err")"
kill -TERM "$tls_pid"
wait_pid "$tls_pid" 20 || true
pass "over mutual TLS: answered with the TLS flags; without them: exit 1, '$(cat "$OUT/notls.err")'"
echo "6 passed, 0 failed"
