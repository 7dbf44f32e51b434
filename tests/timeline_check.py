"""Checks a merged timeline (pstrain local --timeline, issue 41) with a JSON reader: nesting
(each layer's forward and backward inside its step and its compute span; push and pull chunks
inside their step's window), order (forward layers first to last, then backward last to
first; pushes last chunk first when layer by layer), and the ps's events of each chunk after
the worker sent it, given each process's measured clock offset and its uncertainty.

With AHEAD 1 (one sync null worker, one shard, mlp in pieces: worker/step.c's wk_pull_ahead),
also that the next step's PULL goes out while the step before still computes: in most steps,
step s+1's window (which begins with its PULL) begins before step s's compute span ends, and
its weights' first chunk is sent by the ps before step s's push is all in.

usage: timeline_check.py MERGED.json WORKERS SHARDS LAYERED(0/1) [AHEAD(0/1)] -> prints a
summary line."""
import collections
import json
import sys

path, n_workers, n_shards, layered = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
ahead = len(sys.argv) > 5 and sys.argv[5] == "1"
doc = json.load(open(path))
meta = doc["metadata"]
assert meta["pstrain_timeline_merged"] == 1, meta
assert not meta["missing"], meta["missing"]
procs = {p["process"]: p for p in meta["processes"]}
assert len(procs) == n_workers + n_shards, procs
unc = {}  # pid -> microseconds
names = {}
for e in doc["traceEvents"]:
    if e["ph"] == "M" and e["name"] == "process_name":
        names[e["pid"]] = e["args"]["name"]
for pid, name in names.items():
    unc[pid] = procs[name]["uncertainty_us"]
    assert 0 <= unc[pid] < 50000, (name, procs[name])  # local clock probes' brackets
    # One host, one CLOCK_MONOTONIC: the true offset is 0, so a measurement that is right
    # puts 0 inside its bracket.
    assert abs(procs[name]["shift_us"]) <= unc[pid] + 0.002, ("offset outside its bracket", procs[name])
workers = [p for p, n in names.items() if n.startswith("worker")]
shards = [p for p, n in names.items() if n.startswith("ps shard")]
assert len(workers) == n_workers and len(shards) == n_shards, names

# Async pairs: b and e of one (pid, cat, id, name) in order.
spans = collections.defaultdict(list)  # (pid, name) -> [(t0, t1, args)]
open_b = {}
for e in doc["traceEvents"]:
    key = (e.get("pid"), e.get("cat"), e.get("id"), e.get("name"))
    if e["ph"] == "X":
        spans[(e["pid"], e["name"])].append((e["ts"], e["ts"] + e["dur"], e["args"], e["tid"]))
    elif e["ph"] == "b":
        assert key not in open_b, ("overlapping async spans of one id", key)
        open_b[key] = e
    elif e["ph"] == "e":
        b = open_b.pop(key)
        assert e["ts"] >= b["ts"], (b, e)
        spans[(e["pid"], e["name"])].append((b["ts"], e["ts"], b["args"], None))
assert not open_b, list(open_b)[:3]

EPS = 0.002  # microseconds: the file's rounding
checked = collections.Counter()
for w in workers:
    steps = {a["step"]: (t0, t1) for t0, t1, a, _ in spans[(w, "step")]}
    assert len(steps) >= 5, (names[w], sorted(steps))
    compute = {a["step"]: (t0, t1, tid) for t0, t1, a, tid in spans[(w, "compute")]}
    layers = collections.defaultdict(list)  # step -> [(t0, t1, direction, index)]
    for (pid, name), lst in spans.items():
        if pid != w or not (name.startswith("forward ") or name.startswith("backward ")):
            continue
        for t0, t1, a, tid in lst:
            s = a["step"]
            layers[s].append((t0, t1, name.split()[0], a["index"]))
            if s in steps:
                lo, hi = steps[s]
                assert lo - EPS <= t0 <= t1 <= hi + EPS, (names[w], name, s, (t0, t1), (lo, hi))
                checked["layer inside its step"] += 1
            if s in compute:
                lo, hi, ctid = compute[s]
                assert ctid == tid and lo - EPS <= t0 <= t1 <= hi + EPS, (name, s)
                checked["layer inside its compute span"] += 1
    for s, lst in layers.items():
        lst.sort()
        seq = [(d, i) for _, _, d, i in lst]
        fwd = [i for d, i in seq if d == "forward"]
        bwd = [i for d, i in seq if d == "backward"]
        assert fwd == sorted(fwd) and bwd == sorted(bwd, reverse=True), (s, seq)
        assert seq[: len(fwd)] == [("forward", i) for i in fwd], ("backward before forward", s, seq)
        for a_, b_ in zip(lst, lst[1:]):
            assert a_[1] <= b_[0] + EPS, ("layers overlap", s, a_, b_)
        checked["steps with layers in order"] += 1
    for kind in ("push chunk", "pull chunk"):
        by_step = collections.defaultdict(list)
        for t0, t1, a, _ in spans[(w, kind)]:
            s = a["step"]
            by_step[s].append((t0, a.get("index", -1)))
            if s in steps:
                lo, hi = steps[s]
                assert lo - EPS <= t0 <= t1 <= hi + EPS, (names[w], kind, s, (t0, t1), (lo, hi))
                checked[kind + " inside its step"] += 1
        if kind == "push chunk" and layered and n_shards == 1:
            # Layer by layer, the chunks leave from the top down in ascending runs (ps/net/
            # push_order.h): each run begins below the runs before it and goes up to the
            # lowest of them (chunks of one write share their times: the lower index is the
            # earlier in the write).
            for s, lst in by_step.items():
                order = [i for _, i in sorted(lst, key=lambda x: (x[0], x[1]))]
                hi = end = nxt = max(order) + 1
                for c in order:
                    if nxt < end:
                        assert c == nxt, (names[w], s, order, "run left before its end")
                    else:
                        assert c < hi, (names[w], s, order, "run begins too high")
                        end, hi = hi, c
                    nxt = c + 1
                assert sorted(order) == list(range(len(order))), (names[w], s, order)
                checked["pushes last chunk first"] += 1
    # Steps follow each other: step s+1's window begins after step s's began.
    ks = sorted(steps)
    for a_, b_ in zip(ks, ks[1:]):
        assert steps[a_][0] < steps[b_][0], (a_, b_)
    if ahead:
        pairs = [s for s in compute if s + 1 in steps]
        early = [s for s in pairs if steps[s + 1][0] < compute[s][1]]
        assert len(pairs) >= 5 and 2 * len(early) >= len(pairs), (
            "the next PULL did not go out during the step before", len(early), len(pairs))
        checked["next pull during the step before"] += len(early)

# The ps: each chunk's shares queued after some worker queued it on its side, each share
# after a distinct push (matched in time order), the optimizer after the last share came, and
# the next version's reply chunk sent after the optimizer finished it.
for p in shards:
    shard = int(names[p].split()[-1])
    pushes = collections.defaultdict(list)  # (version, offset) -> [t0 at the worker]
    for w in workers:
        for t0, t1, a, _ in spans[(w, "push chunk")]:
            pushes[(a["version"], a["offset"])].append(t0 - unc[w])
    # Chunks of several shards share offsets: a worker's pushes carry no shard, so only a
    # single shard's events are matched one to one.
    queued = collections.defaultdict(list)
    for t0, t1, a, _ in spans[(p, "queued")]:
        queued[(a["version"], a["offset"])].append((t0, t1))
    opt = {}
    for name in ("optimizer", "sum + optimizer"):
        for t0, t1, a, _ in spans[(p, name)]:
            key = (a["version"], a["offset"])
            assert key not in opt, ("two optimizer passes of one chunk", key)
            opt[key] = (t0, t1)
    assert queued and opt, names[p]
    for key, q in queued.items():
        assert len(q) <= n_workers, (key, q)
        if n_shards == 1 and key in pushes and len(pushes[key]) == len(q):
            for (qt0, _), pt0 in zip(sorted(q), sorted(pushes[key])):
                assert qt0 + unc[p] + EPS >= pt0, ("ps took a chunk before it was sent", key, qt0, pt0)
                checked["ps share after its push"] += 1
        if key in opt and len(q) == n_workers:
            assert opt[key][0] + EPS >= max(t1 for _, t1 in q), ("optimizer before the last share", key)
            checked["optimizer after the last share"] += 1
    if ahead:
        last_in = collections.defaultdict(float)  # version -> the last share queued
        for (v, _), q in queued.items():
            last_in[v] = max([last_in[v]] + [t1 for _, t1 in q])
        first_out = {}
        for t0, t1, a, _ in spans[(p, "send")]:
            first_out[a["version"]] = min(t0, first_out.get(a["version"], t0))
        vs = [v for v in last_in if v + 1 in first_out]
        overlap = [v for v in vs if first_out[v + 1] < last_in[v]]
        assert len(vs) >= 5 and 2 * len(overlap) >= len(vs), (
            "the reply did not begin while the push still came", len(overlap), len(vs))
        checked["reply begun before the push was in"] += len(overlap)
    for t0, t1, a, _ in spans[(p, "send")]:
        prev = (a["version"] - 1, a["offset"])
        if prev in opt:
            assert t0 + EPS >= opt[prev][1], ("reply chunk sent before its optimizer pass ended", prev)
            checked["reply after its optimizer pass"] += 1
for k in ("layer inside its step", "layer inside its compute span", "steps with layers in order",
          "push chunk inside its step", "pull chunk inside its step", "optimizer after the last share",
          "reply after its optimizer pass"):
    assert checked[k] > 0, (k, checked)
if n_shards == 1:
    assert checked["ps share after its push"] > 0, checked
print(", ".join("%s: %d" % kv for kv in sorted(checked.items())))
