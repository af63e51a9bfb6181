#!/usr/bin/env python3
"""Real-run straggler sweeps on this machine: skip-ahead vs plain ring vs MPI_Allreduce.

Two sweeps, each point run R times with scripts/mpirun.sh (np ranks, default 4) and
skipring_bench's straggler mode (the three variants interleaved per iteration):

  delta  one rank slowed by dT at every reduce-scatter step (--inject "rank=1,delay=dT,at=rs"),
         dT in {0, 0.5, 1, 2, 5, 10} ms, 4 MiB;
  late   one rank arriving late at every call (--late-rank 1 --late-ms L),
         L in {0, 10, 25, 50, 100} ms, 64 MiB.

The time of a run is skipring_bench's p50 over iterations of "after last arrival" (max over
ranks of the return time minus max over ranks of the entry time); a point's value is the
median over its R runs, with the smallest and largest run shown as the spread. Ratios
(skip/ring, skip/mpi) are the median of the per-run ratios (both variants measured in the
same run). Runs go round-robin over the points (repeat 1 of every point, then repeat 2, ...)
so that slow drifts of the machine's load spread over all points.

Writes (defaults): docs/data/real_delta_sweep.csv, docs/data/real_late_sweep.csv (medians),
docs/data/real_sweep_runs.csv (every run, with the 1-minute load average before it),
docs/figures/real_delta_sweep.png, docs/figures/real_late_sweep.png. --quick runs a small
smoke sweep (1 repeat, 2 points per sweep, few iterations, late sweep at 16 MiB) and writes
under build-release/real_sweep_quick/ instead, so it never overwrites the committed data.
Progress goes to stderr. Exits non-zero if a run fails, any variant returns a wrong element,
or the plain ring skips.

Usage: scripts/real_sweep.py [--bench build-release/apps/skipring_bench] [--repeat 3] [--quick]
"""
import argparse
import csv
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import straggler_demo as sd  # noqa: E402  (run / check helpers shared with the demo)

ROOT = sd.ROOT

RUN_FIELDS = [
    "sweep", "param_ms", "repeat", "size_bytes", "nranks", "straggler", "iters", "warmup",
    "load_1m",
    "skip_after_p50_us", "ring_after_p50_us", "mpi_after_p50_us",
    "skip_after_p99_us", "ring_after_p99_us", "mpi_after_p99_us",
    "skip_total_p50_us", "ring_total_p50_us", "mpi_total_p50_us",
    "skip_over_ring", "skip_over_mpi", "skip_skips_per_iter", "skip_late_pieces_per_iter",
    "ring_skips_per_iter", "ring_late_pieces_per_iter", "skip_wrong", "ring_wrong", "mpi_wrong",
]


def parse_ms_list(text):
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of ms: '{text}'") from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"need non-negative values: '{text}'")
    return values


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--bench", default=os.path.join(ROOT, "build-release", "apps",
                                                    "skipring_bench"))
    ap.add_argument("--np", type=int, default=4, help="ranks (default 4)")
    ap.add_argument("--repeat", type=int, default=None, help="runs per point (default 3)")
    ap.add_argument("--quick", action="store_true", help="small smoke sweep (see above)")
    ap.add_argument("--only", choices=["delta", "late"], help="run one sweep only")
    ap.add_argument("--straggler", type=int, default=1, help="the slow / late rank (default 1)")
    ap.add_argument("--delta-size", type=sd.parse_size, default=None,
                    help="delta sweep message size (default 4M)")
    ap.add_argument("--delta-ms", type=parse_ms_list, default=None,
                    help="delta sweep delays per RS step (default 0,0.5,1,2,5,10)")
    ap.add_argument("--delta-iters", type=int, default=None,
                    help="timed iterations per delta run (default 20)")
    ap.add_argument("--late-size", type=sd.parse_size, default=None,
                    help="late sweep message size (default 64M)")
    ap.add_argument("--late-ms", type=parse_ms_list, default=None,
                    help="late sweep arrival delays (default 0,10,25,50,100)")
    ap.add_argument("--late-iters", type=int, default=None,
                    help="timed iterations per late run (default 10)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed iterations (default 2)")
    ap.add_argument("--data-dir", default=None, help="CSV output (default docs/data)")
    ap.add_argument("--fig-dir", default=None, help="PNG output (default docs/figures)")
    ap.add_argument("--work-dir", default=None,
                    help="per-run JSON and logs (default build-release/real_sweep)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per mpirun (default 600)")
    ap.add_argument("--from-runs", metavar="CSV",
                    help="run nothing: redo the medians, tables and figures from a "
                         "real_sweep_runs.csv written by an earlier sweep")
    args = ap.parse_args()

    quick = {"repeat": 1, "delta_size": sd.parse_size("4M"), "delta_ms": [0.0, 2.0],
             "delta_iters": 5, "late_size": sd.parse_size("16M"), "late_ms": [0.0, 50.0],
             "late_iters": 3, "warmup": 1}
    full = {"repeat": 3, "delta_size": sd.parse_size("4M"),
            "delta_ms": [0.0, 0.5, 1.0, 2.0, 5.0, 10.0], "delta_iters": 20,
            "late_size": sd.parse_size("64M"), "late_ms": [0.0, 10.0, 25.0, 50.0, 100.0],
            "late_iters": 10, "warmup": 2}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    out = os.path.join(ROOT, "build-release", "real_sweep_quick") if args.quick else None
    args.data_dir = args.data_dir or out or os.path.join(ROOT, "docs", "data")
    args.fig_dir = args.fig_dir or out or os.path.join(ROOT, "docs", "figures")
    args.work_dir = args.work_dir or os.path.join(
        out or os.path.join(ROOT, "build-release", "real_sweep"), "runs")
    if args.np < 3:
        ap.error("--np must be at least 3")
    if not 0 <= args.straggler < args.np:
        ap.error("--straggler must be a rank of --np")
    if min(args.repeat, args.delta_iters, args.late_iters) < 1 or args.warmup < 0:
        ap.error("--repeat and iterations must be positive, --warmup non-negative")
    return args


def sweep_points(args):
    """[(sweep, param_ms, size, iters, skipring_bench straggler arguments)]"""
    r = args.straggler
    points = []
    if args.only in (None, "delta"):
        for d in args.delta_ms:
            points.append(("delta", d, args.delta_size, args.delta_iters,
                           ["--inject", f"rank={r},delay={d:g}ms,at=rs"]))
    if args.only in (None, "late"):
        for late in args.late_ms:
            points.append(("late", late, args.late_size, args.late_iters,
                           ["--late-rank", str(r), "--late-ms", f"{late:g}"]))
    return points


def summarize_point(runs):
    """Medians (and spread) over one point's runs; times in ms."""
    s = {}
    for v in sd.VARIANTS:
        p50 = [run[f"{v}_after_p50_us"] / 1e3 for run in runs]
        s[f"{v}_p50_ms"] = sd.median(p50)
        s[f"{v}_p50_min_ms"] = min(p50)
        s[f"{v}_p50_max_ms"] = max(p50)
        s[f"{v}_p99_ms"] = sd.median([(run.get(f"{v}_after_p99_us") or float("nan")) / 1e3
                                      for run in runs])
    for key in ("skip_over_ring", "skip_over_mpi"):
        values = [run.get(key) or float("nan") for run in runs]
        s[key] = sd.median(values)
        s[key + "_min"] = min(values)
        s[key + "_max"] = max(values)
    s["skips_per_iter"] = sd.median([run.get("skip_skips_per_iter") for run in runs])
    s["late_pieces_per_iter"] = sd.median([run.get("skip_late_pieces_per_iter") for run in runs])
    s["wrong"] = sum(run[f"{v}_wrong"] for run in runs for v in sd.VARIANTS)
    s["load_1m"] = sd.median([run["load_1m"] for run in runs])
    return s


SUMMARY_FIELDS = (["param_ms", "size_bytes", "nranks", "repeats", "iters"]
                  + [f"{v}_{k}" for v in sd.VARIANTS
                     for k in ("p50_ms", "p50_min_ms", "p50_max_ms", "p99_ms")]
                  + ["skip_over_ring", "skip_over_ring_min", "skip_over_ring_max",
                     "skip_over_mpi", "skip_over_mpi_min", "skip_over_mpi_max",
                     "skips_per_iter", "late_pieces_per_iter", "wrong", "load_1m"])


def write_summary(path, args, points, summaries, param_name):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([param_name if x == "param_ms" else x for x in SUMMARY_FIELDS])
        for (_, param, size, iters, _), s in zip(points, summaries):
            row = {"param_ms": param, "size_bytes": size, "nranks": args.np,
                   "repeats": args.repeat, "iters": iters, **s}
            w.writerow([fmt_cell(row[k]) for k in SUMMARY_FIELDS])


def fmt_cell(value):
    if isinstance(value, float):
        return "" if value != value else f"{value:.4g}" if abs(value) < 1e4 else f"{value:.1f}"
    return str(value)


def plot_sweep(plt, path, title, xlabel, params, summaries, mpi_note=""):
    """Two panels over the sweep's points (equally spaced, labelled with their values): p50
    times per variant, and the skip/ring and skip/MPI ratios."""
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8.5, 7.4), dpi=110, sharex=True,
                                  gridspec_kw={"height_ratios": [2.2, 1]})
    pos = list(range(len(params)))
    for i, v in enumerate(sd.VARIANTS):
        y = [s[f"{v}_p50_ms"] for s in summaries]
        lo = [s[f"{v}_p50_ms"] - s[f"{v}_p50_min_ms"] for s in summaries]
        hi = [s[f"{v}_p50_max_ms"] - s[f"{v}_p50_ms"] for s in summaries]
        # Small horizontal offsets keep the spreads of the three variants apart.
        xs = [x + (i - 1) * 0.04 for x in pos]
        ax.errorbar(xs, y, yerr=[lo, hi], marker="o", ms=5, capsize=3, lw=1.6,
                    color=sd.VARIANT_COLORS[v],
                    label=sd.VARIANT_LABELS[v] + (mpi_note if v == "mpi" else ""))
    ax.set_ylabel("time after last arrival, p50 (ms)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8.5, frameon=False, loc="best")
    ax.set_title(title, fontsize=10.5)

    for key, color, label in (("skip_over_ring", sd.VARIANT_COLORS["ring"], "skip / ring"),
                              ("skip_over_mpi", sd.VARIANT_COLORS["mpi"], "skip / MPI")):
        y = [s[key] for s in summaries]
        lo = [s[key] - s[key + "_min"] for s in summaries]
        hi = [s[key + "_max"] - s[key] for s in summaries]
        ax2.errorbar(pos, y, yerr=[lo, hi], marker="s", ms=4, capsize=3, lw=1.3,
                     color=color, label=label)
    ax2.axhline(1.0, color="black", lw=0.8)
    ax2.set_ylabel("ratio of p50\n(< 1: skip-ahead faster)", fontsize=9)
    ax2.set_xlabel(xlabel)
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=8, frameon=False, loc="upper left", ncol=2)
    ax2.set_xticks(pos)
    ax2.set_xticklabels([f"{p:g}\n{s['skips_per_iter']:.0f} skips"
                         for p, s in zip(params, summaries)], fontsize=8.5)
    fig.text(0.01, 0.005,
             "markers: median over runs of the per-run p50 (ratios: of the per-run ratios); "
             "bars: smallest..largest run.\n'skips': skip-ahead decisions per all-reduce, "
             "all ranks (median over runs). Points equally spaced.",
             fontsize=7.5, color="#444444")
    fig.tight_layout(rect=(0, 0.035, 1, 1))
    fig.savefig(path)
    plt.close(fig)


def print_table(sweep, param_label, points, summaries):
    print(f"\n{sweep} sweep (medians over runs of the p50 after last arrival, ms)")
    header = [param_label, "size", "skip-ahead", "plain ring", "MPI", "skip/ring", "skip/MPI",
              "skips/iter", "wrong"]
    lines = [[f"{p:g}", sd.fmt_size(size), sd.fmt_ms(s["skip_p50_ms"]),
              sd.fmt_ms(s["ring_p50_ms"]), sd.fmt_ms(s["mpi_p50_ms"]),
              sd.fmt_ratio(s["skip_over_ring"]), sd.fmt_ratio(s["skip_over_mpi"]),
              f"{s['skips_per_iter']:.1f}", str(s["wrong"])]
             for (_, p, size, _, _), s in zip(points, summaries)]
    widths = [max(len(r[i]) for r in [header] + lines) for i in range(len(header))]
    for r in [header, ["-" * w for w in widths]] + lines:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))


def run_sweeps(args, points):
    """Runs every point args.repeat times (round-robin); returns the rows per point. Every
    run's row is also appended to real_sweep_runs.csv as soon as it is done."""
    total = len(points) * args.repeat
    print(f"real_sweep: {args.np} ranks, {len(points)} points x {args.repeat} runs = {total} "
          f"mpirun runs; bench {sd.shown_path(args.bench)}", file=sys.stderr)
    progress = sd.Progress(total)
    runs = [[] for _ in points]
    with open(os.path.join(args.data_dir, "real_sweep_runs.csv"), "w", newline="") as runs_file:
        runs_csv = csv.DictWriter(runs_file, fieldnames=RUN_FIELDS, extrasaction="ignore")
        runs_csv.writeheader()
        for rep in range(args.repeat):
            for i, (sweep, param, size, iters, extra) in enumerate(points):
                unit = "ms per RS step" if sweep == "delta" else "ms late"
                load = os.getloadavg()[0]
                progress.begin(f"{sweep} {param:g} {unit}, {sd.fmt_size(size)}, run "
                               f"{rep + 1}/{args.repeat} (load {load:.1f})")
                tag = f"{sweep}-{param:g}ms-run{rep + 1}"
                cmd = sd.bench_command(args.bench, args.np, size, iters, args.warmup, extra)
                try:
                    row = sd.run_bench(cmd, os.path.join(args.work_dir, tag + ".json"),
                                       os.path.join(args.work_dir, tag + ".log"), args.timeout)
                except sd.DemoError:
                    progress.end("  FAILED")
                    raise
                problems = sd.row_problems(row)
                row.update(sweep=sweep, param_ms=param, repeat=rep + 1, warmup=args.warmup,
                           straggler=args.straggler, load_1m=round(load, 2))
                runs_csv.writerow({k: fmt_cell(row.get(k)) if row.get(k) is not None else ""
                                   for k in RUN_FIELDS})
                runs_file.flush()
                if problems:
                    progress.end("  FAILED")
                    raise sd.DemoError(f"{tag}: " + "; ".join(problems))
                progress.end(f"  skip/ring {sd.fmt_ratio(row.get('skip_over_ring'))}")
                runs[i].append(row)
    return runs


def read_runs(path):
    """Points and rows per point from a real_sweep_runs.csv (for --from-runs)."""
    ints = {"repeat", "size_bytes", "nranks", "straggler", "iters", "warmup", "skip_wrong",
            "ring_wrong", "mpi_wrong"}
    points, runs, index = [], [], {}
    with open(path, newline="") as f:
        for raw in csv.DictReader(f):
            row = {}
            for k, v in raw.items():
                if k == "sweep":
                    row[k] = v
                elif v == "":
                    row[k] = None
                else:
                    row[k] = int(v) if k in ints else float(v)
            key = (row["sweep"], row["param_ms"])
            if key not in index:
                index[key] = len(points)
                points.append((row["sweep"], row["param_ms"], row["size_bytes"], row["iters"],
                               None))
                runs.append([])
            runs[index[key]].append(row)
    if not points:
        raise sd.DemoError(f"no runs in {path}")
    for rows in runs:
        for row in rows:
            problems = sd.row_problems(row)
            if problems:
                raise sd.DemoError(f"{path}: {row['sweep']} {row['param_ms']:g} ms run "
                                   f"{row['repeat']}: " + "; ".join(problems))
    return points, runs


def main():
    args = parse_args()
    plt = sd.import_pyplot()  # fail (or switch to Debian's python3) before the runs
    for d in (args.data_dir, args.fig_dir, args.work_dir):
        os.makedirs(d, exist_ok=True)
    started = time.monotonic()
    runs_path = os.path.join(args.data_dir, "real_sweep_runs.csv")
    if args.from_runs:
        points, runs = read_runs(args.from_runs)
        args.repeat = max(len(r) for r in runs)
        args.np = runs[0][0]["nranks"]
        args.straggler = runs[0][0]["straggler"]
        runs_path = args.from_runs
    else:
        default_bench = os.path.join(ROOT, "build-release", "apps", "skipring_bench")
        if os.path.abspath(args.bench) == default_bench:
            # One command from a fresh clone: packages if missing, then the Release benchmark
            # (incremental; output only on failure), as scripts/demo.sh does.
            subprocess.run(["bash", os.path.join(ROOT, "scripts", "setup.sh"), "plots"],
                           check=True)
            build = os.path.join(ROOT, "build-release")
            for cmd in (["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                         "-DSKIPRING_BUILD_TESTS=OFF"],
                        ["cmake", "--build", build, "-j", str(os.cpu_count() or 2),
                         "--target", "skipring_bench"]):
                p = subprocess.run(cmd, capture_output=True, text=True)
                if p.returncode != 0:
                    sys.stderr.write(p.stdout[-4000:] + p.stderr[-4000:])
                    raise sd.DemoError("building the benchmark failed: " + " ".join(cmd))
        if not os.access(args.bench, os.X_OK):
            raise sd.DemoError(f"no benchmark at {args.bench}: build it first (see README)")
        points = sweep_points(args)
        runs = run_sweeps(args, points)

    summaries = [summarize_point(r) for r in runs]
    outputs = [runs_path]
    for sweep, param_name, param_label, xlabel in (
            ("delta", "delta_ms", "dT (ms)", "delay of rank {r} at every reduce-scatter step, "
             "dT (ms)"),
            ("late", "late_ms", "late (ms)", "rank {r} arrives late by (ms)")):
        sel = [i for i, p in enumerate(points) if p[0] == sweep]
        if not sel:
            continue
        pts = [points[i] for i in sel]
        sums = [summaries[i] for i in sel]
        csv_path = os.path.join(args.data_dir, f"real_{sweep}_sweep.csv")
        write_summary(csv_path, args, pts, sums, param_name)
        params = [p[1] for p in pts]
        size = sd.fmt_size(pts[0][2])
        what = ("slowed at every reduce-scatter step" if sweep == "delta"
                else "arrives late at every call")
        title = (f"{args.np} ranks on this machine, {size}: rank {args.straggler} {what}\n"
                 f"({args.repeat} run(s) per point, {pts[0][3]} iterations each)")
        png = os.path.join(args.fig_dir, f"real_{sweep}_sweep.png")
        plot_sweep(plt, png, title, xlabel.format(r=args.straggler), params, sums,
                   " (not slowed: --inject acts inside skipring)" if sweep == "delta" else "")
        print_table(sweep, param_label, pts, sums)
        outputs += [csv_path, png]
    print(f"\nwrong result elements over all runs: "
          f"{sum(s['wrong'] for s in summaries)}; "
          + (f"from {sd.shown_path(args.from_runs)}" if args.from_runs else
             f"{len(points) * args.repeat} runs in "
             f"{sd.fmt_duration(time.monotonic() - started)}"))
    print("wrote: " + ", ".join(sd.shown_path(p) for p in outputs[1:] if p != args.from_runs)
          + ("" if args.from_runs else f" ({sd.shown_path(runs_path)}: every run)"))


if __name__ == "__main__":
    sd.run_main(main, "real_sweep")
