#!/usr/bin/env python3
"""A merged timeline (pstrain local --timeline FILE) as text: one typical step of a worker (the
step of median length), each event from the step's start with its length, the ps's events of
the same version beside them, then each kind of event's median length over all the steps.

usage: timeline_text.py FILE [WORKER]   (WORKER: the process name, default the first worker)"""
import collections
import json
import statistics
import sys

doc = json.load(open(sys.argv[1]))
names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
         if e["ph"] == "M" and e["name"] == "process_name"}
workers = sorted(n for n in names.values() if n.startswith("worker"))
want = sys.argv[2] if len(sys.argv) > 2 else workers[0]
wpid = next(p for p, n in names.items() if n == want)

events = []  # (pid, name, t0, t1, args)
open_b = {}
for e in doc["traceEvents"]:
    if e["ph"] == "X":
        events.append((e["pid"], e["name"], e["ts"], e["ts"] + e["dur"], e["args"]))
    elif e["ph"] == "b":
        open_b[(e["pid"], e["cat"], e["id"], e["name"])] = e
    elif e["ph"] == "e":
        b = open_b.pop((e["pid"], e["cat"], e["id"], e["name"]))
        events.append((e["pid"], e["name"], b["ts"], e["ts"], b["args"]))

steps = {a["step"]: (t0, t1) for p, n, t0, t1, a in events if p == wpid and n == "step"}
lengths = sorted((t1 - t0, s) for s, (t0, t1) in steps.items())
_, typical = lengths[len(lengths) // 2]
t0, t1 = steps[typical]
print("%s, step %d (one of %d kept): %.3f ms (median step %.3f ms; shortest %.3f, longest %.3f)" % (
    want, typical, len(steps), (t1 - t0) / 1e3, statistics.median(l for l, _ in lengths) / 1e3,
    lengths[0][0] / 1e3, lengths[-1][0] / 1e3))


def describe(a):
    parts = []
    if "index" in a and a.get("offset", -1) < 0:
        parts.append("layer %d" % a["index"])
    if "offset" in a:
        parts.append("floats [%d, +%d) v%d" % (a["offset"], a["floats"], a["version"]))
    return ", ".join(parts)


# The worker's events of that step, and the ps's of the version its push was computed on
# and the one its next pull brings.
version = next((a["version"] for p, n, _, _, a in events
                if p == wpid and n == "push chunk" and a["step"] == typical), None)
rows = []
for p, n, a0, a1, a in events:
    if p == wpid and a.get("step") == typical and n != "step":
        rows.append((a0, a1, names[p], n, a))
    elif p != wpid and names[p].startswith("ps") and version is not None and \
            a.get("version") in (version, version + 1) and t0 - 500 <= a0 <= t1 + 3000:
        rows.append((a0, a1, names[p], n, a))
for a0, a1, who, n, a in sorted(rows, key=lambda r: (r[0], -r[1])):
    print(("  +%8.3f ms  %7.3f ms  %-11s %-36s %s" % ((a0 - t0) / 1e3, (a1 - a0) / 1e3, who, n,
                                                     describe(a))).rstrip())

print("median length of each kind over the kept steps (ms, and events per step):")
kinds = collections.defaultdict(list)
for p, n, a0, a1, a in events:
    kinds[(names[p].split()[0] if names[p].startswith("ps") else "worker", n)].append(a1 - a0)
per = max(len(steps), 1)
for (who, n), ls in sorted(kinds.items(), key=lambda kv: -statistics.median(kv[1])):
    print("  %-6s %-40s %8.3f  x%.1f" % (who, n, statistics.median(ls) / 1e3, len(ls) / per /
                                         (len(workers) if who == "worker" else 1)))
