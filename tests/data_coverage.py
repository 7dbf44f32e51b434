#!/usr/bin/env python3
"""Checks, from a ps's metrics file (JSON lines), that the data handout of issue 28 trained
every sample of every epoch exactly once: the "data" records with what "trained" must cover
positions [0, SAMPLES) of each epoch's order without a gap or an overlap, and every range
handed out must end trained or returned. A "resumed" record (a sync ps resumed from the
checkpoint of that version) drops the ranges trained on that version or later, which the
checkpoint gave back. Prints one line per epoch and a JSON summary on the
last line; exits 1 on any violation.

usage: data_coverage.py METRICS SAMPLES EPOCHS"""
import json
import sys


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    path, samples, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    trained = {e: [] for e in range(1, epochs + 1)}
    handed = returned = 0
    out = {}  # (epoch, start) -> outstanding hand-outs
    workers = []
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("event") == "workers":
                workers.append(rec["workers"])
            if rec.get("event") != "data":
                continue
            key = (rec["epoch"], rec["start"])
            if rec["what"] == "resumed":
                # A ps resumed from the checkpoint of this version (sync): what was out went
                # back with it, and ranges trained on it or later are not in its weights.
                v = rec["version"]
                out = {}
                for e in trained:
                    trained[e] = [t for t in trained[e] if t[2] < v]
                continue
            if rec["what"] == "handed":
                handed += 1
                out[key] = out.get(key, 0) + 1
            elif rec["what"] in ("trained", "returned"):
                if out.get(key, 0) < 1:
                    print(f"epoch {key[0]}: range at {key[1]} {rec['what']} without being handed out")
                    return 1
                out[key] -= 1
                if rec["what"] == "returned":
                    returned += 1
                else:
                    if rec["epoch"] not in trained:
                        print(f"range of epoch {rec['epoch']} outside 1..{epochs}")
                        return 1
                    trained[rec["epoch"]].append((rec["start"], rec["start"] + rec["count"],
                                                  rec["version"]))
    bad = 0
    for e in range(1, epochs + 1):
        pos, dup, gaps = 0, 0, 0
        for a, b, _ in sorted(trained[e]):
            if a < pos:
                dup += min(b, pos) - a
            elif a > pos:
                gaps += a - pos
            pos = max(pos, b)
        gaps += max(0, samples - pos)
        print(f"epoch {e}: {len(trained[e])} ranges trained, {gaps} samples never trained, "
              f"{dup} trained more than once")
        bad += gaps + dup
    left = sum(v for v in out.values() if v > 0)
    if left:
        print(f"{left} ranges handed out and never trained or returned")
        bad += left
    print(json.dumps({"handed": handed, "returned": returned, "ok": bad == 0,
                      "most_workers": max(workers, default=0),
                      "workers": workers}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
