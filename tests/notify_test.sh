#!/usr/bin/env bash
# sd_notify (issue 6): a real ps and worker train the MLP for 2 epochs with NOTIFY_SOCKET
# pointing at a datagram socket of the test's own (tests/notify_listener.py, which records
# each message with its sender's pid, as systemd sees them, and the time it was sent) and
# WATCHDOG_USEC set, as under a unit with WatchdogSec=. For each daemon: one READY=1, then
# STATUS lines (the last epoch's among them), then one STOPPING=1, in that order; and
# WATCHDOG=1 from READY to STOPPING (while systemd's watchdog is armed), never further
# apart than the watchdog interval. The ps gets WATCHDOG_PID=its own pid (what systemd
# sets), the worker none (which libsystemd also accepts); and a ps whose WATCHDOG_PID names
# another process must not ping at all, yet still says READY and, on SIGTERM, STOPPING.
source "$(dirname "$0")/lib.sh"

LISTENER="$RUNFILES/tests/notify_listener.py"
WATCHDOG_USEC=400000          # pings every 200 ms; a gap over 400 ms would get a unit killed
SOCK="@pstrain-notify-test-$$"
MESSAGES="$OUT/notify.jsonl"

start_bg listener /usr/bin/python3 "$LISTENER" "$SOCK" "$MESSAGES" "$OUT/listener.ready"
for _ in $(seq 50); do [ -e "$OUT/listener.ready" ] && break; sleep 0.1; done
[ -e "$OUT/listener.ready" ] || fail "the notify listener did not start"

export NOTIFY_SOCKET="$SOCK" WATCHDOG_USEC
unset WATCHDOG_PID

# 1. A whole job. The ps is started through `exec` so that it can be given its own pid as
# WATCHDOG_PID before it runs, as systemd does.
port=$(free_port)
start_bg ps bash -c 'export WATCHDOG_PID=$$; exec "$@"' ps "$PS_BIN" --status-interval 0 \
  --listen "127.0.0.1:$port" --workers 1 --mode sync --model mlp --epochs 2 --seed 42
ps_pid=$LAST_PID
# Steps of at least 2 x 1 ms (--delay-ms): the job lasts 3.7 s or more on any CPU, for the
# pings counted below.
start_worker worker0 --ps "127.0.0.1:$port" --index 0 --delay-ms 1
worker_pid=$LAST_PID
wait_pid "$worker_pid" 120 || fail "worker exited non-zero"
wait_pid "$ps_pid" 30 || fail "ps exited non-zero"

# 2. WATCHDOG_PID naming another process (pid 1): the watchdog is not this ps's to feed.
port=$(free_port)
WATCHDOG_PID=1 start_ps ps-foreign-watchdog --listen "127.0.0.1:$port" --workers 1
foreign_pid=$LAST_PID
for _ in $(seq 100); do grep -q "\"pid\": $foreign_pid, \"msg\": \"READY=1\"" "$MESSAGES" && break; sleep 0.1; done
sleep 1                       # five ping periods in which no ping may come
kill -TERM "$foreign_pid"
# Stopped on request before training finished: status 3, which the units count as success.
rc=0; wait_pid "$foreign_pid" 10 || rc=$?
[ $rc -eq 3 ] || fail "ps (foreign WATCHDOG_PID) exited $rc on SIGTERM, not 3 (stopped)"
sleep 0.2                     # the last datagrams reach the listener

/usr/bin/python3 - "$MESSAGES" "$WATCHDOG_USEC" "$ps_pid" "$worker_pid" "$foreign_pid" <<'EOF' || fail "notify messages (in $MESSAGES)"
import json
import sys

path, usec = sys.argv[1], int(sys.argv[2])
ps_pid, worker_pid, foreign_pid = map(int, sys.argv[3:6])
interval = usec / 1e6
records = [json.loads(line) for line in open(path)]
problems = []


def check(name, pid, status_words, watchdog):
    msgs = [r for r in records if r["pid"] == pid]
    texts = [r["msg"] for r in msgs]
    if not msgs:
        problems.append(f"{name} (pid {pid}): no messages at all")
        return
    ready = [i for i, m in enumerate(texts) if m == "READY=1"]
    stopping = [i for i, m in enumerate(texts) if m == "STOPPING=1"]
    if len(ready) != 1 or len(stopping) != 1:
        problems.append(f"{name}: {len(ready)} READY=1 and {len(stopping)} STOPPING=1, expected one each")
        return
    r, s = ready[0], stopping[0]
    if r > s:
        problems.append(f"{name}: STOPPING=1 came before READY=1")
        return
    between = [m for m in texts[r:s] if m.startswith("STATUS=")]
    if status_words is None:
        pass  # stopped by a signal before anything changed: no STATUS is due in between
    elif not between:
        problems.append(f"{name}: no STATUS= line between READY=1 and STOPPING=1")
    elif status_words and not any(status_words in m for m in between):
        problems.append(f"{name}: no STATUS= line with '{status_words}' between READY=1 and "
                        f"STOPPING=1: {between}")
    if not watchdog:
        pings = sum(1 for m in texts if m == "WATCHDOG=1")
        if pings:
            problems.append(f"{name}: {pings} WATCHDOG=1 although WATCHDOG_PID named another "
                            f"process")
        summary = f"READY, {len(between)} STATUS, STOPPING, no WATCHDOG"
    else:
        # systemd arms the watchdog once start-up is complete (READY=1): from then on, until
        # STOPPING=1, no two pings (READY and STOPPING counting as the ends) may be further
        # apart than the interval. Before READY=1 only TimeoutStartSec= applies, and the
        # worker does spend most of a second there loading the data.
        pings = [m["t"] for m in msgs[r:s] if m["msg"] == "WATCHDOG=1"]
        times = [msgs[r]["t"]] + pings + [msgs[s]["t"]]
        gaps = [b - a for a, b in zip(times, times[1:])]
        worst = max(gaps) if gaps else float("inf")
        if len(pings) < 5:
            problems.append(f"{name}: only {len(pings)} WATCHDOG=1 between READY=1 and "
                            f"STOPPING=1")
        elif worst > interval:
            problems.append(f"{name}: WATCHDOG=1 pings {worst:.3f} s apart; systemd would have "
                            f"killed it after {interval:.3f} s")
        summary = (f"READY, {len(between)} STATUS, STOPPING; {len(pings)} WATCHDOG over "
                   f"{times[-1] - times[0]:.1f} s, longest gap {worst:.3f} s")
    print(f"{name}: {summary}")


unknown = sorted({r["pid"] for r in records} - {ps_pid, worker_pid, foreign_pid})
if unknown:
    problems.append(f"messages from unexpected senders {unknown}")
check("ps", ps_pid, "epoch 2/2 evaluated", True)
check("worker", worker_pid, "epoch 2/2 trained", True)
check("ps with a foreign WATCHDOG_PID", foreign_pid, None, False)
for p in problems:
    print("problem:", p, file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
pass "READY, STATUS, STOPPING in order and the watchdog fed (interval $((WATCHDOG_USEC / 1000)) ms)"
echo "1 passed, 0 failed"
