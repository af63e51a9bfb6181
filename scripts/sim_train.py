#!/usr/bin/env python3
"""A data-parallel training loop under SimGrid: time per step, skip-ahead vs plain ring vs SMPI.

Runs build-sim/apps/skipring_sim_train (scripts/sim_build.sh) once per (scenario, mode) on
sim/platforms/cluster-N (100 Gbit/s host links, 5 us), reductions at SKIPRING_SIM_REDUCE_GBPS
(default 50), and prints a table: time per step (simulated), the mean largest lateness per
step (which no all-reduce can take back), the communication left after the last arrival
(comm = step - compute - lateness), and skip-ahead's saving over the plain ring, on the step
and on comm. Mode mpi is SMPI's MPI_Allreduce with Open MPI's decision table
(--cfg=smpi/coll-selector:ompi). The simulation is deterministic; each mode sees the same
lateness draws.

Example (ResNet-50's 25.6 M parameters in 25 MiB buckets, 16 ranks, 100 ms of compute per step):
  /usr/bin/python3 scripts/sim_train.py --n 16 --scenarios none,exp,pareto,slow \\
      --modes skip,ring,mpi --steps 4 --out docs/data/sim_train_16.csv
"""
import argparse
import csv
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(a, n, scenario, mode):
    env = dict(os.environ)
    env.setdefault("SKIPRING_SIM_REDUCE_GBPS", "50")
    if mode == "mpi":
        env["SIM_CFG"] = (env.get("SIM_CFG", "") + " --cfg=smpi/coll-selector:ompi").strip()
    cmd = ["bash", os.path.join(HERE, "sim_run.sh"), "-np", str(n), a.sim,
           "--params", str(a.params), "--bucket", a.bucket, "--scenario", scenario,
           "--mode", mode, "--compute-us", str(a.compute_us), "--late-us", str(a.late_us),
           "--steps", str(a.steps), "--warmup", str(a.warmup), "--seed", str(a.seed)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
    if out.returncode != 0:
        raise SystemExit(f"sim_train: {' '.join(cmd)} failed ({out.returncode}):\n"
                         f"{out.stderr[-3000:]}")
    rows = list(csv.DictReader(l for l in out.stdout.splitlines()
                               if l.startswith("n,") or l[:1].isdigit()))
    if len(rows) != 1 or rows[0]["exact"] != "1":
        raise SystemExit(f"sim_train: no exact result from {' '.join(cmd)}:\n{out.stdout}")
    return rows[0]


def table(rows):
    by = {(r["n"], r["scenario"], r["mode"]): r for r in rows}
    lines = ["| n | scenario | mode | step (ms) | lateness (ms) | comm (ms) | step / ring | "
             "comm / ring | comm / SMPI ompi |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ring = by.get((r["n"], r["scenario"], "ring"))
        mpi = by.get((r["n"], r["scenario"], "mpi"))
        st, cm = float(r["step_us"]), float(r["comm_us"])
        f = lambda x, y: f"{x / y:.3f}" if y else "-"
        lines.append(f"| {r['n']} | {r['scenario']} | {r['mode']} | {st / 1e3:.2f} | "
                     f"{float(r['late_us']) / 1e3:.2f} | {cm / 1e3:.2f} | "
                     f"{f(st, float(ring['step_us'])) if ring else '-'} | "
                     f"{f(cm, float(ring['comm_us'])) if ring else '-'} | "
                     f"{f(cm, float(mpi['comm_us'])) if mpi else '-'} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--n", default="16", help="rank counts, comma-separated")
    ap.add_argument("--scenarios", default="none,exp,pareto,slow")
    ap.add_argument("--modes", default="skip,ring,mpi")
    ap.add_argument("--params", type=int, default=25557032, help="ResNet-50's by default")
    ap.add_argument("--bucket", default="25M")
    ap.add_argument("--compute-us", type=float, default=100000)
    ap.add_argument("--late-us", type=float, default=5000,
                    help="mean lateness per rank (exp, pareto) or the slow rank's (slow)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=int, default=7200)
    ap.add_argument("--sim", default=os.path.join(ROOT, "build-sim", "apps", "skipring_sim_train"))
    ap.add_argument("--out", default="", help="CSV of the rows")
    ap.add_argument("--from-csv", default="", help="print the table of a CSV written before")
    a = ap.parse_args()
    if a.from_csv:
        with open(a.from_csv) as f:
            print(table(list(csv.DictReader(f))))
        return 0
    if not os.path.exists(a.sim):
        raise SystemExit(f"sim_train: {a.sim} not found: run scripts/sim_build.sh")
    rows = []
    for n in [int(x) for x in a.n.split(",")]:
        for sc in a.scenarios.split(","):
            for mode in a.modes.split(","):
                r = run(a, n, sc, mode)
                rows.append(r)
                print(f"n={n} {sc:6s} {mode:4s} step {float(r['step_us']) / 1e3:8.2f} ms "
                      f"late {float(r['late_us']) / 1e3:7.2f} ms comm {float(r['comm_us']) / 1e3:7.2f} ms",
                      flush=True)
                if a.out:
                    with open(a.out, "w", newline="") as f:
                        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
                        w.writeheader()
                        w.writerows(rows)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
