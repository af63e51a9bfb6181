#!/usr/bin/env python3
"""Repeated skipring_bench runs against Open MPI's MPI_Allreduce, summarised as medians.

The machine is shared and noisy, so one run proves little: this runs skipring_bench
--compare mpi R times for each rank count and prints, per size, the median over runs of
the p50 times and of the speedup t_mpi_p50 / t_skipring_p50 (= busbw ratio at p50), for
out-of-place and in-place, as a Markdown table. Ratios come from the same run.

Usage: scripts/bench_compare.py --bench build-release/apps/skipring_bench --np 2 4 \
           --repeat 5 -- -b 8 -e 64M -f 8 -n 20 -w 5
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run_once(bench, np, bench_args, env_extra):
    with tempfile.NamedTemporaryFile(suffix=".csv", delete=False) as tmp:
        path = tmp.name
    cmd = ["bash", os.path.join(HERE, "mpirun.sh"), "-np", str(np), bench, "--compare", "mpi",
           "--csv", path] + bench_args
    env = dict(os.environ, **env_extra)
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout)
        raise SystemExit(f"bench_compare: run failed: {' '.join(cmd)}")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    os.unlink(path)
    return rows


def fmt_size(b):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", required=True)
    ap.add_argument("--np", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--raw-csv", help="write every run's rows here")
    ap.add_argument("bench_args", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    bench_args = [a for a in args.bench_args if a != "--"]
    all_rows = []
    for np in args.np:
        per_size = {}
        for r in range(args.repeat):
            print(f"# np {np}: run {r + 1}/{args.repeat}", file=sys.stderr, flush=True)
            for row in run_once(args.bench, np, bench_args, {}):
                row["run"] = r
                all_rows.append(row)
                per_size.setdefault(int(row["size_bytes"]), []).append(row)
        print(f"\n#### np {np} ({args.repeat} runs, medians)\n")
        print("| size | skipring p50 (us) | MPI p50 (us) | speedup | skipring busbw (GB/s) "
              "| in-place skipring p50 | in-place MPI p50 | in-place speedup | #wrong |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for size in sorted(per_size):
            rows = per_size[size]
            med = lambda key: statistics.median(float(x[key]) for x in rows)
            wrong = sum(int(x["oop_wrong"]) + int(x["ip_wrong"]) for x in rows)
            print(f"| {fmt_size(size)} | {med('oop_p50_us'):.2f} | {med('oop_mpi_p50_us'):.2f} "
                  f"| {med('oop_speedup'):.2f} | {med('oop_busbw_gbps'):.3f} "
                  f"| {med('ip_p50_us'):.2f} | {med('ip_mpi_p50_us'):.2f} "
                  f"| {med('ip_speedup'):.2f} | {wrong} |")
    if args.raw_csv and all_rows:
        with open(args.raw_csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(all_rows[0].keys()))
            w.writeheader()
            w.writerows(all_rows)


if __name__ == "__main__":
    main()
