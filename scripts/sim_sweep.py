#!/usr/bin/env python3
"""SimGrid sweeps of skipring's real implementation (issue 4): the paper's figures 7-10,
late arrival against L = (n-1)/n*S*beta, and no-straggler scaling against the alpha-beta model.

Every point runs build-sim/apps/skipring_sim under scripts/sim_run.sh (SMPI, CM02 alpha-beta
network, 100 Gbit/s links, 5 us latency; every time is simulated). Medians over --iters
iterations. CSVs go to docs/data/sim_*.csv, PNGs to docs/figures/sim_*.png.

    python3 scripts/sim_sweep.py                 # every sweep (installs SimGrid, builds build-sim/)
    python3 scripts/sim_sweep.py --only paper    # paper | alpha | late | scaling | scaling_big
    python3 scripts/sim_sweep.py --quick         # fewer points, smaller rings (smoke run)
"""
import argparse
import csv
import io
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from straggler_demo import parse_size  # noqa: E402  (K/M/G sizes, as skipring_bench reads them)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVER = os.path.join(REPO, "build-sim", "apps", "skipring_sim")

# The paper's setting (seed 000, section 3): T = 3 us per step, 8 KB packets, 100 Gbit/s links,
# T_trans = 5 us latency + packet time.
PIECE = 8192
LINK_BPS = 100e9 / 8  # bytes per second
LATENCY = 5e-6
T_PAPER = 3e-6
T_TRANS = LATENCY + PIECE / LINK_BPS
REDUCE_GBPS_PAPER = PIECE / T_PAPER / 1e9  # reduce time T per 8 KB piece
# Late-arrival and scaling runs are about the network: reductions at 50 GB/s stay off the
# critical path (a 100 Gbit/s link moves 12.5 GB/s).
REDUCE_GBPS_FAST = 50.0


def progress(msg):
    sys.stderr.write("\r\033[K" + msg if sys.stderr.isatty() else msg + "\n")
    sys.stderr.flush()


def run_driver(n, args, env_extra):
    env = dict(os.environ)
    env.update({k: str(v) for k, v in env_extra.items()})
    cmd = ["bash", os.path.join(REPO, "scripts", "sim_run.sh"), "-np", str(n), DRIVER] + args
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-2000:] + p.stderr[-4000:])
        raise SystemExit(f"sim_sweep: failed ({p.returncode}): {' '.join(cmd)}")
    rows = [r for r in csv.DictReader(io.StringIO(p.stdout)) if r.get("mode")]
    for r in rows:
        if r["exact"] != "1":
            raise SystemExit(f"sim_sweep: inexact result: {r} ({' '.join(cmd)})")
    return rows, wall


def med(rows, mode, key):
    vals = [float(r[key]) for r in rows if r["mode"] == mode and r[key] not in ("", "nan")]
    return statistics.median(vals) if vals else float("nan")


def write_csv(path, header, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    print(f"wrote {os.path.relpath(path, REPO)} ({len(rows)} rows)")


def model_tdec(delta, theta):
    """Eq. (1)/(2) of the paper with the threshold the implementation used (theta = aT+T_trans
    in the paper). Returns (T_dec, which equation)."""
    if T_PAPER + delta > theta:
        return T_PAPER + T_TRANS, "1"
    # Eq. (2): T+dT+2Tt+2T - (theta+Tt+T)
    return delta + 2 * T_PAPER + T_TRANS - theta, "2"


def paper_env(alpha):
    # The paper's threshold alpha*T + T_trans with its T and T_trans given (the learnt T would be
    # the whole step, transfer included).
    return {"SKIPRING_ALPHA": alpha, "SKIPRING_SIM_REDUCE_GBPS": f"{REDUCE_GBPS_PAPER:.6f}",
            "SKIPRING_SKIP_MIN_WAIT_US": 0, "SKIPRING_SEGMENT_BYTES": PIECE,
            "SKIPRING_SKIP_T_US": T_PAPER * 1e6, "SKIPRING_SKIP_TTRANS_US": f"{T_TRANS * 1e6:.4f}"}


def sweep_paper(a, deltas, alphas, name):
    """Reduce-scatter time of plain ring and skip-ahead, one rank slow at one RS step (the
    paper's figures 7-9), n = 4, one 8 KB piece per chunk."""
    n = 4
    out = []
    total = len(deltas) * len(alphas)
    k = 0
    for alpha in alphas:
        for d in deltas:
            k += 1
            progress(f"[{name} {k}/{total}] alpha={alpha} dT={d}us")
            args = ["--bytes", str(n * PIECE), "--mode", "skip,ring", "--iters", str(a.iters),
                    "--warmup", "8"]
            if d > 0:
                args += ["--inject", f"rank=1,delay={d}us,at=rs,step=0"]
            rows, _ = run_driver(n, args, paper_env(alpha))
            ring = med(rows, "ring", "t_rs_us")
            skip = med(rows, "skip", "t_rs_us")
            theta = med(rows, "skip", "threshold_us")
            skips = med(rows, "skip", "skips")
            tdec = ring - skip
            mt, eq = model_tdec(d * 1e-6, theta * 1e-6)
            mt *= 1e6
            out.append([n, alpha, d, f"{ring:.3f}", f"{skip:.3f}", f"{tdec:.3f}",
                        f"{tdec / ring:.4f}", f"{theta:.3f}", f"{skips:g}", eq, f"{mt:.3f}",
                        f"{mt / ring:.4f}", f"{(tdec / mt) if mt > 0 else float('nan'):.3f}"])
    progress(f"[{name}] done\n")
    header = ["n", "alpha", "delta_t_us", "t_ring_rs_us", "t_skip_rs_us", "t_dec_us", "ratio",
              "threshold_us", "skips", "model_eq", "model_t_dec_us", "model_ratio",
              "measured_over_model"]
    write_csv(os.path.join(a.data, f"sim_{name}.csv"), header, out)
    return header, out


# SMPI's own MPI_Allreduce algorithms, next to skipring on the same platform (SIM_CFG, read by
# scripts/sim_run.sh): "mpi" = SMPI's default, "lr" = its logical ring, "ompi" = Open MPI's
# decision table (coll-selector:ompi).
SMPI_ALGOS = {"mpi": "", "lr": "--cfg=smpi/allreduce:lr", "ompi": "--cfg=smpi/coll-selector:ompi"}


def run_smpi(n, base_args, algo, iters):
    """One SMPI MPI_Allreduce algorithm (mode mpi under SIM_CFG); returns (rows, wall)."""
    args = list(base_args) + ["--mode", "mpi", "--iters", str(iters), "--warmup", "1"]
    env = {"SKIPRING_SIM_REDUCE_GBPS": REDUCE_GBPS_FAST}
    cfg = (os.environ.get("SIM_CFG", "") + " " + SMPI_ALGOS[algo]).strip()
    if cfg:
        env["SIM_CFG"] = cfg
    return run_driver(n, args, env)


def sweep_late(a, ns, big):
    """One rank arriving late: time from the last arrival to completion, against L; next to it
    SMPI's own MPI_Allreduce (default, lr ring, ompi selector) up to --smpi-max-n ranks."""
    out = []
    algos = [x for x in SMPI_ALGOS if x in a.smpi_algos]
    header = (["n", "bytes", "late_us", "skip_after_us", "ring_after_us"]
              + [f"{x}_after_us" for x in algos] + ["L_us", "skip_over_L", "ring_over_L"]
              + [f"{x}_over_L" for x in algos] + ["skip_over_ring", "skips", "wall_s"])
    for i, n in enumerate(ns):
        size = big if n <= 64 else min(big, 8 << 20)
        late_us = 20000
        base = ["--bytes", str(size), "--late-rank", "1", "--late-us", str(late_us)]
        progress(f"[late {i + 1}/{len(ns)}] n={n} skip,ring")
        rows, wall = run_driver(n, base + ["--mode", "skip,ring", "--iters", str(a.iters),
                                           "--warmup", str(a.warmup)],
                                {"SKIPRING_SIM_REDUCE_GBPS": REDUCE_GBPS_FAST})
        L = (n - 1) / n * size / LINK_BPS * 1e6
        skip, ring = (med(rows, m, "t_after_last_arrival_us") for m in ("skip", "ring"))
        smpi = {}
        for algo in a.smpi_algos:
            # SMPI's default MPI_Allreduce (reduce + bcast) takes minutes of real time at 64
            # ranks with 64 MiB: only up to --smpi-default-max-n.
            limit = a.smpi_default_max_n if algo == "mpi" else a.smpi_max_n
            if n > limit:
                smpi[algo] = (float("nan"), 0.0)
                continue
            progress(f"[late {i + 1}/{len(ns)}] n={n} SMPI {algo}")
            r, w = run_smpi(n, base, algo, a.smpi_iters)
            smpi[algo] = (med(r, "mpi", "t_after_last_arrival_us"), w)
        row = [n, size, late_us, f"{skip:.1f}", f"{ring:.1f}"]
        row += [f"{smpi[x][0]:.1f}" for x in algos]
        row += [f"{L:.1f}", f"{skip / L:.3f}", f"{ring / L:.3f}"]
        row += [f"{smpi[x][0] / L:.3f}" for x in algos]
        row += [f"{skip / ring:.3f}", f"{med(rows, 'skip', 'skips'):g}",
                f"{wall + sum(v[1] for v in smpi.values()):.1f}"]
        out.append(row)
        # Written after every ring size: the 64-rank points take many minutes of real time.
        write_csv(os.path.join(a.data, "sim_late.csv"), header, out)
    progress("[late] done\n")
    return header, out


def sweep_scaling(a, ns, size, name="scaling", big_n=None, mpi_max_n=256):
    """No straggler: all-reduce time against the alpha-beta model of the ring,
    2(n-1)/n*S/B + 2(n-1)*latency. big_n: from this ring size on, S = 8 MiB (memory: every
    simulated rank holds its buffers). SMPI's MPI_Allreduce only up to mpi_max_n ranks."""
    out = []
    header = ["n", "bytes", "skip_us", "ring_us", "mpi_us", "model_us", "skip_over_model",
              "ring_over_model", "skip_over_ring", "skips", "wall_s"]
    for i, n in enumerate(ns):
        sz = min(size, 8 << 20) if big_n is not None and n >= big_n else size
        modes = "skip,ring,mpi" if n <= mpi_max_n else "skip,ring"
        progress(f"[{name} {i + 1}/{len(ns)}] n={n} {sz} B {modes}")
        args = ["--bytes", str(sz), "--mode", modes, "--iters", str(a.iters), "--warmup", str(a.warmup)]
        rows, wall = run_driver(n, args, {"SKIPRING_SIM_REDUCE_GBPS": REDUCE_GBPS_FAST})
        model = (2 * (n - 1) * LATENCY + 2 * (n - 1) / n * sz / LINK_BPS) * 1e6
        skip, ring, mpi = (med(rows, m, "t_total_us") for m in ("skip", "ring", "mpi"))
        out.append([n, sz, f"{skip:.1f}", f"{ring:.1f}", f"{mpi:.1f}", f"{model:.1f}",
                    f"{skip / model:.3f}", f"{ring / model:.3f}", f"{skip / ring:.3f}",
                    f"{med(rows, 'skip', 'skips'):g}", f"{wall:.1f}"])
        write_csv(os.path.join(a.data, f"sim_{name}.csv"), header, out)
    progress(f"[{name}] done\n")
    return header, out


def plots(a, results):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(a.figures, exist_ok=True)

    def save(fig, name):
        path = os.path.join(a.figures, name)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        print(f"wrote {os.path.relpath(path, REPO)}")

    def ratio_plot(rows, group, x, group_label, xlabel, title, name):
        # Measured T_dec/T_ring (column 6) and eq. (1)/(2) (column 11), one line pair per group.
        fig, ax = plt.subplots(figsize=(6, 4))
        for g in sorted({float(r[group]) for r in rows}):
            sel = [r for r in rows if float(r[group]) == g]
            xs = [float(r[x]) for r in sel]
            line, = ax.plot(xs, [100 * float(r[6]) for r in sel], "o-",
                            label="measured, " + group_label.format(g))
            ax.plot(xs, [100 * float(r[11]) for r in sel], "--", color=line.get_color(),
                    alpha=0.6, label="eq. (1)/(2), " + group_label.format(g))
        ax.set_xlabel(xlabel)
        ax.set_ylabel("T_dec / T_ring (%)")
        ax.set_title(title)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        save(fig, name)

    if "paper" in results:
        h, rows = results["paper"]
        alphas = sorted({float(r[1]) for r in rows})
        # Fig. 7: RS time over dT (one alpha), fig. 8: ratio over dT for several alpha.
        fig, ax = plt.subplots(figsize=(6, 4))
        a0 = 2.0 if 2.0 in alphas else alphas[0]
        sel = [r for r in rows if float(r[1]) == a0]
        ax.plot([float(r[2]) for r in sel], [float(r[3]) for r in sel], "o-", label="plain ring")
        ax.plot([float(r[2]) for r in sel], [float(r[4]) for r in sel], "s-",
                label=f"skip-ahead (alpha={a0:g})")
        ax.set_xlabel("delta T (us)")
        ax.set_ylabel("reduce-scatter time (us)")
        ax.set_title("Fig. 7: n=4, 8 KB pieces, T=3 us, 100 Gbit/s, 5 us")
        ax.legend()
        ax.grid(alpha=0.3)
        save(fig, "sim_fig7_rs_time.png")
        ratio_plot(rows, group=1, x=2, group_label="alpha={:g}", xlabel="delta T (us)",
                   title="Fig. 8/10: optimisation ratio over delta T",
                   name="sim_fig8_ratio_vs_delta.png")
    if "alpha" in results:
        h, rows = results["alpha"]
        ratio_plot(rows, group=2, x=1, group_label="dT={:g} us", xlabel="alpha",
                   title="Fig. 9: optimisation ratio over alpha", name="sim_fig9_ratio_vs_alpha.png")
    if "late" in results:
        h, rows = results["late"]
        col = {k: j for j, k in enumerate(h)}
        fig, ax = plt.subplots(figsize=(6, 4))
        ns = [int(r[0]) for r in rows]
        for key, lab, mk in (("skip_over_L", "skip-ahead", "o-"), ("ring_over_L", "plain ring", "s-"),
                             ("mpi_over_L", "SMPI MPI_Allreduce (default)", "^-"),
                             ("lr_over_L", "SMPI lr ring", "v-"),
                             ("ompi_over_L", "SMPI ompi selector", "d-")):
            if key not in col:
                continue
            pts = [(n, float(r[col[key]])) for n, r in zip(ns, rows) if r[col[key]] != "nan"]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], mk, label=lab)
        ax.axhline(1.0, color="k", lw=0.8, label="bound L")
        ax.axhline(1.3, color="k", lw=0.8, ls=":", label="skip-ahead target 1.3 L")
        ax.axhline(2.2, color="k", lw=0.8, ls="--", label="plain ring target 2.2 L")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ranks")
        ax.set_ylabel("time after last arrival / L")
        ax.set_title("Late arrival (S = " + ", ".join(sorted({f"{int(r[1]) >> 20} MiB"
                                                              for r in rows})) + ")")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        save(fig, "sim_late_arrival.png")
    for name in ("scaling", "scaling_big"):
        if name not in results:
            continue
        h, rows = results[name]
        fig, ax = plt.subplots(figsize=(6, 4))
        ns = [int(r[0]) for r in rows]
        for col, lab in ((6, "skip-ahead"), (7, "plain ring")):
            ax.plot(ns, [float(r[col]) for r in rows], "o-", label=lab)
        mp = [(n, float(r[4]) / float(r[5])) for n, r in zip(ns, rows) if r[4] != "nan"]
        if mp:
            ax.plot([p[0] for p in mp], [p[1] for p in mp], "^-", label="SMPI MPI_Allreduce")
        ax.axhline(1.0, color="k", lw=0.8, label="alpha-beta ring time")
        ax.axhline(1.10, color="k", lw=0.8, ls=":", label="target 1.10x")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ranks")
        ax.set_ylabel("time / (2(n-1)/n S/B + 2(n-1) lat)")
        sizes = ", ".join(f"{int(r[1]) >> 20} MiB at n={r[0]}" for r in rows)
        ax.set_title(f"No straggler ({sizes})", fontsize=8)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        save(fig, f"sim_{name}.png")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="paper,alpha,late,scaling,scaling_big")
    ap.add_argument("--quick", action="store_true", help="few points, small rings")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3,
                    help="warm-up calls before the measured ones in the late and scaling sweeps "
                         "(simulated time is deterministic; --iters 1 --warmup 2 cuts the real "
                         "time of a 64-rank 64 MiB point to about 10 min here)")
    ap.add_argument("--data", default=os.path.join(REPO, "docs", "data"))
    ap.add_argument("--figures", default=os.path.join(REPO, "docs", "figures"))
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--no-build", action="store_true",
                    help="do not run setup.sh / sim_build.sh first")
    ap.add_argument("--max-n", type=int, default=256, help="largest ring in late/scaling sweeps")
    ap.add_argument("--late-ns", default="",
                    help="ring sizes of the late sweep, comma-separated (default 8,16,64,256 up "
                         "to --max-n); the CSV then holds only these rows")
    ap.add_argument("--late-bytes", default="64M",
                    help="message size of the late-arrival sweep (K/M suffix); 256 ranks use "
                         "8M (memory: every simulated rank holds its buffers)")
    ap.add_argument("--scaling-bytes", default="64M",
                    help="message size of the scaling_big sweep (no straggler, n = 8, 16, 64 "
                         "at this size, 256 at 8M)")
    ap.add_argument("--smpi-algos", default="mpi,lr,ompi",
                    help="SMPI MPI_Allreduce variants in the late sweep: mpi (SMPI default), "
                         "lr (--cfg=smpi/allreduce:lr), ompi (--cfg=smpi/coll-selector:ompi)")
    ap.add_argument("--smpi-max-n", type=int, default=64,
                    help="largest ring for SMPI's lr/ompi in the late sweep")
    ap.add_argument("--smpi-default-max-n", type=int, default=16,
                    help="largest ring for SMPI's default MPI_Allreduce in the late and "
                         "scaling_big sweeps (minutes of real time per point at 64 x 64 MiB)")
    ap.add_argument("--smpi-iters", type=int, default=2,
                    help="iterations of each SMPI algorithm (simulated time is deterministic)")
    ap.add_argument("--plot-only", action="store_true",
                    help="redraw the PNGs from the CSVs already in --data")
    a = ap.parse_args()
    if not a.plot_only and not a.no_build:
        # One command from a fresh clone: SimGrid and matplotlib if missing, build-sim/ (both
        # incremental and quiet when already there).
        subprocess.run(["bash", os.path.join(REPO, "scripts", "setup.sh"), "simgrid", "plots"],
                       check=True)
        subprocess.run(["bash", os.path.join(REPO, "scripts", "sim_build.sh")], check=True,
                       stdout=subprocess.DEVNULL)
    if not os.path.exists(DRIVER) and not a.plot_only:
        raise SystemExit(f"sim_sweep: {DRIVER} missing: run scripts/sim_build.sh first")
    only = set(a.only.split(","))
    a.smpi_algos = [x for x in a.smpi_algos.split(",") if x]
    for x in a.smpi_algos:
        if x not in SMPI_ALGOS:
            raise SystemExit(f"sim_sweep: unknown SMPI algorithm '{x}' ({', '.join(SMPI_ALGOS)})")
    results = {}
    if a.plot_only:
        for name in ("paper", "alpha", "late", "scaling", "scaling_big"):
            path = os.path.join(a.data, f"sim_{name}.csv")
            if name in only and os.path.exists(path):
                with open(path) as f:
                    rows = list(csv.reader(f))
                results[name] = (rows[0], rows[1:])
        plots(a, results)
        return
    if a.quick:
        a.iters = min(a.iters, 3)
    if "paper" in only:
        deltas = [0, 5, 10, 20] if a.quick else [0, 2, 4, 6, 8, 10, 12, 15, 20, 25, 30, 40, 60, 100]
        alphas = [2.0] if a.quick else [1.25, 1.5, 2.0, 3.0]
        results["paper"] = sweep_paper(a, deltas, alphas, "paper")
    if "alpha" in only:
        alphas = [1.5, 3.0] if a.quick else [1.1, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0]
        deltas = [10] if a.quick else [8, 15, 40]
        results["alpha"] = sweep_paper(a, deltas, alphas, "alpha")
    if "late" in only:
        size = 1 << 20 if a.quick else parse_size(a.late_bytes)
        late_ns = ([int(x) for x in a.late_ns.split(",") if x] if a.late_ns
                   else [8] if a.quick else [8, 16, 64, 256])
        results["late"] = sweep_late(a, [n for n in late_ns if n <= a.max_n], size)
    if "scaling" in only:
        results["scaling"] = sweep_scaling(a, [n for n in ([4, 8] if a.quick else [4, 8, 16, 64, 256])
                                               if n <= a.max_n],
                                           1 << 20)
    if "scaling_big" in only:
        ns = [8] if a.quick else [8, 16, 64, 256]
        size = 1 << 20 if a.quick else parse_size(a.scaling_bytes)
        results["scaling_big"] = sweep_scaling(a, [n for n in ns if n <= a.max_n], size,
                                               name="scaling_big", big_n=256,
                                               mpi_max_n=a.smpi_default_max_n)
    if not a.no_plots:
        plots(a, results)


if __name__ == "__main__":
    main()
