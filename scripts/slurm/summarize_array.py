#!/usr/bin/env python3
"""Summary of a straggler_array.sbatch experiment: one line per array task (delay).

Usage: summarize_array.py [--expect N] CSV...   (the task-<i>.csv files the tasks wrote)

Per task: how late the late rank was, the sizes run, the geometric mean over the sizes of
skip-ahead's time after the last arrival over the plain ring's (< 1: skip-ahead faster),
skip-ahead decisions per iteration, and wrong elements (must be 0). Exit status 1 when a file
is missing, empty or malformed, when fewer than N files were given (--expect), or when any
variant produced a wrong element; 0 otherwise.
"""
import argparse
import csv
import math
import re
import sys

NEEDED = ("size_bytes", "late_rank", "late_ms", "skip_after_p50_us", "ring_after_p50_us",
          "skip_skips_per_iter", "skip_wrong", "ring_wrong")


def task_of(path):
    m = re.search(r"task-(\d+)\.csv$", path)
    return int(m.group(1)) if m else None


def summarize(path):
    """(row dict for printing, error message or None)."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        return None, f"{path}: cannot read: {e.strerror}"
    if not rows:
        return None, f"{path}: no rows (did the task fail? see its job output)"
    missing = [c for c in NEEDED if c not in rows[0]]
    if missing:
        return None, f"{path}: not a skipring_bench straggler-mode CSV (no {', '.join(missing)})"
    try:
        ratios = [float(r["skip_after_p50_us"]) / float(r["ring_after_p50_us"]) for r in rows
                  if float(r["ring_after_p50_us"]) > 0]
        wrong = sum(int(r["skip_wrong"]) + int(r["ring_wrong"]) +
                    int(r.get("mpi_wrong") or 0) for r in rows)
        skips = sum(float(r["skip_skips_per_iter"]) for r in rows) / len(rows)
        sizes = sorted(int(r["size_bytes"]) for r in rows)
        late = float(rows[0]["late_ms"])
    except (ValueError, ZeroDivisionError) as e:
        return None, f"{path}: malformed value: {e}"
    geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else float("nan")
    return {"task": task_of(path), "late_ms": late, "rank": rows[0]["late_rank"],
            "sizes": f"{sizes[0]}..{sizes[-1]} B ({len(sizes)})", "geo": geo, "skips": skips,
            "wrong": wrong, "path": path}, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--expect", type=int, help="the number of array tasks that must be there")
    ap.add_argument("csv", nargs="+")
    a = ap.parse_args()
    results, errors = [], []
    for path in a.csv:
        row, err = summarize(path)
        if err:
            errors.append(err)
        else:
            results.append(row)
    if a.expect is not None and len(a.csv) < a.expect:
        errors.append(f"{len(a.csv)} file(s) for {a.expect} array tasks")
    results.sort(key=lambda r: (r["late_ms"], r["task"] if r["task"] is not None else -1))
    print(f"{'task':>4} {'late rank':>9} {'late ms':>8} {'sizes':>24} {'skip/ring':>10} "
          f"{'skips/iter':>10} {'wrong':>6}")
    for r in results:
        task = "?" if r["task"] is None else str(r["task"])
        print(f"{task:>4} {r['rank']:>9} {r['late_ms']:>8g} {r['sizes']:>24} {r['geo']:>10.3f} "
              f"{r['skips']:>10.1f} {r['wrong']:>6}")
    bad = [r for r in results if r["wrong"]]
    for r in bad:
        errors.append(f"{r['path']}: {r['wrong']} wrong element(s)")
    for e in errors:
        print(f"summarize_array: error: {e}", file=sys.stderr)
    print(f"summarize_array: {len(results)} task(s), "
          f"{'FAILED' if errors else 'all results exact'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
