#!/usr/bin/env python3
"""Checks the per-rank Chrome-trace files SKIPRING_TRACE wrote: one valid JSON file per rank,
one "allreduce" event per collective, step events, and at least one "skip" instant event.

Usage: check_trace.py DIR NRANKS MIN_COLLECTIVES
"""
import json
import os
import sys


def main():
    d, nranks, min_colls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    skips = 0
    for r in range(nranks):
        path = os.path.join(d, f"skipring-trace-rank{r}.json")
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        colls = [e for e in events if e.get("name", "").startswith("allreduce seq=")]
        steps = [e for e in events if e.get("name", "").startswith(("RS step", "AG step"))]
        skips += sum(1 for e in events if e.get("name") == "skip")
        if len(colls) < min_colls:
            sys.exit(f"{path}: {len(colls)} collectives, expected >= {min_colls}")
        if not steps:
            sys.exit(f"{path}: no step events")
        for e in colls + steps:
            if e["ph"] != "X" or e["pid"] != r or e["dur"] < 0 or e["ts"] < 0:
                sys.exit(f"{path}: malformed event {e}")
    if skips == 0:
        sys.exit("no skip events in any rank's trace")
    print(f"traces ok: {nranks} ranks, {skips} skip events")


if __name__ == "__main__":
    main()
