#!/usr/bin/python3
"""Bucket-sized all-reduces with a late rank, through mpi4py: how long after the last arrival?

Per iteration: MPI_Barrier, rank --late-rank sleeps --late-ms, then every rank calls
comm.Allreduce (MPI_Allreduce: run it under LD_PRELOAD=libskipring_pmpi.so with SKIPRING_ALGO
set to compare algorithms, or without the preload for the MPI's own). One host only: ranks share
CLOCK_MONOTONIC, so "after arrival" = the last rank's end - the late rank's start, the part of
a straggler's cost the algorithm decides (skip-ahead shortens it: the others have summed
everything without the late rank before it comes). Also the time with nobody late.

  mpirun -np 4 -x LD_PRELOAD=build/runtime/pmpi/libskipring_pmpi.so -x SKIPRING_ALGO=skipring \\
      /usr/bin/python3 scripts/train/bucket_late.py --sizes 256K,1M,4M
prints one line per size: `bucket-late: algo=... bytes=... iters=... none_us=p50 after_us=p50
after_p90_us=...`.
"""
import argparse
import os
import sys
import time

import numpy as np
from mpi4py import MPI


def size_arg(s):
    s = s.strip().upper()
    mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMG" else s) * mult)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="256K,1M,4M")
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--late-rank", type=int, default=1)
    p.add_argument("--late-ms", type=float, default=10.0)
    a = p.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    algo = os.environ.get("SKIPRING_ALGO", "auto") if os.environ.get("LD_PRELOAD") else "mpi"
    if os.environ.get("LD_PRELOAD") and os.environ.get("SKIPRING_SKIP") == "0":
        algo += "(skip=0)"
    if os.environ.get("LD_PRELOAD") and "SKIPRING_AUTO_STRAGGLER" in os.environ:
        algo += f"(auto_straggler={os.environ['SKIPRING_AUTO_STRAGGLER']})"
    for nbytes in (size_arg(x) for x in a.sizes.split(",")):
        buf = np.ones(nbytes // 4, np.float32)
        none, after = [], []
        for it in range(a.warmup + 2 * a.iters):
            late = it >= a.warmup + a.iters
            comm.Barrier()
            if late and rank == a.late_rank:
                time.sleep(a.late_ms / 1e3)
            t0 = time.perf_counter()
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
            t1 = time.perf_counter()
            buf[:] = 1.0
            if it < a.warmup:
                continue
            ts = comm.gather((t0, t1), root=0)
            if rank == 0:
                end = max(e for _, e in ts)
                if late:
                    after.append(end - ts[a.late_rank][0])
                else:
                    none.append(end - min(s for s, _ in ts))
        if rank == 0:
            print(f"bucket-late: algo={algo} np={size} bytes={nbytes} iters={a.iters} "
                  f"none_us={1e6 * np.median(none):.0f} after_us={1e6 * np.median(after):.0f} "
                  f"after_p90_us={1e6 * np.percentile(after, 90):.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
