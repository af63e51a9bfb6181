#!/usr/bin/env python3
"""Issue 40's latency table: skipring against the MPI library it replaces, same run, every size.

For each rank count, RUNS runs of
  - the C API: skipring_bench --compare mpi (skipring_allreduce and PMPI_Allreduce on the same
    buffers, out of place, float sum), p50 of each;
  - the preload: tests/release/preload_latency with libskipring_pmpi.so preloaded
    (MPI_Allreduce, which the preload turns into skipring's, and PMPI_Allreduce), p50 of each;
each run under `flock /tmp/skipring-bench.lock` (one timed run on the machine at a time). Per
size it prints the medians over the runs of each p50 and the median of the per-run ratios
(skipring / MPI; < 1: skipring faster), and what auto ran (the C API's algorithm column), as
the Markdown table of docs/benchmarks.md. A second ratio per size compares the interquartile
means (the mean of the samples between the 25th and 75th percentile) instead of the p50s: on
calls of 0.2-0.4 us the clock's ~10 ns tick makes each p50 jump by 3-4 %, which the IQM, an
average, does not. Sizes up to 2 KiB run --small-iters iterations per run (default 400), the
rest --iters (default 60), each range its own mpirun.

With --back-to-back K every timed iteration is K calls with no barrier in between, as an
application's loop issues them (skipring_bench --back-to-back, preload_latency -k), the time per
call their mean.

usage: scripts/latency_table.py [--build build] [--np 2 4] [--runs 5] [--max 64M] [--iters 60]
                                [--small-iters 400]
                                [--back-to-back K] [--mpich]   (a build against MPICH, e.g. --build build-mpich,
                                             launched with mpiexec.mpich)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCK = "/tmp/skipring-bench.lock"
SMALL_MAX = 2048  # sizes up to this many bytes get --small-iters iterations (calls of ~1 us)


def size_arg(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    return int(t[:-1]) * mult[t[-1]] if t[-1] in mult else int(t)


MPICH = False


def mpirun(np, env, argv):
    if MPICH:
        cmd = ["flock", LOCK, "mpiexec.mpich", "-n", str(np)]
        for k, v in env.items():
            cmd += ["-genv", k, v]
        return cmd + argv
    cmd = ["flock", LOCK, "mpirun", "-np", str(np), "--mca", "op", "^avx"]
    for k, v in env.items():
        cmd += ["-x", f"{k}={v}"]
    return cmd + argv


def run(cmd):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"latency_table: failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return p.stdout


def size_ranges(a):
    """(first, last, iterations) per invocation: the small sizes with --small-iters, the rest
    with --iters (sizes 8 B x 4^k)."""
    small_max = min(a.max, SMALL_MAX)
    ranges = [(8, small_max, a.small_iters)]
    if a.max > small_max:
        ranges.append((small_max * 4, a.max, a.iters))
    return ranges


def c_api(build, np, a):
    rows = {}
    for first, last, iters in size_ranges(a):
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            run(mpirun(np, {}, [os.path.join(build, "apps", "skipring_bench"), "-b", str(first),
                                "-e", str(last), "-f", "4", "-n", str(iters), "-w", "5",
                                "--outofplace-only", "--compare", "mpi", "--json", f.name,
                                "--back-to-back", str(a.back_to_back)]))
            for r in json.load(open(f.name)):
                rows[r["size_bytes"]] = (r["oop_p50_us"], r["oop_mpi_p50_us"], r["algo"],
                                         r["oop_iqm_us"], r["oop_mpi_iqm_us"])
    return rows


def preload(build, np, a):
    lib = os.path.join(build, "runtime", "pmpi", "libskipring_pmpi.so")
    rows = {}
    for first, last, iters in size_ranges(a):
        out = run(mpirun(np, {"LD_PRELOAD": lib},
                         [os.path.join(build, "tests", "release", "preload_latency"), "-b",
                          str(first), "-e", str(last), "-f", "4", "-n", str(iters), "-w", "5",
                          "-k", str(a.back_to_back)]))
        for line in out.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            b, sr, mpi, _, q_sr, q_mpi, _ = line.split()
            rows[int(b)] = (float(sr), float(mpi), None, float(q_sr), float(q_mpi))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--np", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--max", type=size_arg, default=64 << 20)
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--small-iters", type=int, default=400,
                    help=f"iterations per run for the sizes up to {SMALL_MAX} B")
    ap.add_argument("--back-to-back", type=int, default=1,
                    help="calls per timed iteration, no barrier in between (1: a barrier before each)")
    ap.add_argument("--mpich", action="store_true", help="launch with mpiexec.mpich")
    a = ap.parse_args()
    global MPICH
    MPICH = a.mpich
    for np in a.np:
        capi, pre = [], []
        for i in range(a.runs):  # interleaved: both see the same periods of the machine
            capi.append(c_api(a.build, np, a))
            pre.append(preload(a.build, np, a))
            print(f"# np {np}: run {i + 1} of {a.runs} done", file=sys.stderr)
        print(f"\n### np {np} ({a.runs} runs, medians; ratio = skipring / MPI, < 1: skipring "
              "faster)\n")
        print("| size | auto ran | C API skipring (us) | MPI (us) | ratio | ratio (IQM) "
              "| preload skipring (us) | MPI (us) | ratio | ratio (IQM) |")
        print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        worst = [0.0, 0.0, 0.0, 0.0]
        for b in sorted(capi[0]):
            c_sr = statistics.median(r[b][0] for r in capi)
            c_mpi = statistics.median(r[b][1] for r in capi)
            c_ratio = statistics.median(r[b][0] / r[b][1] for r in capi)
            c_iqm = statistics.median(r[b][3] / r[b][4] for r in capi)
            algos = sorted({r[b][2] for r in capi})
            p_sr = statistics.median(r[b][0] for r in pre)
            p_mpi = statistics.median(r[b][1] for r in pre)
            p_ratio = statistics.median(r[b][0] / r[b][1] for r in pre)
            p_iqm = statistics.median(r[b][3] / r[b][4] for r in pre)
            worst = [max(w, x) for w, x in zip(worst, (c_ratio, p_ratio, c_iqm, p_iqm))]
            label = f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1024 else f"{b} B"
            print(f"| {label} | {', '.join(algos)} | {c_sr:.2f} | {c_mpi:.2f} | {c_ratio:.2f} | "
                  f"{c_iqm:.2f} | {p_sr:.2f} | {p_mpi:.2f} | {p_ratio:.2f} | {p_iqm:.2f} |")
        print(f"\nWorst ratio (p50): C API {worst[0]:.2f}, preload {worst[1]:.2f}; "
              f"(IQM): C API {worst[2]:.2f}, preload {worst[3]:.2f}.")


if __name__ == "__main__":
    main()
