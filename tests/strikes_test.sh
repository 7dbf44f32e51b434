#!/usr/bin/env bash
# Issue 43, item 3: strikes belong to the connection, not the slot. A registered peer
# (tests/peer.py) on slot 0 sends three training reports of 10 correct in 5 samples: rejected,
# and the third closes it. Two more peers take the same slot in turn: each is still served
# after its first and second rejected report (a pull answered), and closed at its own third. Stopped with
# SIGTERM, the ps's summary counts 9 rejections for the job and for slot 0
# (rejected_per_slot), none for slot 1.
source "$(dirname "$0")/lib.sh"
PEER_DIR="$RUNFILES/tests"
port=$(free_port)
start_ps ps --listen "127.0.0.1:$port" --workers 2 --model mlp --epochs 1 --seed 3 \
  --worker-timeout 20 --rejoin-timeout 60 --summary-json "$OUT/s.json"
ps_pid=$LAST_PID
wait_for "$OUT/ps.log" "listening on" 20
cat >"$OUT/striker.py" <<'PY'
import sys
from peer import Peer
port = int(sys.argv[1])
# Slot 1 is held by a quiet peer so that training starts and slot 0 is a member.
quiet = Peer(port)
assert quiet.hello("quiet", 1) is not None
for k in range(3):
    p = Peer(port)
    assert p.hello("striker%d" % k, 0) is not None, "peer %d refused" % k
    v = p.welcome["start_step"]
    p.report(1, 10, 5, 0.1, is_eval=False)
    assert p.pull(v) == v, "peer %d was closed at its first rejected report" % k
    p.report(1, 10, 5, 0.1, is_eval=False)
    assert p.pull(v) == v, "peer %d was closed at its second rejected report" % k
    p.closed_by(lambda: p.report(1, 10, 5, 0.1, is_eval=False), "a third rejected report")
    print("peer %d struck out at its third" % k, flush=True)
print("ok", flush=True)
quiet.close()
PY
PYTHONPATH="$PEER_DIR" /usr/bin/python3 "$OUT/striker.py" "$port" >"$OUT/striker.log" 2>&1 ||
  { cat "$OUT/striker.log"; fail "the peers' checks failed"; }
kill -TERM "$ps_pid"
rc=0
wait_pid "$ps_pid" 30 || rc=$?
[ -f "$OUT/s.json" ] || fail "no summary (the ps exited $rc)"
read -r total slot0 slot1 < <(/usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(d["rejected"], d["rejected_per_slot"][0], d["rejected_per_slot"][1])' "$OUT/s.json")
[ "$total" -eq 9 ] || fail "the job counted $total rejections, not 9"
[ "$slot0" -eq 9 ] && [ "$slot1" -eq 0 ] || fail "per slot: $slot0 and $slot1, not 9 and 0"
pass "three peers on slot 0, each closed at its own third rejected report; the slot's total 9"
echo "1 passed, 0 failed"
