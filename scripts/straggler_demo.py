#!/usr/bin/env python3
"""Straggler demo: skip-ahead vs plain ring vs MPI_Allreduce under four scenarios.

Runs skipring_bench under mpirun (scripts/mpirun.sh) once per scenario:

  none   no straggler                                  (skipring_bench --overhead --compare mpi)
  slow   one rank slow at every reduce-scatter step    (--inject "rank=R,delay=D,at=rs")
  late   one rank arriving late at every call          (--late-rank R --late-ms L)
  hosts  the late arrival across emulated hosts        (scripts/vcluster.sh: H network
         namespaces with their own hostnames and NICs shaped to RATE, one rank each, TCP)

In each run skipring_bench interleaves the three variants per iteration (skip-ahead, plain
ring, PMPI_Allreduce), so machine noise hits all of them alike. The time reported is the
p50 over iterations of "after last arrival" (max over ranks of the return time minus max
over ranks of the entry time). Prints a table, writes a grouped bar chart (PNG) and exits
non-zero if any variant returned a wrong element, if the plain ring skipped, or if a run
failed.

The slow rank's delay (default 20 ms) is above skipring's skip-threshold floor: with more
ranks than cores (4 ranks on a 2-core machine) a healthy rank is regularly descheduled for a
few ms, so skipring waits at least 5 ms (SKIPRING_SKIP_MIN_WAIT_US) before skipping anyone;
a smaller delay is never skipped. The hosts scenario needs root and network namespaces; where
they are unavailable it prints why and is left out (--hosts 0 leaves it out anyway).

Python 3 standard library + matplotlib (Agg) only. scripts/real_sweep.py imports the run and
check helpers below.

Usage: scripts/straggler_demo.py --bench build-release/apps/skipring_bench
           [--np 4] [--size 16M] [--iters 20] [--warmup 3] [--repeat 1]
           [--slow-rank 1] [--delay-ms 20] [--late-ms 50] [--hosts 4] [--host-rate 1gbit]
           [--host-late-ms 200] [--host-iters 5] [--out-dir build-release/demo]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEBIAN_PYTHON = "/usr/bin/python3"
VCLUSTER = os.path.join(HERE, "vcluster.sh")
# skipring's skip-threshold floor when a host has more ranks than cores (runtime/communicator.cpp).
OVERSUBSCRIBED_FLOOR_MS = 5.0

VARIANTS = ("skip", "ring", "mpi")
VARIANT_LABELS = {"skip": "skip-ahead", "ring": "plain ring", "mpi": "MPI_Allreduce"}
VARIANT_COLORS = {"skip": "#1f77b4", "ring": "#ff7f0e", "mpi": "#7f7f7f"}


class DemoError(Exception):
    """A run failed or returned wrong results: the caller exits non-zero."""


# --------------------------------------------------------------------------------------------
# Helpers shared with real_sweep.py


def import_pyplot():
    """matplotlib.pyplot with the Agg backend (no display needed).

    python3-matplotlib (scripts/setup.sh plots) installs for Debian's /usr/bin/python3; when
    this interpreter is another one (pyenv, venv) without matplotlib, re-run the script under
    /usr/bin/python3 if that one has it.
    """
    try:
        import matplotlib
    except ImportError:
        if os.path.realpath(sys.executable) != os.path.realpath(DEBIAN_PYTHON) and \
                os.path.exists(DEBIAN_PYTHON) and not os.environ.get("STRAGGLER_DEMO_REEXEC"):
            probe = subprocess.run([DEBIAN_PYTHON, "-c", "import matplotlib"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if probe.returncode == 0:
                sys.stdout.flush()
                sys.stderr.flush()
                os.environ["STRAGGLER_DEMO_REEXEC"] = "1"
                os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON] + sys.argv)
        raise DemoError("matplotlib is missing: install it with 'bash scripts/setup.sh plots' "
                        f"(Debian's python3-matplotlib, for {DEBIAN_PYTHON})")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def parse_size(text):
    """'16M' -> 16777216 (K/M/G: powers of 1024, like skipring_bench)."""
    text = text.strip()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    digits = text[:-1] if mult != 1 else text
    try:
        value = int(digits)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: '{text}'") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive: '{text}'")
    return value * mult


def fmt_size(b):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"


def fmt_ms(value):
    """Milliseconds, 3 significant digits-ish, for the tables."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def fmt_ratio(value):
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.2f}"


def fmt_duration(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def shown_path(path):
    """Relative to the current directory when inside it, else absolute."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def bench_command(bench, nranks, size, iters, warmup, scenario_args):
    return (["bash", os.path.join(HERE, "mpirun.sh"), "-np", str(nranks), bench,
             "-b", str(size), "-e", str(size), "-n", str(iters), "-w", str(warmup)]
            + list(scenario_args))


def run_bench(cmd, json_path, log_path, timeout_s):
    """Runs one skipring_bench command with --json; returns its single row (a dict).

    stdout and stderr go to log_path. Raises DemoError when the run fails, times out, or
    writes no usable JSON; wrong results are checked by row_problems().
    """
    cmd = list(cmd) + ["--json", json_path]
    if os.path.exists(json_path):
        os.unlink(json_path)
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        try:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise DemoError(f"run timed out after {timeout_s} s (log: {log_path})") from None
    rows = None
    if os.path.exists(json_path):
        try:
            with open(json_path) as f:
                rows = json.load(f)
        except ValueError:
            rows = None
    if proc.returncode != 0 or not isinstance(rows, list) or len(rows) != 1:
        # skipring_bench exits 1 on wrong results too; report those by name.
        if isinstance(rows, list) and len(rows) == 1 and row_problems(rows[0]):
            raise DemoError("; ".join(row_problems(rows[0])) + f" (log: {log_path})")
        with open(log_path) as f:
            tail = f.read().splitlines()[-25:]
        raise DemoError(f"skipring_bench failed (exit code {proc.returncode}); last lines of "
                        f"{log_path}:\n    " + "\n    ".join(tail))
    return rows[0]


def row_problems(row):
    """What is wrong with one skipring_bench row: wrong elements, skips in the plain ring,
    missing measurements. Empty list: the row is good."""
    problems = []
    for v in VARIANTS:
        wrong = row.get(f"{v}_wrong")
        if wrong is None:
            problems.append(f"{VARIANT_LABELS[v]}: results were not checked")
        elif wrong != 0:
            problems.append(f"{VARIANT_LABELS[v]}: {wrong} WRONG result elements")
        p50 = row.get(f"{v}_after_p50_us")
        if p50 is None or not math.isfinite(p50):
            problems.append(f"{VARIANT_LABELS[v]}: no time measured")
    for key in ("ring_skips_per_iter", "ring_late_pieces_per_iter"):
        if row.get(key) not in (0, 0.0):
            problems.append(f"plain ring (skip-ahead off) reports {key} = {row.get(key)}")
    if row.get("skip_skips_per_iter") is None:
        problems.append("skip-ahead: no skip statistics")
    return problems


def median(values):
    values = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(values) if values else float("nan")


class Progress:
    """One line per finished run on stderr, with the elapsed time and an estimate of the rest."""

    def __init__(self, total, stream=sys.stderr):
        self.total = total
        self.done = 0
        self.start = time.monotonic()
        self.stream = stream

    def begin(self, label):
        self.stream.write(f"[{self.done + 1:>{len(str(self.total))}}/{self.total}] {label} ... ")
        self.stream.flush()
        self._t0 = time.monotonic()

    def end(self, note=""):
        self.done += 1
        now = time.monotonic()
        elapsed = now - self.start
        left = elapsed / self.done * (self.total - self.done)
        eta = f", about {fmt_duration(left)} left" if self.done < self.total else ""
        self.stream.write(f"{now - self._t0:.1f} s{note} (elapsed {fmt_duration(elapsed)}{eta})\n")
        self.stream.flush()


# --------------------------------------------------------------------------------------------
# Emulated hosts (scripts/vcluster.sh)


def vcluster_up(hosts, rate):
    """Brings up `hosts` emulated hosts; returns None, or why they are unavailable (exit 77)."""
    proc = subprocess.run(["bash", VCLUSTER, "up", str(hosts), rate], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if proc.returncode == 77:
        reason = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "exit 77"
        return reason.replace("vcluster: network namespaces unavailable: ", "")
    if proc.returncode != 0:
        raise DemoError(f"scripts/vcluster.sh up {hosts} {rate} failed:\n{proc.stdout}")
    return None


def vcluster_down():
    subprocess.run(["bash", VCLUSTER, "down"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)


def hosts_bench_command(bench, size, iters, warmup, scenario_args):
    """skipring_bench across the emulated hosts, one rank per host."""
    return (["bash", VCLUSTER, "run", "-p", "1", bench, "-b", str(size), "-e", str(size),
             "-n", str(iters), "-w", str(warmup)] + list(scenario_args))


# --------------------------------------------------------------------------------------------
# The demo


def scenarios(args):
    """(key, label, short label for the plot, skipring_bench arguments)"""
    r = args.slow_rank
    return [
        ("none", "no straggler", "no straggler", ["--overhead", "--compare", "mpi"]),
        ("slow", f"rank {r} slow by {args.delay_ms:g} ms at every reduce-scatter step",
         f"rank {r} slow by {args.delay_ms:g} ms\nat every reduce-scatter step",
         ["--inject", f"rank={r},delay={args.delay_ms:g}ms,at=rs"]),
        ("late", f"rank {r} arrives {args.late_ms:g} ms late",
         f"rank {r} arrives\n{args.late_ms:g} ms late",
         ["--late-rank", str(r), "--late-ms", f"{args.late_ms:g}"]),
    ]


def summarize(rows):
    """Medians over repeats of one scenario's rows."""
    s = {}
    for v in VARIANTS:
        s[f"{v}_p50_ms"] = median([r[f"{v}_after_p50_us"] / 1e3 for r in rows])
        s[f"{v}_p99_ms"] = median([(r.get(f"{v}_after_p99_us") or float("nan")) / 1e3
                                   for r in rows])
    s["skip_over_ring"] = median([r.get("skip_over_ring") or float("nan") for r in rows])
    s["skip_over_mpi"] = median([r.get("skip_over_mpi") or float("nan") for r in rows])
    s["skips_per_iter"] = median([r.get("skip_skips_per_iter") for r in rows])
    s["late_per_iter"] = median([r.get("skip_late_pieces_per_iter") for r in rows])
    s["wrong"] = sum(r[f"{v}_wrong"] for r in rows for v in VARIANTS)
    return s


def print_table(results, labels):
    header = ["scenario", "skip-ahead", "plain ring", "MPI_Allreduce", "skip/ring", "skip/MPI",
              "skips/iter", "wrong"]
    lines = []
    for key, label in labels:
        s = results[key]
        lines.append([label, fmt_ms(s["skip_p50_ms"]) + " ms", fmt_ms(s["ring_p50_ms"]) + " ms",
                      fmt_ms(s["mpi_p50_ms"]) + " ms", fmt_ratio(s["skip_over_ring"]),
                      fmt_ratio(s["skip_over_mpi"]), f"{s['skips_per_iter']:.1f}",
                      str(s["wrong"])])
    widths = [max(len(row[i]) for row in [header] + lines) for i in range(len(header))]
    def fmt(row):
        return "  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i])
                         for i, c in enumerate(row))
    print(fmt(header))
    print("  ".join("-" * w for w in widths))
    for row in lines:
        print(fmt(row))


def plot(results, labels, args, path, host_labels=()):
    """Grouped bars per scenario; the cross-host scenario (host_labels), on another time
    scale, in a panel of its own."""
    plt = import_pyplot()
    if host_labels:
        fig, (ax, hax) = plt.subplots(1, 2, figsize=(13, 5.2), dpi=110,
                                      gridspec_kw={"width_ratios": [3, 1.25]})
    else:
        fig, ax = plt.subplots(figsize=(10.5, 5.2), dpi=110)
    draw_groups(ax, results, labels)
    ax.set_ylabel("time after last arrival, p50 (ms)")
    ax.set_title(f"{args.np} ranks on this machine, {fmt_size(args.size)} float sum, "
                 f"{args.iters} iterations x {args.repeat} run(s)", fontsize=10.5)
    if host_labels:
        draw_groups(hax, results, host_labels)
        hax.set_title(f"{args.hosts} emulated hosts x 1 rank, {args.host_rate} NICs, "
                      f"{fmt_size(args.size)}", fontsize=10.5)
        hax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)
    else:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)
    fig.suptitle("skipring straggler demo", fontsize=11.5)
    fig.text(0.01, 0.01,
             "bars: p50 over iterations (median over runs); whiskers: p99. Variants interleaved "
             "per iteration in one mpirun.\nMPI_Allreduce cannot be slowed per step: in the "
             "'slow' group it is the undisturbed reference.", fontsize=7.5, color="#444444")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path)
    plt.close(fig)


def draw_groups(ax, results, labels):
    width = 0.26
    xs = list(range(len(labels)))
    top = 0.0
    for i, v in enumerate(VARIANTS):
        p50 = [results[k][f"{v}_p50_ms"] for k, _ in labels]
        p99 = [results[k][f"{v}_p99_ms"] for k, _ in labels]
        pos = [x + (i - 1) * width for x in xs]
        up = [max(0.0, b - a) if math.isfinite(b) else 0.0 for a, b in zip(p50, p99)]
        ax.bar(pos, p50, width, color=VARIANT_COLORS[v], label=VARIANT_LABELS[v],
               yerr=[[0.0] * len(up), up], capsize=3, error_kw={"elinewidth": 0.8})
        for x, y in zip(pos, p50):
            ax.annotate(fmt_ms(y), (x, y), textcoords="offset points", xytext=(0, -3),
                        ha="center", va="top", fontsize=7.5, color="white", fontweight="bold")
        top = max([top] + [a + b for a, b in zip(p50, up) if math.isfinite(a + b)])
    for x, (k, _) in zip(xs, labels):
        ax.annotate(f"skip/ring {fmt_ratio(results[k]['skip_over_ring'])}\n"
                    f"{results[k]['skips_per_iter']:.1f} skips/iter",
                    (x, top * 1.04), ha="center", va="bottom", fontsize=8.5)
    ax.set_ylim(0, top * 1.2 if top > 0 else 1)
    ax.set_xticks(xs)
    ax.set_xticklabels([label for _, label in labels], fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def run_repeat(progress, args, rep, label, tag, cmd, problems):
    """One benchmark run of a scenario: progress line, JSON and log under --out-dir, the row's
    problems appended to `problems`. Returns the row."""
    progress.begin(label + (f" (run {rep + 1}/{args.repeat})" if args.repeat > 1 else ""))
    try:
        row = run_bench(cmd, os.path.join(args.out_dir, f"{tag}.json"),
                        os.path.join(args.out_dir, f"{tag}.log"), args.timeout)
    except DemoError:
        progress.end("  FAILED")
        raise
    bad = row_problems(row)
    problems += [f"{label}: {p}" for p in bad]
    progress.end("  FAILED: " + "; ".join(bad) if bad else "")
    return row


def run_main(main_fn, name):
    """Entry point of the demo and the scripts built on it: a DemoError is one FAILED line on
    stderr and exit 1, Ctrl-C exit 130."""
    try:
        main_fn()
    except DemoError as e:
        sys.stdout.flush()
        print(f"{name}: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--bench", default=os.path.join(ROOT, "build-release", "apps",
                                                    "skipring_bench"))
    ap.add_argument("--np", type=int, default=4, help="ranks")
    ap.add_argument("--size", type=parse_size, default=parse_size("16M"),
                    help="message size (K/M/G suffixes)")
    ap.add_argument("--iters", type=int, default=20, help="timed iterations per run")
    ap.add_argument("--warmup", type=int, default=3, help="untimed iterations per run")
    ap.add_argument("--repeat", type=int, default=1, help="runs per scenario (medians)")
    ap.add_argument("--slow-rank", type=int, default=1, help="the straggler's rank")
    ap.add_argument("--delay-ms", type=float, default=20.0,
                    help="'slow' scenario: delay at every reduce-scatter step (ms); above the "
                    f"{OVERSUBSCRIBED_FLOOR_MS:g} ms skip-threshold floor of an oversubscribed "
                    "machine")
    ap.add_argument("--late-ms", type=float, default=50.0,
                    help="'late' scenario: how late the straggler arrives (ms)")
    ap.add_argument("--hosts", type=int, default=4,
                    help="'hosts' scenario: emulated hosts, one rank each (0: leave it out)")
    ap.add_argument("--host-rate", default="1gbit", help="'hosts' scenario: NIC rate (tc syntax)")
    ap.add_argument("--host-late-ms", type=float, default=200.0,
                    help="'hosts' scenario: how late the straggler arrives (ms)")
    ap.add_argument("--host-half-ms", type=float, default=110.0,
                    help="'hosts' scenario: a second row with the straggler this late (ms): about "
                    "half the plain ring's time at 16 MiB on 4 hosts at 1 Gbit/s (227 ms); 0: "
                    "leave it out")
    ap.add_argument("--host-iters", type=int, default=5,
                    help="'hosts' scenario: timed iterations per run (1 untimed)")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "build-release", "demo"),
                    help="PNG, JSON rows and logs go here")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per mpirun")
    args = ap.parse_args()
    if args.np < 3:
        ap.error("--np must be at least 3 (skip-ahead needs a rank to go around)")
    if not 0 <= args.slow_rank < args.np:
        ap.error("--slow-rank must be a rank of --np")
    if args.iters < 1 or args.warmup < 0 or args.repeat < 1 or args.host_iters < 1:
        ap.error("--iters, --host-iters and --repeat must be positive, --warmup non-negative")
    if args.hosts != 0 and not (3 <= args.hosts <= 200 and args.slow_rank < args.hosts):
        ap.error("--hosts must be 0 or 3..200, with --slow-rank one of them")
    if not os.access(args.bench, os.X_OK):
        raise DemoError(f"no benchmark at {args.bench}: build it first "
                        "(cmake --build build-release --target skipring_bench)")
    import_pyplot()  # fail (or switch to Debian's python3) before spending time on runs
    os.makedirs(args.out_dir, exist_ok=True)

    scen = scenarios(args)
    labels = [(key, label) for key, label, _, _ in scen]
    short = [(key, text) for key, _, text, _ in scen]
    print(f"skipring straggler demo: {args.np} ranks, {fmt_size(args.size)} float sum, "
          f"{args.iters} timed iterations per run, {args.repeat} run(s) per scenario.")
    print("Each iteration runs skip-ahead, plain ring (skip-ahead off) and MPI_Allreduce in "
          "turn;\ntimes are p50 after the last rank arrived (every output element checked).")
    cores = os.cpu_count() or 0
    if args.np > cores:
        floor_env = os.environ.get("SKIPRING_SKIP_MIN_WAIT_US")
        floor_ms = float(floor_env) / 1e3 if floor_env else OVERSUBSCRIBED_FLOOR_MS
        print(f"{args.np} ranks on {cores} cores are oversubscribed: a descheduled rank is a "
              f"straggler too, so skipring waits at least {floor_ms:g} ms before skipping a rank"
              + (" (SKIPRING_SKIP_MIN_WAIT_US)." if floor_env else
                 " (its floor there; SKIPRING_SKIP_MIN_WAIT_US sets it)."))
        if args.delay_ms <= floor_ms:
            print(f"warning: --delay-ms {args.delay_ms:g} is not above that floor: the slow "
                  "rank will not be skipped.")
        else:
            print(f"The slow rank's {args.delay_ms:g} ms per step is above it.")
    sys.stdout.flush()

    progress = Progress(len(scen) * args.repeat +
                        (args.repeat * (2 if args.host_half_ms > 0 else 1) if args.hosts else 0))
    rows = {key: [] for key, _, _, _ in scen}
    problems = []
    for rep in range(args.repeat):
        for key, label, _, extra in scen:
            tag = f"{key}" + (f"-run{rep + 1}" if args.repeat > 1 else "")
            cmd = bench_command(args.bench, args.np, args.size, args.iters, args.warmup, extra)
            rows[key].append(run_repeat(progress, args, rep, label, tag, cmd, problems))
    # The late arrival across emulated hosts (scripts/vcluster.sh), when namespaces allow.
    host_labels = []
    hosts_skipped = None
    if args.hosts:
        r = args.slow_rank
        # The long lateness, and one of about half the all-reduce (DESIGN.md 2.2b).
        host_rows = [("hosts", args.host_late_ms)]
        if args.host_half_ms > 0:
            host_rows.append(("hosts-half", args.host_half_ms))
        hosts_skipped = vcluster_up(args.hosts, args.host_rate)
        if hosts_skipped is None:
            try:
                for key, late_ms in host_rows:
                    rows[key] = []
                for rep in range(args.repeat):
                    for key, late_ms in host_rows:
                        label = (f"rank {r} arrives {late_ms:g} ms late, {args.hosts} hosts "
                                 f"at {args.host_rate}")
                        tag = key + (f"-run{rep + 1}" if args.repeat > 1 else "")
                        cmd = hosts_bench_command(args.bench, args.size, args.host_iters, 1,
                                                  ["--late-rank", str(r),
                                                   "--late-ms", f"{late_ms:g}"])
                        rows[key].append(run_repeat(progress, args, rep, label, tag, cmd,
                                                    problems))
            finally:
                vcluster_down()
            for key, late_ms in host_rows:
                labels.append((key, f"rank {r} arrives {late_ms:g} ms late, {args.hosts} hosts "
                                    f"at {args.host_rate}"))
                host_labels.append((key, f"rank {r} arrives {late_ms:g} ms late\n"
                                         f"({args.hosts} hosts, {args.host_rate})"))
    results = {key: summarize(rows[key]) for key in rows}

    print()
    print_table(results, labels)
    if hosts_skipped is not None:
        print(f"cross-host scenario skipped: network namespaces unavailable ({hosts_skipped})")
    print()
    total_wrong = sum(s["wrong"] for s in results.values())
    print(f"wrong result elements (all variants, all ranks, all runs): {total_wrong}")
    print("skip/ring, skip/MPI: ratio of p50 times in the same run (< 1: skip-ahead faster); "
          "skips/iter: skip-ahead decisions per all-reduce, all ranks.")
    print(f"In '{labels[1][1]}' MPI_Allreduce is not slowed (it cannot be): not like for like.")
    print(f"A skip saves at most T + T_trans per slow step (the paper's eq. 1: T the step's own "
          f"time), and\nthe slow rank's delayed steps still bound the end: with a delay of "
          f"{args.delay_ms:g} ms >> T the gain is modest.")
    if "hosts" in results:
        print(f"'{labels[-1][1]}': {args.hosts} network namespaces with their own hostnames on "
              f"a bridge, NICs shaped to\n{args.host_rate} both ways (scripts/vcluster.sh), "
              "Open MPI over TCP; the hosts share this machine's cores.")
    png = os.path.join(args.out_dir, "straggler_demo.png")
    plot(results, short, args, png, host_labels)
    print(f"Plot: {shown_path(png)}   (JSON rows and logs of the runs: {shown_path(args.out_dir)}/)")
    if results["slow"]["skips_per_iter"] == 0:
        print("note: skip-ahead never skipped the slow rank (its delay stayed under the "
              "skip threshold; raise --delay-ms)")
    for key in ("late", "hosts", "hosts-half"):
        if key in results and not results[key]["skip_over_ring"] < 1:
            print(f"note: in '{dict(labels)[key]}' skip-ahead was not faster than the plain "
                  f"ring (skip/ring {fmt_ratio(results[key]['skip_over_ring'])})")
    if problems:
        raise DemoError("the demo found problems:\n  " + "\n  ".join(problems))


if __name__ == "__main__":
    run_main(main, "straggler_demo")
