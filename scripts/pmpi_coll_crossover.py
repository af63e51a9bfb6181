#!/usr/bin/env python3
"""Runs pmpi_coll_timing (tests/pmpi) several times under the preload and prints, per collective
and size, the median over the runs of the drop-in's time, the MPI library's (PMPI_) time and
their ratio, as a Markdown table: the measurement behind the drop-in's size thresholds
(runtime/pmpi/pmpi_collectives.cpp, docs/benchmarks.md).

  scripts/pmpi_coll_crossover.py --build build --np 2 --runs 5 [--engine] [--mpich]

--engine sets SKIPRING_AUTO_MPI=0 (skipring's engine at every size: the crossover); without it
the drop-in's own choice is timed (the thresholds in force). Each run is wrapped in
`flock /tmp/skipring-bench.lock` (one timed run on the machine at a time)."""
import argparse
import os
import statistics
import subprocess
import sys
from collections import defaultdict


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-bytes", default=str(4 << 20))
    ap.add_argument("--only", help="one collective (reduce_scatter_block, allgather, bcast, reduce)")
    ap.add_argument("--engine", action="store_true")
    ap.add_argument("--mpich", action="store_true", help="mpiexec.mpich (a build-mpich tree)")
    args = ap.parse_args()
    so = os.path.join(args.build, "runtime/pmpi/libskipring_pmpi.so")
    prog = os.path.join(args.build, "tests/pmpi/pmpi_coll_timing")
    env_vars = {"LD_PRELOAD": os.path.abspath(so)}
    if args.engine:
        env_vars["SKIPRING_AUTO_MPI"] = "0"
    if args.mpich:
        cmd = ["mpiexec.mpich", "-n", str(args.np)]
        for k, v in env_vars.items():
            cmd += ["-genv", k, v]
    else:
        cmd = ["mpirun", "-np", str(args.np), "--mca", "op", "^avx"]
        for k, v in env_vars.items():
            cmd += ["-x", f"{k}={v}"]
    cmd += [prog, "--rounds", str(args.rounds), "--max-bytes", args.max_bytes]
    if args.only:
        cmd += ["--only", args.only]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    rows = defaultdict(lambda: ([], [], []))
    order = []
    for run in range(args.runs):
        out = subprocess.run(["flock", "/tmp/skipring-bench.lock"] + cmd, env=env, check=True,
                             capture_output=True, text=True, timeout=900).stdout
        for line in out.splitlines():
            f = line.split()
            if len(f) != 5:
                continue
            key = (f[0], int(f[1]))
            if key not in rows:
                order.append(key)
            d, p, r = rows[key]
            d.append(float(f[2]))
            p.append(float(f[3]))
            r.append(float(f[4]))
        print(f"run {run + 1}/{args.runs} done", file=sys.stderr)
    print(f"| collective | bytes | drop-in µs | MPI µs | ratio (median of {args.runs} runs) |")
    print("|---|---:|---:|---:|---:|")
    for key in order:
        d, p, r = rows[key]
        print(f"| {key[0]} | {key[1]} | {statistics.median(d):.2f} | {statistics.median(p):.2f} "
              f"| {statistics.median(r):.2f} |")


if __name__ == "__main__":
    main()
