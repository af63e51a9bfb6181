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
the Markdown table of docs/benchmarks.md.

With --back-to-back K every timed iteration is K calls with no barrier in between, as an
application's loop issues them (skipring_bench --back-to-back, preload_latency -k), the time per
call their mean.

usage: scripts/latency_table.py [--build build] [--np 2 4] [--runs 5] [--max 64M] [--iters 60]
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


def c_api(build, np, a):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        run(mpirun(np, {}, [os.path.join(build, "apps", "skipring_bench"), "-b", "8", "-e",
                            str(a.max), "-f", "4", "-n", str(a.iters), "-w", "5",
                            "--outofplace-only", "--compare", "mpi", "--json", f.name,
                            "--back-to-back", str(a.back_to_back)]))
        rows = json.load(open(f.name))
    return {r["size_bytes"]: (r["oop_p50_us"], r["oop_mpi_p50_us"], r["algo"]) for r in rows}


def preload(build, np, a):
    lib = os.path.join(build, "runtime", "pmpi", "libskipring_pmpi.so")
    out = run(mpirun(np, {"LD_PRELOAD": lib},
                     [os.path.join(build, "tests", "release", "preload_latency"), "-b", "8",
                      "-e", str(a.max), "-f", "4", "-n", str(a.iters), "-w", "5",
                      "-k", str(a.back_to_back)]))
    rows = {}
    for line in out.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        b, sr, mpi, _ = line.split()
        rows[int(b)] = (float(sr), float(mpi))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--np", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--max", type=size_arg, default=64 << 20)
    ap.add_argument("--iters", type=int, default=60)
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
        print("| size | auto ran | C API skipring (us) | MPI (us) | ratio | preload skipring (us) "
              "| MPI (us) | ratio |")
        print("|---:|---|---:|---:|---:|---:|---:|---:|")
        worst = [0.0, 0.0]
        for b in sorted(capi[0]):
            c_sr = statistics.median(r[b][0] for r in capi)
            c_mpi = statistics.median(r[b][1] for r in capi)
            c_ratio = statistics.median(r[b][0] / r[b][1] for r in capi)
            algos = sorted({r[b][2] for r in capi})
            p_sr = statistics.median(r[b][0] for r in pre)
            p_mpi = statistics.median(r[b][1] for r in pre)
            p_ratio = statistics.median(r[b][0] / r[b][1] for r in pre)
            worst = [max(worst[0], c_ratio), max(worst[1], p_ratio)]
            label = f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1024 else f"{b} B"
            print(f"| {label} | {', '.join(algos)} | {c_sr:.2f} | {c_mpi:.2f} | {c_ratio:.2f} | "
                  f"{p_sr:.2f} | {p_mpi:.2f} | {p_ratio:.2f} |")
        print(f"\nWorst ratio: C API {worst[0]:.2f}, preload {worst[1]:.2f}.")


if __name__ == "__main__":
    main()
