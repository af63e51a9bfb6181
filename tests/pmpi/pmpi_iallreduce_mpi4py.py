#!/usr/bin/env python3
"""mpi4py's Iallreduce under the PMPI preload (issue 40): numpy arrays of float64 and int64
(8 B to 8 MiB), the program computing in Python while the reduction progresses, then Wait / Test
/ Waitall; results compared with a reduction computed here (exact: small integers). mpi4py
initialises MPI with MPI_THREAD_MULTIPLE, so skipring runs these on its progress thread.
Exits 1 on any wrong result, 77 when mpi4py or numpy is missing."""
import sys
import time

try:
    import numpy as np
    from mpi4py import MPI
except ImportError as e:  # the tier's convention: skipped, with the reason
    print(f"pmpi_iallreduce_mpi4py: skipped: {e}")
    sys.exit(77)

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
failed = 0


def contribution(r, n, dtype, call):
    return ((np.arange(n) % 13) + r * 3 + call).astype(dtype)


def busy(seconds):
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x


call = 0
for dtype in (np.float64, np.int64):
    for n in (1, 1024, 131072, 1 << 20):
        call += 1
        send = contribution(rank, n, dtype, call)
        recv = np.empty_like(send)
        req = comm.Iallreduce(send, recv, op=MPI.SUM)
        busy(0.002)
        if call % 2:
            req.Wait()
        else:
            while not req.Test():
                pass
        want = sum(contribution(r, n, dtype, call) for r in range(size))
        if not np.array_equal(recv, want):
            failed += 1
            print(f"rank {rank} FAIL: {np.dtype(dtype).name} n={n}: wrong result", file=sys.stderr)

# Two outstanding on one communicator, completed together.
a_in, b_in = contribution(rank, 4096, np.float64, 90), contribution(rank, 4096, np.float64, 91)
a, b = np.empty_like(a_in), np.empty_like(b_in)
reqs = [comm.Iallreduce(a_in, a, op=MPI.SUM), comm.Iallreduce(b_in, b, op=MPI.SUM)]
MPI.Request.Waitall(reqs)
for got, c in ((a, 90), (b, 91)):
    if not np.array_equal(got, sum(contribution(r, 4096, np.float64, c) for r in range(size))):
        failed += 1
        print(f"rank {rank} FAIL: Waitall: wrong result", file=sys.stderr)

total = comm.allreduce(failed, op=MPI.SUM)
if rank == 0:
    print(f"pmpi_iallreduce_mpi4py: {total} failed (thread level {MPI.Query_thread()})")
sys.exit(1 if total else 0)
