#!/usr/bin/env python3
"""SimGrid experiment for the hierarchical all-reduce: hier vs the flat skip-ahead ring (skip)
vs the flat plain ring (ring) vs SimGrid's MPI_Allreduce (mpi) vs skipring's own choice (auto)
on a two-level platform, 64 KiB .. 64 MiB.

The platform (sim/make_hier_platform.py, default hier-4x4): H nodes of M ranks, one rank per
SimGrid host; inside a node 400 Gbit/s host links to a node switch (0.5 us rank to rank),
between nodes ONE 100 Gbit/s uplink per node (5.5 us rank to rank), shared by all the node's
ranks. Ranks get SKIPRING_HOST_MAP=block:M (under SMPI every SimGrid host is its own processor
name). Every point runs build-sim/apps/skipring_sim under scripts/sim_run.sh (SMPI, CM02
alpha-beta; all times simulated), int64 (exact sums checked on every rank), median of --iters
iterations after one warm-up; the algorithm each mode ran is read from the driver's stats line.
Reductions are charged at SKIPRING_SIM_REDUCE_GBPS (default here 50 GB/s: network-bound; the
paper's 2.73 GB/s with --reduce-gbps 2.73).

    /usr/bin/python3 scripts/sim_hier.py           # -> docs/data/sim_hier.csv, docs/figures/sim_hier.png
    /usr/bin/python3 scripts/sim_hier.py --quick   # 64K, 1M, 16M only, nothing written
    /usr/bin/python3 scripts/sim_hier.py --plot-only
Env: SIM_BUILD_DIR (default build-sim).

The model columns are alpha-beta (docs/hierarchical.md): flat ring k*a_net + (2(n-1)-k)*a_loc +
2(n-1)/n*S/b_nic (a piece's path is 2(n-1) hops of the node-aware ring, k = ceil(2(n-1)/M) of
them between nodes; each uplink carries one ring edge); hier 2(M-1)*a_loc +
2(M-1)/M*S/b_loc + 2(H-1)*a_net + 2(H-1)/H*S/b_nic (the M inter-node rings of S/M each share
the uplink). Reductions, segment pipelining and SMPI's rendezvous handshake are left out.
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
MODES = ["hier", "skip", "ring", "mpi", "auto"]
# Platform constants of sim/make_hier_platform.py's defaults.
A_LOC, B_LOC = 0.5e-6, 400e9 / 8
A_NET, B_NIC = 5.5e-6, 100e9 / 8


def model_us(mode, h, m, s):
    n = h * m
    if mode == "hier":
        return 1e6 * (2 * (m - 1) * A_LOC + 2 * (m - 1) / m * s / B_LOC
                      + 2 * (h - 1) * A_NET + 2 * (h - 1) / h * s / B_NIC)
    if mode in ("skip", "ring"):
        # A piece's critical path is 2(n-1) consecutive ring hops, of which at most
        # ceil(2(n-1)/M) cross a node (the node-aware ring crosses once per node); each uplink
        # carries one ring edge: 2(n-1) pieces of S/n.
        hops = 2 * (n - 1)
        net = -(-hops // m) if h > 1 else 0
        return 1e6 * (net * A_NET + (hops - net) * A_LOC + 2 * (n - 1) / n * s / B_NIC)
    return None


def run(n, m, driver, stem, size, iters, rate):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPRING_")}
    env["SKIPRING_SIM_REDUCE_GBPS"] = str(rate)
    env["SKIPRING_HOST_MAP"] = f"block:{m}"
    cmd = ["bash", os.path.join(REPO, "scripts", "sim_run.sh"), "-np", str(n), "-platform",
           stem + ".xml", "-hostfile", stem + ".hosts", driver, "--bytes", size, "--type",
           "int64", "--mode", ",".join(MODES), "--iters", str(iters), "--warmup", "1"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-2000:] + p.stderr[-4000:])
        raise SystemExit(f"sim_hier: failed ({p.returncode}): {' '.join(cmd)}")
    rows = [r for r in csv.DictReader(io.StringIO(p.stdout)) if r.get("mode")]
    for r in rows:
        if r["exact"] != "1":
            raise SystemExit(f"sim_hier: inexact result {r} ({' '.join(cmd)})")
    algos = dict(re.findall(r"skipring_sim: mode (\w+) ran algo (\w*)", p.stderr))
    algos["mpi"] = "smpi"
    return rows, algos


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("sim_hier: matplotlib not importable, no figure")
        return
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    style = {"hier": "o-", "skip": "s-", "ring": "^--", "mpi": "x:", "auto": "+-"}
    for rate in sorted({float(r["reduce_gbps"]) for r in rows}):
        sub = [r for r in rows if float(r["reduce_gbps"]) == rate]
        sizes = sorted({int(r["bytes"]) for r in sub})
        for mode in MODES:
            pts = [(int(r["bytes"]), float(r["t_us"])) for r in sub if r["mode"] == mode]
            pts.sort()
            ax.plot([b / 1024 for b, _ in pts], [b / t / 1e3 for b, t in pts], style[mode],
                    label=f"{mode}" + (f" ({rate:g} GB/s red.)" if rate != 50 else ""))
        for flat in ("skip", "ring"):
            t = {(r["mode"], int(r["bytes"])): float(r["t_us"]) for r in sub}
            ax2.plot([s / 1024 for s in sizes], [t[(flat, s)] / t[("hier", s)] for s in sizes],
                     style[flat], label=f"hier over flat {flat}: measured")
        mh = [model_us("skip", H_M[0], H_M[1], s) / model_us("hier", H_M[0], H_M[1], s)
              for s in sizes]
        ax2.plot([s / 1024 for s in sizes], mh, "k:", label="alpha-beta model")
    ticks = sorted({int(r["bytes"]) / 1024 for r in rows})
    labels = [f"{int(k // 1024)}M" if k >= 1024 else f"{int(k)}K" for k in ticks]
    for a_ in (ax, ax2):
        a_.set_xscale("log", base=2)
        a_.set_xticks(ticks)
        a_.set_xticklabels(labels)
    ax.set_xlabel("message size")
    ax.set_ylabel("algorithm bandwidth S / t (GB/s)")
    ax.set_title(f"all-reduce on {PLATFORM}: {H_M[0]} nodes x {H_M[1]} ranks, shared 100G uplink")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax2.axhline(1.0, color="grey", lw=0.8)
    ax2.set_xlabel("message size")
    ax2.set_ylabel("speed-up of hier over the flat ring")
    ax2.set_title("hier vs flat ring")
    ax2.grid(True, alpha=0.3)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"wrote {os.path.relpath(path, REPO)}")


PLATFORM = "hier-4x4"
H_M = (4, 4)


def table(rows):
    lines = ["| size | hier | skip | ring | mpi | auto (ran) | hier vs skip | hier vs ring | model hier / flat |",
             "|---|---|---|---|---|---|---|---|---|"]
    for b in sorted({int(r["bytes"]) for r in rows}):
        by = {r["mode"]: r for r in rows if int(r["bytes"]) == b}
        size = f"{b // 1048576} MiB" if b >= 1048576 else f"{b // 1024} KiB"
        t = {m: float(by[m]["t_us"]) for m in MODES}
        lines.append(f"| {size} | {t['hier']:.1f} | {t['skip']:.1f} | {t['ring']:.1f} | "
                     f"{t['mpi']:.1f} | {t['auto']:.1f} ({by['auto']['algo']}) | "
                     f"{t['skip'] / t['hier']:.2f}x | {t['ring'] / t['hier']:.2f}x | {by['hier']['model_us']} / "
                     f"{by['skip']['model_us']} |")
    return "\n".join(lines)


def main(argv):
    global PLATFORM, H_M
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--plot-only", action="store_true")
    ap.add_argument("--iters", type=int, default=1,
                    help="measured iterations (deterministic: they agree to the ns)")
    ap.add_argument("--reduce-gbps", type=float, default=50.0)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--ranks-per-node", type=int, default=4)
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "data", "sim_hier.csv"))
    ap.add_argument("--fig", default=os.path.join(REPO, "docs", "figures", "sim_hier.png"))
    a = ap.parse_args(argv)
    h, m = a.nodes, a.ranks_per_node
    H_M = (h, m)
    PLATFORM = f"hier-{h}x{m}"
    if a.plot_only:
        with open(a.out, newline="") as f:
            rows = list(csv.DictReader(f))
        print(table(rows))
        plot(rows, a.fig)
        return 0
    build = os.environ.get("SIM_BUILD_DIR", "build-sim")
    if not os.path.isabs(build):
        build = os.path.join(REPO, build)
    driver = os.path.join(build, "apps", "skipring_sim")
    if not os.path.exists(driver):
        subprocess.run(["bash", os.path.join(REPO, "scripts", "sim_build.sh")], check=True)
    stem = os.path.join(REPO, "sim", "platforms", PLATFORM)
    if not os.path.exists(stem + ".xml"):
        subprocess.run([sys.executable, os.path.join(REPO, "sim", "make_hier_platform.py"),
                        str(h), str(m)], check=True, stdout=subprocess.DEVNULL)
    sizes = ["64K", "1M", "16M"] if a.quick else ["64K", "256K", "1M", "4M", "16M", "64M"]
    out = []
    for size in sizes:
        rows, algos = run(h * m, m, driver, stem, size, a.iters, a.reduce_gbps)
        nbytes = int(rows[0]["bytes"])
        for mode in MODES:
            t = statistics.median(float(r["t_total_us"]) for r in rows if r["mode"] == mode)
            mod = model_us(mode, h, m, nbytes)
            out.append({"platform": PLATFORM, "n": h * m, "nodes": h, "ranks_per_node": m,
                        "bytes": nbytes, "reduce_gbps": a.reduce_gbps, "mode": mode,
                        "algo": algos.get(mode, ""), "t_us": f"{t:.3f}",
                        "algbw_GBps": f"{nbytes / (t * 1e-6) / 1e9:.3f}",
                        "model_us": "" if mod is None else f"{mod:.1f}"})
            print(",".join(str(v) for v in out[-1].values()), flush=True)
    print()
    print(table(out))
    if a.quick:
        return 0
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(out[0].keys()))
        w.writeheader()
        w.writerows(out)
    print(f"wrote {os.path.relpath(a.out, REPO)} ({len(out)} rows)")
    plot(out, a.fig)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
