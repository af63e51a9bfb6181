#!/usr/bin/python3
"""Late-arrival sweep under SimGrid (issue 38): skip-ahead (defaults) against the plain ring
(SKIPRING_SKIP=0) and the floor for any schedule, with one rank late by a multiple of T0 (the
plain ring's time with no straggler, measured first in the same configuration).

Every row times the call from the last arrival (skipring_sim's t_after_last_arrival_us), and the
floor is scripts/cluster_bench.py's late_floor_ms on the platform's link rate (one rank per host,
each host link carrying B each way): what any schedule needs after the arrival, ignoring
latencies and reductions.

Usage: scripts/late_sweep.py [--n 8,16,64] [--sizes 16M,64M] [--lates 0,0.1,0.25,0.5,1,2,8]
                             [--out docs/data/late_sweep.csv] [--plot docs/figures/late_sweep.png]
Needs build-sim/ (scripts/sim_build.sh). SKIPRING_SIM_REDUCE_GBPS=50 unless set.
"""
import argparse
import csv
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from cluster_bench import late_floor_ms  # noqa: E402

LINK_BPS = 100e9 / 8  # sim/make_platform.py: 100 Gbit/s host links


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * mult[text[-1]] if text[-1] in mult else int(text)


def fmt_size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


SIM = os.path.join(ROOT, "build-sim", "apps", "skipring_sim")


SIM_TIMEOUT_S = 3600  # per simulation, wall clock (--timeout-s)


def write_points(path, points):
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(points[0].keys()))
        w.writeheader()
        w.writerows(points)


def sim(n, size, modes, late_us, iters, warmup, env_extra=None, late_rank=1):
    env = dict(os.environ)
    env.setdefault("SKIPRING_SIM_REDUCE_GBPS", "50")
    env.update(env_extra or {})
    cmd = ["bash", os.path.join(HERE, "sim_run.sh"), "-np", str(n),
           SIM, "--bytes", str(size),
           "--mode", modes, "--iters", str(iters), "--warmup", str(warmup)]
    if late_us > 0:
        cmd += ["--late-rank", str(late_rank), "--late-us", f"{late_us:.3f}"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True,
                         timeout=SIM_TIMEOUT_S or None)
    if out.returncode != 0:
        raise SystemExit(f"late_sweep: {' '.join(cmd)} failed ({out.returncode}):\n"
                         f"{out.stderr[-3000:]}")
    rows = [r for r in csv.DictReader(l for l in out.stdout.splitlines() if l and l[0].isalpha()
                                      or l[:1].isdigit())]
    res = {}
    for r in rows:
        if int(r["iter"]) < warmup:
            continue
        if r["exact"] not in ("1", "true", "yes"):
            raise SystemExit(f"late_sweep: inexact result: {r}")
        res.setdefault(r["mode"], []).append(float(r["t_after_last_arrival_us"]))
    return {m: sorted(v)[len(v) // 2] for m, v in res.items()}


def main():
    global SIM, SIM_TIMEOUT_S
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", default="8,16,64")
    ap.add_argument("--sizes", default="16M,64M")
    ap.add_argument("--lates", default="0,0.1,0.25,0.5,1,2,8", help="multiples of T0")
    ap.add_argument("--iters", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--sim", default="", help="the SMPI driver (scripts/sim_build.sh)")
    ap.add_argument("--late-rank", type=int, default=1,
                    help="the late rank (0: the census's first coordinator, which hands its role "
                    "on after the first call it comes last to; rows get a late_rank column)")
    ap.add_argument("--t0-us", type=float, default=0,
                    help="T0 of a single (n, size) as measured before (skips the ring-only run "
                    "that measures it: at n = 256 each simulation takes tens of minutes)")
    ap.add_argument("--out", default="", help="CSV, rewritten after every point")
    ap.add_argument("--timeout-s", type=float, default=SIM_TIMEOUT_S,
                    help="wall-clock limit per simulation (0: none; n = 64 at 64 MiB takes "
                         "about 15 min of CPU per point, n = 256 20-40 min)")
    ap.add_argument("--plot", default="")
    ap.add_argument("--cluster-csv", default="",
                    help="scripts/cluster_bench.py's CSV (late rows with several --late-ms): a "
                    "second panel of the plot, skip/ring and floor/ring against lateness in ms")
    ap.add_argument("--from-csv", default="",
                    help="comma-separated CSVs of earlier runs: no simulation, only --out, "
                    "--plot and the table from their rows")
    a = ap.parse_args()
    SIM_TIMEOUT_S = a.timeout_s
    SIM = a.sim or SIM
    points = []
    if a.from_csv:
        for path in a.from_csv.split(","):
            with open(path) as fh:
                for r in csv.DictReader(fh):
                    points.append({k: (float(v) if k not in ("n", "bytes") else int(v))
                                   for k, v in r.items()})
    for n in ([] if a.from_csv else [int(x) for x in a.n.split(",")]):
        for size in [parse_size(x) for x in a.sizes.split(",")]:
            t0 = a.t0_us or sim(n, size, "ring", 0, 1, a.warmup)["ring"]
            for f in [float(x) for x in a.lates.split(",")]:
                late_us = f * t0
                t = sim(n, size, "skip,ring", late_us, a.iters, a.warmup,
                        late_rank=a.late_rank)
                floor_us = late_floor_ms(n, size, LINK_BPS, late_us / 1e3) * 1e3
                p = dict(n=n, bytes=size, late_t0=f, late_us=round(late_us, 1), t0_us=round(t0, 1),
                         skip_us=round(t["skip"], 1), ring_us=round(t["ring"], 1),
                         floor_us=round(floor_us, 1), skip_over_ring=round(t["skip"] / t["ring"], 3),
                         floor_over_ring=round(floor_us / t["ring"], 3),
                         skip_over_floor=round(t["skip"] / floor_us, 3))
                if a.late_rank != 1:
                    p["late_rank"] = a.late_rank
                points.append(p)
                if a.out:
                    write_points(a.out, points)
                print(f"n={n:4d} {fmt_size(size):>7} late {f:5.2f} T0 ({late_us:9.1f} us): "
                      f"skip {p['skip_us']:9.1f} ring {p['ring_us']:9.1f} floor {p['floor_us']:9.1f}"
                      f"  skip/ring {p['skip_over_ring']:.3f} floor/ring {p['floor_over_ring']:.3f}"
                      f" skip/floor {p['skip_over_floor']:.3f}", flush=True)
    print()
    print("| n | size | late (T0) | late (us) | skip-ahead (us) | plain ring (us) | floor (us) "
          "| skip/ring | floor/ring | skip/floor |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for p in points:
        print(f"| {p['n']} | {fmt_size(p['bytes'])} | {p['late_t0']:g} | {p['late_us']:.0f} | "
              f"{p['skip_us']:.1f} | {p['ring_us']:.1f} | {p['floor_us']:.1f} | "
              f"**{p['skip_over_ring']:.3f}** | {p['floor_over_ring']:.3f} | "
              f"{p['skip_over_floor']:.3f} |")
    if a.out and points:
        write_points(a.out, points)
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        keys = sorted({(p["n"], p["bytes"]) for p in points})
        cluster = []
        if a.cluster_csv:
            with open(a.cluster_csv) as fh:
                cluster = [r for r in csv.DictReader(fh) if r["scenario"] == "late"]
        fig, axes = plt.subplots(1, 2 if cluster else 1, figsize=(12 if cluster else 7, 4.4),
                                 squeeze=False)
        ax = axes[0][0]
        for k in keys:
            ps = [p for p in points if (p["n"], p["bytes"]) == k and p["late_t0"] > 0]
            xs = [p["late_t0"] for p in ps]
            line, = ax.plot(xs, [p["skip_over_ring"] for p in ps], marker="o",
                            label=f"skip/ring n={k[0]} {fmt_size(k[1])}")
            ax.plot(xs, [p["floor_over_ring"] for p in ps], linestyle="--", color=line.get_color(),
                    label=f"floor/ring n={k[0]} {fmt_size(k[1])}")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("lateness (multiples of T0, the plain ring's time)")
        ax.set_ylabel("time after the last arrival / plain ring")
        ax.set_title("SimGrid cluster-N (100 Gbit/s, 5 us)")
        ax.legend(fontsize=6, ncol=2)
        if cluster:
            bx = axes[0][1]
            for size in sorted({int(r["size_bytes"]) for r in cluster}):
                rs = sorted((r for r in cluster if int(r["size_bytes"]) == size),
                            key=lambda r: float(r["late_ms"]))
                xs = [float(r["late_ms"]) for r in rs]
                line, = bx.plot(xs, [float(r["skip_over_ring"]) for r in rs], marker="o",
                                label=f"skip/ring {fmt_size(size)}")
                bx.plot(xs, [float(r["floor_over_ring"]) for r in rs], linestyle="--",
                        color=line.get_color(), label=f"floor/ring {fmt_size(size)}")
                # cluster_bench --bounds: the omniscient one-stream schedule after a long
                # lateness on the same links (what they give, where the floor counts bandwidth)
                if all(r.get("chain_bound_ms") for r in rs):
                    bx.plot(xs, [float(r["chain_bound_ms"]) / float(r["ring_ms"]) for r in rs],
                            linestyle=":", color=line.get_color(),
                            label=f"late_bound chain/ring {fmt_size(size)} (long lateness)")
            bx.axhline(1.0, color="grey", linewidth=0.8)
            bx.set_xscale("log")
            bx.set_xlabel("lateness (ms)")
            bx.set_title(f"{cluster[0]['hosts']} emulated hosts x 1 rank, {cluster[0]['rate']} "
                         "(medians of runs)")
            bx.legend(fontsize=7, loc="lower left")
        fig.tight_layout()
        fig.savefig(a.plot, dpi=120)


if __name__ == "__main__":
    main()
