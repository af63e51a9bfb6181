#!/usr/bin/env python3
"""Summarise and cross-check the per-rank message logs of SKIPRING_MSGLOG.

Usage:
  scripts/msglog_summary.py DIR                       one line per collective
  scripts/msglog_summary.py DIR --check               also cross-check the logs (exit 1 if not)
  scripts/msglog_summary.py DIR --collective K --rank R [--bin-ms 10] [--min-bytes 65536]
                                                      rank R's links in collective K, over time

DIR holds skipring-msglog-rank<R>.tsv, one per rank (SKIPRING_MSGLOG=DIR under mpirun). Lines:
kind t_post t_done engine peer tag bytes (runtime docs: straggler/msglog.h). Collective K is the
K-th (from 0) begun on its engine; the same K on every rank is the same call as long as every
rank creates its communicators in the same order (which MPI requires for the collectives that
create them).

The summary gives per collective: the arrival skew (last begin minus first begin), the time
from the last begin to the last end ("after last arrival", as skipring_bench reports it), and
per rank the messages and MiB sent and received. --check asserts, for every collective, that
every message some rank sent was received by its peer with the same tag and size and nothing
else was received (receives with an unknown peer match on tag and size alone), that no
message completed before it was posted or outside its collective, and that every begun
collective ended. --collective/--rank prints, per peer, how many bytes of messages of at
least --min-bytes completed in each --bin-ms window from that rank's begin: which links were
busy when.
"""
import argparse
import collections
import glob
import os
import re
import sys


class LogError(Exception):
    pass


def read_rank(path):
    """Returns [(engine, ordinal, begin, end, failed, [messages])] of one rank's log."""
    colls = []
    open_by_engine = {}
    ordinals = collections.Counter()
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.startswith("#") or line.startswith("kind"):
                continue
            parts = line.split("\t")
            if len(parts) != 7:
                raise LogError(f"{path}:{n}: expected 7 tab-separated fields, got {len(parts)}")
            kind = parts[0]
            t_post, t_done = float(parts[1]), float(parts[2])
            engine, peer, tag, size = (int(x) for x in parts[3:])
            if kind == "B":
                if engine in open_by_engine:
                    raise LogError(f"{path}:{n}: collective begun on engine {engine} "
                                   "while another is open")
                c = {"engine": engine, "ordinal": ordinals[engine], "begin": t_done,
                     "end": None, "failed": False, "msgs": []}
                ordinals[engine] += 1
                open_by_engine[engine] = c
                colls.append(c)
            elif kind == "E":
                c = open_by_engine.pop(engine, None)
                if c is None:
                    raise LogError(f"{path}:{n}: end on engine {engine} without a begin")
                c["end"] = t_done
                c["failed"] = size != 0
            elif kind in ("S", "R"):
                c = open_by_engine.get(engine)
                if c is None:
                    raise LogError(f"{path}:{n}: message outside a collective on engine {engine}")
                c["msgs"].append((kind, t_post, t_done, peer, tag, size))
            else:
                raise LogError(f"{path}:{n}: unknown kind {kind!r}")
    return colls


def load(directory):
    files = glob.glob(os.path.join(directory, "skipring-msglog-rank*.tsv"))
    if not files:
        raise LogError(f"no skipring-msglog-rank*.tsv in {directory}")
    ranks = {}
    for path in files:
        m = re.search(r"rank(\d+)\.tsv$", path)
        ranks[int(m.group(1))] = read_rank(path)
    return ranks


def by_call(ranks):
    """{(engine, ordinal): {rank: collective}}"""
    calls = collections.defaultdict(dict)
    for rank, colls in ranks.items():
        for c in colls:
            calls[(c["engine"], c["ordinal"])][rank] = c
    return calls


def check(ranks):
    """List of problems (empty: consistent)."""
    problems = []
    for key, per_rank in sorted(by_call(ranks).items()):
        name = f"collective {key[1]} on engine {key[0]}"
        if set(per_rank) != set(ranks):
            problems.append(f"{name}: logged by ranks {sorted(per_rank)} of {sorted(ranks)}")
        sent = collections.Counter()
        received = collections.Counter()
        unknown = collections.Counter()
        for rank, c in per_rank.items():
            if c["end"] is None:
                problems.append(f"{name}: rank {rank} never ended it")
            for kind, t_post, t_done, peer, tag, size in c["msgs"]:
                if t_done < t_post:
                    problems.append(f"{name}: rank {rank}: a message completed before it was "
                                    f"posted ({t_done} < {t_post})")
                if t_done < c["begin"] or (c["end"] is not None and t_done > c["end"]):
                    problems.append(f"{name}: rank {rank}: a message completed outside the "
                                    "collective")
                if kind == "S":
                    sent[(rank, peer, tag, size)] += 1
                elif peer >= 0:
                    received[(peer, rank, tag, size)] += 1
                else:
                    unknown[(rank, tag, size)] += 1
        missing = sent - received
        for (src, dst, tag, size), k in list(missing.items()):
            take = min(k, unknown[(dst, tag, size)])
            unknown[(dst, tag, size)] -= take
            missing[(src, dst, tag, size)] -= take
        missing = +missing
        extra = (received - sent) + (+unknown)
        for (src, dst, tag, size), k in sorted(missing.items())[:5]:
            problems.append(f"{name}: {k} message(s) {src} -> {dst} tag {tag}, {size} B sent, "
                            "never received")
        for key2, k in sorted(extra.items())[:5]:
            problems.append(f"{name}: {k} message(s) received that nobody sent: {key2}")
    return problems


def summary(ranks):
    rows = []
    for key, per_rank in sorted(by_call(ranks).items(),
                                key=lambda kv: min(c["begin"] for c in kv[1].values())):
        begins = [c["begin"] for c in per_rank.values()]
        ends = [c["end"] for c in per_rank.values() if c["end"] is not None]
        after = (max(ends) - max(begins)) * 1e3 if ends else float("nan")
        cells = []
        for rank in sorted(per_rank):
            msgs = per_rank[rank]["msgs"]
            s = [m for m in msgs if m[0] == "S"]
            r = [m for m in msgs if m[0] == "R"]
            cells.append(f"r{rank} out {len(s)}/{sum(m[5] for m in s) / 2**20:.1f} "
                         f"in {len(r)}/{sum(m[5] for m in r) / 2**20:.1f}")
        failed = any(c["failed"] for c in per_rank.values())
        rows.append(f"{key[1]:4d} e{key[0]} skew {(max(begins) - min(begins)) * 1e3:8.2f} ms  "
                    f"after last arrival {after:8.2f} ms{'  FAILED' if failed else ''}  "
                    + "  ".join(cells))
    return rows


def timeline(ranks, ordinal, rank, bin_ms, min_bytes, engine=None):
    colls = [c for c in ranks[rank] if c["ordinal"] == ordinal and
             (engine is None or c["engine"] == engine)]
    if not colls:
        raise LogError(f"rank {rank} has no collective {ordinal}")
    c = colls[0]
    t0 = c["begin"]
    out = [f"rank {rank}, collective {ordinal} on engine {c['engine']}: "
           f"{((c['end'] or t0) - t0) * 1e3:.1f} ms; MiB completed per {bin_ms:g} ms from its "
           f"begin, messages of at least {min_bytes} B"]
    for kind, label in (("R", "from"), ("S", "to")):
        msgs = [m for m in c["msgs"] if m[0] == kind and m[5] >= min_bytes]
        for peer in sorted({m[3] for m in msgs}):
            bins = collections.Counter()
            for m in msgs:
                if m[3] == peer:
                    bins[int((m[2] - t0) * 1e3 // bin_ms)] += m[5]
            last = max(bins) if bins else 0
            cells = " ".join(f"{bins.get(i, 0) / 2**20:4.1f}" for i in range(last + 1))
            total = sum(bins.values()) / 2**20
            out.append(f"  {label} {peer:3d} ({total:6.1f} MiB): {cells}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("dir")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--ranks", type=int, help="with --check: exactly this many rank logs")
    ap.add_argument("--min-skew-ms", type=float,
                    help="with --check: some collective's arrival skew is at least this")
    ap.add_argument("--collective", type=int)
    ap.add_argument("--engine", type=int, help="with --collective: the engine (default: any)")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--bin-ms", type=float, default=10.0)
    ap.add_argument("--min-bytes", type=int, default=65536)
    a = ap.parse_args()
    try:
        ranks = load(a.dir)
        if a.collective is not None:
            print("\n".join(timeline(ranks, a.collective, a.rank, a.bin_ms, a.min_bytes,
                                     a.engine)))
        else:
            print("\n".join(summary(ranks)))
        if a.check:
            problems = check(ranks)
            if a.ranks is not None and sorted(ranks) != list(range(a.ranks)):
                problems.append(f"logs of ranks {sorted(ranks)}, expected 0..{a.ranks - 1}")
            if a.min_skew_ms is not None:
                skews = [(max(c["begin"] for c in pr.values()) -
                          min(c["begin"] for c in pr.values())) * 1e3
                         for pr in by_call(ranks).values()]
                if not skews or max(skews) < a.min_skew_ms:
                    problems.append(f"largest arrival skew {max(skews, default=0):.2f} ms, "
                                    f"expected at least {a.min_skew_ms} ms")
            if problems:
                print(f"msglog check: {len(problems)} problem(s)", file=sys.stderr)
                for p in problems[:20]:
                    print("  " + p, file=sys.stderr)
                return 1
            n = sum(len(c["msgs"]) for colls in ranks.values() for c in colls)
            print(f"msglog check: consistent ({len(ranks)} ranks, {n} messages)")
    except (LogError, ValueError, OSError) as e:
        print(f"msglog_summary: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
