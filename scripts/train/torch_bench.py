#!/usr/bin/python3
"""skipring's torch.distributed backend against gloo, in the same jobs (issue 39).

    flock /tmp/skipring-bench.lock /usr/bin/python3 scripts/train/torch_bench.py allreduce \
        [--placements host,cluster] [--reps 5]
    flock /tmp/skipring-bench.lock /usr/bin/python3 scripts/train/torch_bench.py ddp \
        [--placement cluster] [--scenarios none,exp,slow,stall] [--reps 5]
    flock /tmp/skipring-bench.lock /usr/bin/python3 scripts/train/torch_bench.py ddp-floor \
        [--placement cluster] [--scenarios none,exp,slow] [--reps 3]

allreduce: one job per placement (host: np 4 on this machine; cluster: 4 emulated hosts x 1
rank, scripts/vcluster.sh, 1 Gbit/s); in it, for every size (1 KiB .. 64 MiB float32) and
repetition, `dist.all_reduce` on the skipring group and on a gloo group over the same ranks,
alternating which goes first. A measurement is the mean time of k back-to-back calls on the
slowest rank; the table has medians over repetitions and skipring/gloo per size.
-> docs/data/torch_allreduce.csv

ddp: scripts/train/ddp_train.py (the MLP, 4.3 MiB of gradients, unmodified DDP) with the
trainer's straggler flags, variants skipring (skip-ahead, SKIPRING_ALGO's choice), ring
(skipring's plain ring) and gloo in every job, their order rotated per repetition; the figure
is the median step time (slowest rank per step) of each job, then the median over repetitions.
-> docs/data/torch_ddp.csv, docs/figures/torch_ddp_tta.png (accuracy against training time,
   scenario exp, first repetition; needs python3-matplotlib)

ddp-floor: the same DDP jobs with --timeline (each bucket all-reduced through a Python comm hook
that notes when every rank's bucket was ready and when its all-reduce completed) and a nocomm
variant (buckets not reduced at all). Per step and bucket, the lateness a = last ready - first
ready; no all-reduce can end before the bucket's last ready + late_floor_ms(n, bucket, B, a)
(scripts/cluster_bench.py: the least time after the late rank's input is there that any schedule
needs on these links), so the step's floor is the step minus how much later than the latest of
those bounds its last all-reduce ended (the ready times as measured: a schedule that changed
when ranks compute on the shared cores could move them). Printed against the step of the same job.
-> docs/data/torch_ddp_floor.csv

gloo-alone: gloo's own all-reduce time with no skipring and no MPI in the processes (np 4 on
this host; launched by mpirun only to start them), for reading the allreduce table.

Where the emulated cluster is needed the script brings it up (vcluster.sh up 4) and down again.
Wrap it in `flock /tmp/skipring-bench.lock` (benchmarks must not overlap). Needs the build's
python/ (skipring_torch) and Debian's /usr/bin/python3 with torch.
"""
import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = "/usr/bin/python3"
SIZES = [1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24, 1 << 26]
SCENARIOS = {
    "none": [],
    "exp": ["--straggler-dist", "exp", "--straggler-ranks", "1", "--straggler-ms", "20"],
    "slow": ["--slow-rank", "1", "--slow-ms", "20"],
    "stall": ["--stall-rank", "1", "--stall-every", "4", "--stall-ms", "80"],
}
VARIANTS = ["skipring", "ring", "gloo"]


def human(n):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n // div} {unit}"
    return f"{n} B"


# ---- the worker (runs inside the MPI job) -----------------------------------------------

def worker_allreduce(a):
    import torch
    import skipring_torch  # noqa: F401
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("skipring")
    rank, size = dist.get_rank(), dist.get_world_size()
    groups = {"skipring": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    sizes = [int(x) for x in a.sizes.split(",")]
    for nbytes in sizes:
        n = nbytes // 4
        t = torch.ones(n)
        k = max(3, min(200, (8 << 20) // nbytes))
        for g in groups.values():  # warm-up
            dist.all_reduce(t, group=g)
        for rep in range(a.reps):
            order = list(groups) if rep % 2 == 0 else list(reversed(list(groups)))
            for name in order:
                g = groups[name]
                dist.barrier(group=g)
                t0 = time.perf_counter()
                for _ in range(k):
                    dist.all_reduce(t, group=g)
                el = torch.tensor([(time.perf_counter() - t0) / k])
                dist.all_reduce(el, op=dist.ReduceOp.MAX, group=groups["gloo"])
                if rank == 0:
                    print(f"torch-ar: np={size} bytes={nbytes} backend={name} rep={rep} k={k} "
                          f"us={el.item() * 1e6:.1f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def worker_gloo_alone(a):
    """gloo with no skipring and no MPI in the process: its own latency here."""
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    env = os.environ
    rank = int(env.get("OMPI_COMM_WORLD_RANK", env.get("PMI_RANK", "0")))
    size = int(env.get("OMPI_COMM_WORLD_SIZE", env.get("PMI_SIZE", "1")))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=rank,
                            world_size=size)
    for nbytes in [int(x) for x in a.sizes.split(",")]:
        t = torch.ones(nbytes // 4)
        k = max(3, min(200, (8 << 20) // nbytes))
        for _ in range(5):
            dist.all_reduce(t)
        for rep in range(a.reps):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(k):
                dist.all_reduce(t)
            el = torch.tensor([(time.perf_counter() - t0) / k])
            dist.all_reduce(el, op=dist.ReduceOp.MAX)
            if rank == 0:
                print(f"torch-ar: np={size} bytes={nbytes} backend=gloo-alone rep={rep} k={k} "
                      f"us={el.item() * 1e6:.1f}", flush=True)
    dist.destroy_process_group()


def run_gloo_alone(a):
    out = launch(a, "host", [os.path.abspath(__file__), "worker-gloo-alone", "--reps",
                             str(a.reps), "--sizes", "1024,65536,1048576"], a.timeout)
    for nbytes in (1024, 65536, 1048576):
        v = [float(m.group(1)) for m in re.finditer(
            rf"^torch-ar: np=\d+ bytes={nbytes} backend=gloo-alone rep=\d+ k=\d+ us=([0-9.]+)$",
            out, re.M)]
        print(f"gloo alone (no skipring, no MPI in the process), np {a.np}, {human(nbytes)}: "
              f"median {statistics.median(v):.0f} µs of {len(v)}")


# ---- the driver --------------------------------------------------------------------------

def base_env(a):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPRING_")}
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMPI_MCA_rmaps_base_oversubscribe": "1",
                "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
                "PYTHONPATH": a.pythonpath, "OMP_NUM_THREADS": "1"})
    return env


def launch(a, placement, argv, timeout, tries=2):
    """Runs the job; a failed job is retried once (the emulated cluster's daemons can fail
    to start on a loaded machine), then the script stops."""
    for t in range(tries):
        out = launch_once(a, placement, argv, timeout, last=t == tries - 1)
        if out is not None:
            return out
        print(f"torch_bench: retrying after a failure ({placement})", flush=True)


def launch_once(a, placement, argv, timeout, last):
    env = base_env(a)
    xs = ["-x", f"PYTHONPATH={a.pythonpath}", "-x", "OMP_NUM_THREADS=1",
          "-x", "OPENBLAS_NUM_THREADS=1"]
    if placement == "cluster":
        cmd = ["bash", os.path.join(ROOT, "scripts", "vcluster.sh"), "run", "-p", "1", *xs,
               PY, "-W", "ignore", *argv]
    else:
        cmd = ["mpirun", "-np", str(a.np), *xs, PY, "-W", "ignore", *argv]
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        print(proc.stdout[-4000:])
        if not last:
            return None
        sys.exit(f"torch_bench: failed (exit {proc.returncode}): {' '.join(cmd)}")
    return proc.stdout


class Cluster:
    """vcluster.sh up N on entry, down on exit (only when the placement needs it)."""

    def __init__(self, hosts, rate, needed):
        self.hosts, self.rate, self.needed = hosts, rate, needed

    def __enter__(self):
        if self.needed:
            r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "vcluster.sh"), "up",
                                str(self.hosts), self.rate])
            if r.returncode != 0:
                sys.exit(f"torch_bench: vcluster.sh up failed (exit {r.returncode})")
        return self

    def __exit__(self, *exc):
        if self.needed:
            subprocess.run(["bash", os.path.join(ROOT, "scripts", "vcluster.sh"), "down"])
        return False


def write_csv(path, rows, what=""):
    """Writes the rows; with `what`, says so and opens the Markdown table of `what`'s columns."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    if what:
        noun, cols = what.split(":", 1)
        print(f"torch_bench: {len(rows)} {noun} -> {path} (commit {git_commit()})")
        heads = [c.strip() for c in cols.split("|")]
        print("\n| " + " | ".join(heads) + " |")
        print("|" + "|".join("---" if i < 1 else "---:" for i in range(len(heads))) + "|")


def git_commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def run_allreduce(a):
    rows = []
    for placement in a.placements.split(","):
        with Cluster(4, a.rate, placement == "cluster"):
            out = launch(a, placement, [os.path.abspath(__file__), "worker-allreduce",
                                        "--reps", str(a.reps), "--sizes",
                                        ",".join(str(s) for s in SIZES)], a.timeout)
        for m in re.finditer(r"^torch-ar: np=(\d+) bytes=(\d+) backend=(\S+) rep=(\d+) k=(\d+) "
                             r"us=([0-9.]+)$", out, re.M):
            rows.append({"placement": placement, "np": int(m.group(1)),
                         "bytes": int(m.group(2)), "backend": m.group(3),
                         "rep": int(m.group(4)), "k": int(m.group(5)),
                         "us": float(m.group(6))})
        write_csv(a.ar_csv, rows)  # after every placement
    print(f"torch_bench: {len(rows)} measurements -> {a.ar_csv} (commit {git_commit()})")
    print("\n| placement | size | skipring µs | gloo µs | skipring / gloo |")
    print("|---|---:|---:|---:|---:|")
    for placement in a.placements.split(","):
        for nbytes in SIZES:
            med = {}
            for b in ("skipring", "gloo"):
                v = [r["us"] for r in rows if r["placement"] == placement and
                     r["bytes"] == nbytes and r["backend"] == b]
                med[b] = statistics.median(v) if v else float("nan")
            print(f"| {placement} | {human(nbytes)} | {med['skipring']:.0f} | {med['gloo']:.0f} "
                  f"| {med['skipring'] / med['gloo']:.2f} |")


def run_ddp(a):
    rows, curves = [], {}
    scen = a.scenarios.split(",")
    with Cluster(4, a.rate, a.placement == "cluster"):
        for rep in range(a.reps):
            for s in scen:
                order = VARIANTS[rep % 3:] + VARIANTS[:rep % 3]
                out = launch(a, a.placement, [os.path.join(ROOT, "scripts", "train",
                                                           "ddp_train.py"),
                                              "--variants", ",".join(order), "--max-steps",
                                              str(a.steps), "--eval-every", str(a.eval_every),
                                              "--seed", str(1 + rep), *SCENARIOS[s]],
                             a.timeout)
                for m in re.finditer(r"^ddp-result: (\{.*\})$", out, re.M):
                    res = json.loads(m.group(1))
                    rows.append({"scenario": s, "rep": rep, "variant": res["variant"],
                                 "np": res["np"], "step_ms_median": res["step_ms_median"],
                                 "step_ms_mean": res["step_ms_mean"], "train_s": res["train_s"],
                                 "final_acc": res["final_acc"],
                                 "skips": sum(res["skipring_skips"]),
                                 "late": sum(res["skipring_late"]),
                                 "final_hash": res["final_hash"]})
                    if rep == 0:
                        curves[(s, res["variant"])] = res["evals"]
                print(f"torch_bench: ddp rep {rep} {s} done", flush=True)
    write_csv(a.ddp_csv, rows, "runs: scenario | skipring ms/step | ring ms/step | gloo ms/step | "
              "skipring / gloo | skipring / ring | skips + late (skipring, median per job)")
    for s in scen:
        med = {v: statistics.median([r["step_ms_median"] for r in rows
                                     if r["scenario"] == s and r["variant"] == v])
               for v in VARIANTS}
        sk = statistics.median([r["skips"] + r["late"] for r in rows
                                if r["scenario"] == s and r["variant"] == "skipring"])
        print(f"| {s} | {med['skipring']:.1f} | {med['ring']:.1f} | {med['gloo']:.1f} | "
              f"{med['skipring'] / med['gloo']:.2f} | {med['skipring'] / med['ring']:.2f} | "
              f"{sk:.0f} |")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("torch_bench: no matplotlib (scripts/setup.sh plots): no plot")
        return
    s = "exp" if "exp" in scen else scen[0]
    fig, ax = plt.subplots(figsize=(6, 4))
    for v in VARIANTS:
        ev = curves.get((s, v))
        if ev:
            ax.plot([e["time_s"] for e in ev], [e["acc"] for e in ev], marker="o", label=v)
    ax.set_xlabel("training time (s, evaluations left out)")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"DDP MLP, np {rows[0]['np']} ({a.placement}), straggler: {s}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(a.plot), exist_ok=True)
    fig.savefig(a.plot, dpi=110)
    print(f"torch_bench: plot -> {a.plot}")


def step_floor_ms(res, n, bps):
    """Per measured step of one variant's timeline: (step ms, floor ms).

    Two ranks, one 1 MB bucket per step, 8 Mbit/s links (1 MB takes 1 s): in the measured step
    rank 1's bucket is ready 2 s after rank 0's and the all-reduce ends 1.5 s after that. With a
    2 s head start any schedule needs the late input's 1 s after it comes, so 0.5 s of the
    2.5 s step could have been saved:
    >>> res = {"steps": 2, "step_ms_all": [2500.0],
    ...        "timeline": [[[0, 0, 1e6, 0.0, 0.5], [1, 0, 1e6, 10.0, 13.5]],
    ...                     [[0, 0, 1e6, 0.0, 0.5], [1, 0, 1e6, 12.0, 13.5]]]}
    >>> step_floor_ms(res, 2, 1e6)
    [(2500.0, 2000.0)]

    An all-reduce already at the floor saves nothing; a step without marks keeps its time:
    >>> res["timeline"][0][1][4] = res["timeline"][1][1][4] = 13.0
    >>> res["step_ms_all"].append(900.0); res["steps"] = 3
    >>> step_floor_ms(res, 2, 1e6)
    [(2500.0, 2500.0), (900.0, 900.0)]
    """
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from cluster_bench import late_floor_ms
    warm = res["steps"] - len(res["step_ms_all"])
    marks = {}  # (step, bucket) -> [(bytes, ready, done) per rank]
    for rank_marks in res["timeline"]:
        for st, b, nbytes, ready, done in rank_marks:
            marks.setdefault((int(st), int(b)), []).append((nbytes, ready, done))
    out = []
    for i, step_ms in enumerate(res["step_ms_all"]):
        # The last all-reduce of the step ends at `end` on the slowest rank; no schedule can end
        # before any bucket's last ready + its floor after that (the buckets' bounds together:
        # their maximum).
        end, bound = None, None
        for (st, _b), recs in marks.items():
            if st != warm + i or len(recs) != n:
                continue
            ready = [r[1] for r in recs]
            a_ms = 1e3 * (max(ready) - min(ready))
            b_end = max(ready) + 1e-3 * late_floor_ms(n, recs[0][0], bps, a_ms)
            end = max(end or 0.0, max(r[2] for r in recs))
            bound = max(bound or 0.0, b_end)
        save = max(0.0, 1e3 * (end - bound)) if end is not None else 0.0
        out.append((step_ms, step_ms - save))
    return out


def run_ddp_floor(a):
    rows = []
    scen = a.scenarios.split(",")
    bps = {"1gbit": 125e6}.get(a.rate)
    if bps is None:
        sys.exit(f"torch_bench: ddp-floor knows the link rate of 1gbit only, not {a.rate}")
    variants = ["gloo", "ring", "skipring"]
    with Cluster(4, a.rate, a.placement == "cluster"):
        for rep in range(a.reps):
            for s in scen:
                order = variants[rep % 3:] + variants[:rep % 3] + ["nocomm"]
                out = launch(a, a.placement, [os.path.join(ROOT, "scripts", "train",
                                                           "ddp_train.py"), "--timeline",
                                              "--variants", ",".join(order), "--max-steps",
                                              str(a.steps), "--seed", str(1 + rep),
                                              *SCENARIOS[s]], a.timeout)
                for m in re.finditer(r"^ddp-result: (\{.*\})$", out, re.M):
                    res = json.loads(m.group(1))
                    row = {"scenario": s, "rep": rep, "variant": res["variant"],
                           "step_ms_median": res["step_ms_median"], "floor_ms_median": ""}
                    if res["variant"] != "nocomm":
                        pairs = step_floor_ms(res, res["np"], bps)
                        row["floor_ms_median"] = statistics.median(f for _, f in pairs)
                    rows.append(row)
                print(f"torch_bench: ddp-floor rep {rep} {s} done", flush=True)
    write_csv(a.floor_csv, rows, "runs: scenario | variant | ms/step (hook) | floor ms/step | "
              "floor / step | nocomm ms/step")
    for s in scen:
        nocomm = statistics.median(r["step_ms_median"] for r in rows
                                   if r["scenario"] == s and r["variant"] == "nocomm")
        for v in variants:
            sel = [r for r in rows if r["scenario"] == s and r["variant"] == v]
            st = statistics.median(r["step_ms_median"] for r in sel)
            fl = statistics.median(r["floor_ms_median"] for r in sel)
            print(f"| {s} | {v} | {st:.1f} | {fl:.1f} | {fl / st:.2f} | {nocomm:.1f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=("allreduce", "ddp", "ddp-floor", "gloo-alone", "worker-allreduce",
                                    "worker-gloo-alone"))
    p.add_argument("--port", type=int, default=29517, help="gloo-alone's rendezvous port")
    p.add_argument("--placements", default="host,cluster")
    p.add_argument("--placement", default="cluster")
    p.add_argument("--np", type=int, default=4, help="ranks on one host")
    p.add_argument("--rate", default="1gbit", help="emulated hosts' link rate")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--sizes", default="")
    p.add_argument("--scenarios", default="none,exp,slow,stall")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--pythonpath", default=os.path.join(ROOT, "build", "python"))
    p.add_argument("--ar-csv", default=os.path.join(ROOT, "docs", "data", "torch_allreduce.csv"))
    p.add_argument("--ddp-csv", default=os.path.join(ROOT, "docs", "data", "torch_ddp.csv"))
    p.add_argument("--floor-csv", default=os.path.join(ROOT, "docs", "data",
                                                       "torch_ddp_floor.csv"))
    p.add_argument("--plot", default=os.path.join(ROOT, "docs", "figures", "torch_ddp_tta.png"))
    a = p.parse_args()
    if a.mode == "worker-allreduce":
        return worker_allreduce(a)
    if a.mode == "worker-gloo-alone":
        return worker_gloo_alone(a)
    if not os.path.isdir(os.path.join(a.pythonpath, "skipring_torch")):
        sys.exit(f"torch_bench: no skipring_torch under {a.pythonpath}: build the "
                 f"skipring_torch_ext target (libtorch-dev, pybind11-dev)")
    if a.mode == "gloo-alone":
        return run_gloo_alone(a)
    if a.mode == "ddp-floor":
        return run_ddp_floor(a)
    return run_allreduce(a) if a.mode == "allreduce" else run_ddp(a)


if __name__ == "__main__":
    sys.exit(main())
