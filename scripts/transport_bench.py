#!/usr/bin/env python3
"""SKIPRING_TRANSPORT=mpi against =ucx (issue 14, docs/gpu.md): skipring_bench run alternately
with each transport, R rounds, p50 per size and round; prints the median over rounds of each
transport's p50 and of the per-round ratio ucx/mpi (same round = same machine state).

  python3 scripts/transport_bench.py [--bench build/apps/skipring_bench] [--np 4] [--rounds 5]
                                     [--sizes 64K:16M] [--launcher "mpirun ..."] [--late-ms 0]

Each run: skipring_bench -b LO -e HI -f 4 -n ITERS -w 3 --outofplace-only -c 1 (add
--late-rank 1 --late-ms X with --late-ms), SKIPRING_ALGO=skipring unless --algo says
otherwise (auto's small sizes never touch the transport). The launcher defaults to mpirun with
oversubscription allowed (root as well).
"""
import argparse
import os
import shlex
import statistics
import subprocess
import sys


def run_once(args, transport):
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", SKIPRING_TRANSPORT=transport)
    if args.algo:
        env["SKIPRING_ALGO"] = args.algo
    lo, hi = args.sizes.split(":")
    cmd = shlex.split(args.launcher) + ["-np", str(args.np), args.bench, "-b", lo, "-e", hi,
                                        "-f", "4", "-n", str(args.iters), "-w", "3",
                                        "--outofplace-only", "-c", "1"]
    if args.late_ms > 0:
        cmd += ["--late-rank", "1", "--late-ms", str(args.late_ms)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"transport_bench: {transport} run failed (rc {out.returncode}):\n"
                 f"{out.stdout[-2000:]}{out.stderr[-2000:]}")
    rows = {}
    for line in out.stdout.splitlines():
        f = line.split()
        # nccl-tests' columns 0-12 (8: out-of-place #wrong), then skipring's: 13 algo,
        # 14 out-of-place p50 (us).
        if not f or f[0].startswith("#") or not f[0].isdigit() or len(f) < 15:
            continue
        if f[8] != "0":
            sys.exit(f"transport_bench: {transport}: wrong results at {f[0]} bytes")
        rows[int(f[0])] = (f[13], float(f[14]))  # algo, p50 (us)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default="build/apps/skipring_bench")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--sizes", default="64K:16M")
    ap.add_argument("--late-ms", type=float, default=0)
    ap.add_argument("--launcher", default="mpirun")
    ap.add_argument("--algo", default="skipring",
                    help="SKIPRING_ALGO ('' = auto, which sends small sizes through MPI's "
                         "recursive doubling whatever the transport)")
    args = ap.parse_args()
    runs = {"mpi": [], "ucx": []}
    for r in range(args.rounds):
        for t in (("mpi", "ucx") if r % 2 == 0 else ("ucx", "mpi")):
            runs[t].append(run_once(args, t))
    sizes = sorted(runs["mpi"][0])
    print(f"# np {args.np}, {args.rounds} rounds alternating, p50 per run (us), medians; "
          f"late rank: {args.late_ms} ms")
    print(f"{'bytes':>10} {'algo':>16} {'mpi p50':>10} {'ucx p50':>10} {'ucx/mpi':>8} "
          f"{'per-round ratios':>s}")
    for s in sizes:
        m = [x[s][1] for x in runs["mpi"]]
        u = [x[s][1] for x in runs["ucx"]]
        ratios = [b / a for a, b in zip(m, u)]
        print(f"{s:>10} {runs['mpi'][0][s][0]:>16} {statistics.median(m):>10.1f} "
              f"{statistics.median(u):>10.1f} {statistics.median(ratios):>8.2f} "
              + " ".join(f"{x:.2f}" for x in ratios))


if __name__ == "__main__":
    main()
