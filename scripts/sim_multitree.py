#!/usr/bin/env python3
"""SimGrid experiment for the multi-spanning-tree all-reduce (issue 5, seed 002): multitree
vs skipring's ring (skip-ahead off) vs SimGrid's MPI_Allreduce on a heterogeneous platform.

The platform (sim/make_hetero_platform.py, default: hetero-8) is 2 sites x 4 hosts, a full
mesh of per-pair links, 100 Gbit/s 2 us inside a site and 10 Gbit/s 10 us between sites: every
ring crosses between the sites twice over slow links, while each spanning tree needs one
slow link, and the planner packs trees onto different ones. The planner reads the same link
graph (hetero-8.graph). Every point runs build-sim/apps/skipring_sim under
scripts/sim_run.sh (SMPI, CM02 alpha-beta; all times simulated), median of --iters
iterations, every result checked (float: bitwise identical on all ranks and close to a
double reference). Reductions are charged as simulated compute at SKIPRING_SIM_REDUCE_GBPS:
2.73 GB/s (the paper's 8 KB per 3 us, the default) and 50 GB/s (network only).

    python3 scripts/sim_multitree.py            # full sweep -> docs/data/sim_multitree.csv
    python3 scripts/sim_multitree.py --quick    # two sizes, K = 4 only
    python3 scripts/sim_multitree.py --build    # (re)build build-sim/ first (scripts/sim_build.sh)
    python3 scripts/sim_multitree.py --platform slowlink-8 --out docs/data/sim_multitree_slowlink8.csv
        # any sim/platforms/NAME.graph: the platform is made by sim/graph_to_platform.py
Env: SIM_BUILD_DIR (default build-sim).
"""
import argparse
import csv
import io
import os
import re
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(n, driver, platform, args, reduce_gbps):
    env = dict(os.environ)
    env["SKIPRING_SIM_REDUCE_GBPS"] = str(reduce_gbps)
    cmd = ["bash", os.path.join(REPO, "scripts", "sim_run.sh"), "-np", str(n),
           "-platform", platform + ".xml", "-hostfile", platform + ".hosts", driver] + args
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-2000:] + p.stderr[-4000:])
        raise SystemExit(f"sim_multitree: failed ({p.returncode}): {' '.join(cmd)}")
    rows = [r for r in csv.DictReader(io.StringIO(p.stdout)) if r.get("mode")]
    for r in rows:
        if r["exact"] != "1":
            raise SystemExit(f"sim_multitree: inexact result {r} ({' '.join(cmd)})")
    plan = re.search(r"H ([0-9.]+) us, throughput ([0-9.]+) GB/s, (\d+) trees", p.stderr)
    return rows, plan, p.stderr


def median_us(rows, mode):
    return statistics.median(float(r["t_total_us"]) for r in rows if r["mode"] == mode)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--platform", default="hetero-8", help="stem under sim/platforms/")
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "data", "sim_multitree.csv"))
    a = ap.parse_args(argv)
    build = os.environ.get("SIM_BUILD_DIR", "build-sim")
    if not os.path.isabs(build):
        build = os.path.join(REPO, build)
    driver = os.path.join(build, "apps", "skipring_sim")
    if a.build or not os.path.exists(driver):
        subprocess.run(["bash", os.path.join(REPO, "scripts", "sim_build.sh")], check=True)
    platform = os.path.join(REPO, "sim", "platforms", a.platform)
    if a.platform == "hetero-8":
        subprocess.run([sys.executable, os.path.join(REPO, "sim", "make_hetero_platform.py")],
                       check=True, stdout=subprocess.DEVNULL)
    else:  # any other graph: the platform is made from it
        subprocess.run([sys.executable, os.path.join(REPO, "sim", "graph_to_platform.py"),
                        platform + ".graph"], check=True, stdout=subprocess.DEVNULL)
    with open(platform + ".graph", encoding="ascii") as f:
        n = int(re.search(r"^nodes (\d+)", f.read(), re.M).group(1))

    sizes = ["1M", "16M"] if a.quick else ["256K", "1M", "4M", "16M", "64M"]
    ks = [4] if a.quick else [1, 2, 4, 8]
    rates = [2.73] if a.quick else [2.73, 50.0]
    common = ["--type", "float", "--iters", str(a.iters), "--warmup", "1"]
    out = []
    for rate in rates:
        for size in sizes:
            rows, _, _ = run(n, driver, platform, ["--bytes", size, "--mode", "ring,mpi"] + common,
                             rate)
            ring = median_us(rows, "ring")
            nbytes = int(rows[0]["bytes"])
            points = [("ring", "", "", ring), ("mpi", "", "", median_us(rows, "mpi"))]
            for k in ks:
                rows, plan, err = run(n, driver, platform,
                                      ["--bytes", size, "--mode", "tree", "--trees", str(k),
                                       "--graph", platform + ".graph"] + common, rate)
                if plan is None:
                    raise SystemExit(f"sim_multitree: no plan line in:\n{err[-2000:]}")
                points.append((f"multitree", k, f"{float(plan.group(2)):.3f}",
                               median_us(rows, "tree"), int(plan.group(3)), float(plan.group(1))))
            for p in points:
                t = p[3]
                trees_built = p[4] if len(p) > 4 else ""
                height = f"{p[5]:.1f}" if len(p) > 5 else ""
                out.append([a.platform, n, nbytes, rate, p[0], p[1], trees_built, height, p[2],
                            f"{t:.1f}", f"{nbytes / (t * 1e-6) / 1e9:.3f}", f"{ring / t:.2f}"])
                print(",".join(str(x) for x in out[-1]), flush=True)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["platform", "n", "bytes", "reduce_gbps", "algo", "max_trees", "trees",
                    "height_us", "plan_GBps", "t_us", "algbw_GBps", "speedup_vs_ring"])
        w.writerows(out)
    print(f"wrote {os.path.relpath(a.out, REPO)} ({len(out)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
