#!/usr/bin/env python3
"""Late arrival across hosts: skip-ahead vs plain ring vs MPI_Allreduce on an emulated cluster.

Brings up HOSTS emulated hosts (scripts/vcluster.sh: network namespaces, each with its own
hostname and a NIC shaped to RATE in both directions), one rank each by default, and runs
skipring_bench across them, per message size, in two scenarios:

  late   one rank arrives LATE_MS late at every call   (--late-rank R --late-ms LATE_MS)
  none   no straggler                                   (--overhead --compare mpi)

skipring_bench interleaves the three variants (skip-ahead, plain ring, PMPI_Allreduce) per
iteration, so all of them see the same network and machine. A run's time is the p50 over its
iterations of "after last arrival" (max over ranks of the return time minus max over ranks of
the entry time); a point's value is the median over REPEAT runs, which go round-robin over the
points (repeat 1 of every point, then repeat 2, ...). Ratios are medians of the per-run ratios
(both variants from the same run). Late rows also give the floor: the least time after the
arrival that any all-reduce schedule can take on these links (late_floor_ms), and its ratio to
the plain ring's time, the least skip/ring any schedule could show. With --bounds, every run of
the round-robin also times late_bound's two omniscient schedules once the late rank is there
after a long lateness (the others have summed everything without it): "owners" (its pieces to
every owner, each final straight to every rank: skip-ahead's late path with nothing to wait
for) and "chain" (its input down the healthy ranks, one stream per link): what these links and
this MPI library allow after the arrival, where the floor counts bandwidth alone (the late rows
get owners_bound_ms, chain_bound_ms and skip's ratios to them). The no-straggler runs time
ITERS_NONE iterations (default 20; ITERS for the late ones): their target is a 3 % effect, and
with 5 iterations a run's ratio scattered 0.98-1.06 where 20 give 0.99-1.02. Times are also
given in units of
L = (n-1)/n * S / B (B = RATE): the least time after the late rank's arrival, when its own
link carries (n-1)/n of the data each way; no-straggler ring all-reduce needs about 2 L.

Writes OUT (default docs/data/cluster_late.csv: one row per size and scenario) and RUNS_OUT
(default docs/data/cluster_late_runs.csv: every run), prints a table, keeps the JSON rows and
logs under build-release/cluster_bench/ (--work-dir). Exits 77 when network namespaces are not
available (vcluster.sh up says why), non-zero if a run fails, any variant returns a wrong
element or the plain ring skips. The cluster is taken down at the end (--keep-up: not).

Usage: scripts/cluster_bench.py [--bench build-release/apps/skipring_bench] [--rate 1gbit]
           [--hosts 4] [--per-host 1] [--sizes 16M,64M] [--late-rank 1] [--late-ms 200[,MS...]] [--no-none]
           [--repeat 5] [--iters 5] [--iters-none 20] [--warmup 1] [--out FILE]
           [--runs-out FILE] [--bounds]
Build the benchmark first: cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release &&
cmake --build build-release --target skipring_bench late_bound. SKIPRING_* variables set in the
environment reach every rank (and are recorded in the CSV).
"""
import argparse
import csv
import datetime
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import straggler_demo as sd  # noqa: E402  (run / check helpers shared with the demo)

ROOT = sd.ROOT
VCLUSTER = os.path.join(sd.HERE, "vcluster.sh")
SKIP = 77

POINT_FIELDS = [
    "scenario", "size_bytes", "hosts", "ranks_per_host", "nranks", "rate", "late_rank",
    "late_ms", "repeats", "iters", "L_ms",
    "skip_ms", "skip_min_ms", "skip_max_ms", "ring_ms", "ring_min_ms", "ring_max_ms",
    "mpi_ms", "mpi_min_ms", "mpi_max_ms",
    "skip_over_ring", "skip_over_ring_min", "skip_over_ring_max",
    "skip_over_mpi", "skip_over_mpi_min", "skip_over_mpi_max",
    "skip_L", "ring_L", "mpi_L", "floor_ms", "floor_over_ring", "skips_per_iter",
    "late_pieces_per_iter", "wrong",
    "owners_bound_ms", "chain_bound_ms", "skip_over_owners_bound", "skip_over_chain_bound",
    "skipring_env", "commit", "date",
]
RUN_FIELDS = [
    "scenario", "size_bytes", "repeat", "nranks", "rate", "late_ms", "iters", "warmup",
    "skip_after_p50_us", "ring_after_p50_us", "mpi_after_p50_us",
    "skip_after_p99_us", "ring_after_p99_us", "mpi_after_p99_us",
    "skip_over_ring", "skip_over_mpi", "skip_skips_per_iter", "skip_late_pieces_per_iter",
    "ring_skips_per_iter", "skip_wrong", "ring_wrong", "mpi_wrong",
]


def rate_bytes_per_s(rate):
    """tc rate ('1gbit', '500mbit', '2Gbit', '100mbps') -> bytes per second (SI, as tc)."""
    text = rate.strip().lower()
    for suffix, bits in (("bit", True), ("bps", False)):
        if text.endswith(suffix):
            num = text[:-len(suffix)]
            mult = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}.get(num[-1:], 1)
            if mult != 1:
                num = num[:-1]
            try:
                value = float(num) * mult
            except ValueError:
                break
            if value > 0:
                return value / 8 if bits else value
    raise argparse.ArgumentTypeError(f"not a tc rate such as 1gbit or 500mbit: '{rate}'")


def parse_sizes(text):
    return [sd.parse_size(x) for x in text.split(",") if x.strip()]


def git_commit():
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def vcluster(*args, check=True):
    proc = subprocess.run(["bash", VCLUSTER] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if proc.returncode == SKIP:
        print(f"cluster_bench: skipped: {proc.stdout.strip()}", file=sys.stderr)
        sys.exit(SKIP)
    if check and proc.returncode != 0:
        raise sd.DemoError(f"vcluster.sh {' '.join(args)} failed:\n{proc.stdout}")
    return proc


def spread(values):
    vals = [v for v in values if v is not None]
    return (sd.median(vals), min(vals) if vals else float("nan"),
            max(vals) if vals else float("nan"))


def r4(x):
    return "" if x is None or x != x else f"{x:.4g}"


def summarize(key, rows, a, L_ms, floor_ms, commit, env_text):
    scenario, size, late_ms = key
    p = {"scenario": scenario, "size_bytes": size, "hosts": a.hosts,
         "ranks_per_host": a.per_host, "nranks": a.hosts * a.per_host, "rate": a.rate,
         "late_rank": a.late_rank if scenario == "late" else "",
         "late_ms": f"{late_ms:g}" if scenario == "late" else 0, "repeats": len(rows),
         "iters": iters_of(a, scenario), "L_ms": r4(L_ms), "skipring_env": env_text,
         "commit": commit,
         "date": datetime.date.today().isoformat()}
    for v in sd.VARIANTS:
        med, lo, hi = spread([r[f"{v}_after_p50_us"] / 1e3 for r in rows])
        p[f"{v}_ms"], p[f"{v}_min_ms"], p[f"{v}_max_ms"] = r4(med), r4(lo), r4(hi)
        p[f"{v}_L"] = r4(med / L_ms)
    if floor_ms is not None:
        p["floor_ms"] = r4(floor_ms)
        p["floor_over_ring"] = r4(floor_ms / float(p["ring_ms"]))
    for ratio in ("skip_over_ring", "skip_over_mpi"):
        med, lo, hi = spread([r.get(ratio) for r in rows])
        p[ratio], p[f"{ratio}_min"], p[f"{ratio}_max"] = r4(med), r4(lo), r4(hi)
    p["skips_per_iter"] = r4(sd.median([r.get("skip_skips_per_iter") for r in rows]))
    p["late_pieces_per_iter"] = r4(sd.median([r.get("skip_late_pieces_per_iter") for r in rows]))
    p["wrong"] = sum(r[f"{v}_wrong"] for r in rows for v in sd.VARIANTS)
    return p


def late_floor_ms(n, size, bps, late_ms):
    """Least time after the late rank's arrival that any all-reduce schedule can take.

    n ranks, one per host, each host's link carrying bps bytes per second each way; one rank
    comes late_ms after the others, and its link carries nothing before it comes (it is not in
    the MPI library: Open MPI's TCP transport has no progress thread). Two facts:

    - every rank ends with the sum, which depends on everyone's input at every element, so
      per element at least 2(n-1) messages cross the network (each of the n-1 others must
      have sent one before the first rank holds the sum, and must then receive one after
      that, to complete its own): the ranks' downlinks carry at least 2(n-1) S in all;
    - the late rank's downlink carries r >= S after it comes; the others' carry the rest,
      at most (n-1) B late_ms of it before.

    So the time is at least max(r/B, (2(n-1)S - r - (n-1) B late_ms) / ((n-1) B)), least at
    r = max(S, (n-1)(2S - B late_ms)/n). With late_ms = 0 this is the ring's 2(n-1)/n S/B; a
    rank later than (n-2)/(n-1) S/B needs S/B after it comes.

    >>> round(late_floor_ms(4, 64 << 20, 125e6, 0), 1)   # 2 (n-1)/n S/B: the ring's bound
    805.3
    >>> round(late_floor_ms(4, 64 << 20, 125e6, 200), 1)
    655.3
    >>> round(late_floor_ms(4, 16 << 20, 125e6, 200), 1)  # S/B: 16 MiB at 1 Gbit/s
    134.2
    """
    s_ms = size / bps * 1e3
    return max(s_ms, (n - 1) * (2 * s_ms - late_ms) / n)


BOUND_RE = re.compile(r"ideal after-arrival p50 ([0-9.]+) ms, plain ring \(all at once\) p50 "
                      r"([0-9.]+) ms, ratio [0-9.]+, wrong elements (\d+)")


def run_bound(a, size, schedule, log_path):
    """late_bound's omniscient schedule once the late rank is there (after a long lateness:
    the others have summed everything without it), its p50 after-arrival time in ms."""
    cmd = ["bash", VCLUSTER, "run", "-p", str(a.per_host), a.late_bound, "-b", str(size),
           "-n", str(a.iters), "-w", str(max(1, a.warmup)), "--late-rank", str(a.late_rank),
           "--schedule", schedule]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=a.timeout)
    with open(log_path, "w") as f:
        f.write(proc.stdout)
    m = BOUND_RE.search(proc.stdout)
    if proc.returncode != 0 or not m:
        raise sd.DemoError(f"late_bound failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                           f"{proc.stdout[-2000:]}")
    if int(m.group(3)) != 0:
        raise sd.DemoError(f"late_bound {schedule} {size} B: {m.group(3)} wrong elements")
    return float(m.group(1))


def iters_of(a, scenario):
    return a.iters if scenario == "late" else a.iters_none


def print_table(points):
    header = ["scenario", "size", "skip-ahead", "plain ring", "MPI_Allreduce", "L", "skip/ring",
              "skip/MPI", "skip", "ring", "MPI", "floor/ring", "skip/floor", "skip/owners",
              "skip/chain", "skips/iter"]
    lines = []
    for p in points:
        label = (f"rank {p['late_rank']} {p['late_ms']} ms late" if p["scenario"] == "late"
                 else "no straggler")
        lines.append([label, sd.fmt_size(p["size_bytes"]), f"{p['skip_ms']} ms",
                      f"{p['ring_ms']} ms", f"{p['mpi_ms']} ms", f"{p['L_ms']} ms",
                      p["skip_over_ring"], p["skip_over_mpi"], f"{p['skip_L']} L",
                      f"{p['ring_L']} L", f"{p['mpi_L']} L", p.get("floor_over_ring") or "-",
                      (r4(float(p["skip_ms"]) / float(p["floor_ms"])) if p.get("floor_ms")
                       else "-"),
                      p.get("skip_over_owners_bound") or "-", p.get("skip_over_chain_bound") or "-",
                      p["skips_per_iter"]])
    widths = [max(len(str(row[i])) for row in [header] + lines) for i in range(len(header))]
    fmt = lambda row: "  ".join(str(c).ljust(widths[0]) if i == 0 else str(c).rjust(widths[i])
                                for i, c in enumerate(row))
    print(fmt(header))
    print("  ".join("-" * w for w in widths))
    for row in lines:
        print(fmt(row))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--bench", default=os.path.join(ROOT, "build-release", "apps",
                                                    "skipring_bench"))
    ap.add_argument("--rate", default="1gbit", help="NIC rate of every host, tc syntax")
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--per-host", type=int, default=1, help="ranks per host")
    ap.add_argument("--sizes", type=parse_sizes, default=parse_sizes("16M,64M"))
    ap.add_argument("--late-rank", type=int, default=1)
    ap.add_argument("--late-ms", type=lambda t: [float(x) for x in t.split(",")], default=[200.0],
                    help="how late, ms; a comma-separated list gives a late row per value")
    ap.add_argument("--no-none", action="store_true", help="no no-straggler rows")
    ap.add_argument("--repeat", type=int, default=5, help="runs per point")
    ap.add_argument("--iters", type=int, default=5, help="timed iterations per run")
    ap.add_argument("--iters-none", type=int, default=20,
                    help="timed iterations per run without a straggler")
    ap.add_argument("--warmup", type=int, default=1, help="untimed iterations per run")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "data", "cluster_late.csv"))
    ap.add_argument("--runs-out",
                    default=os.path.join(ROOT, "docs", "data", "cluster_late_runs.csv"))
    ap.add_argument("--work-dir", default=os.path.join(ROOT, "build-release", "cluster_bench"),
                    help="JSON rows and logs of the runs")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per mpirun")
    ap.add_argument("--keep-up", action="store_true", help="leave the cluster up at the end")
    ap.add_argument("--bounds", action="store_true",
                    help="also time late_bound's omniscient schedules after a long lateness "
                    "(owners: the late rank's pieces to every owner, finals straight to every "
                    "rank, as skip-ahead's late path; chain: one stream per link) per size, "
                    "once per repeat: what the links and the MPI library allow after the "
                    "arrival, beside the bandwidth floor")
    ap.add_argument("--late-bound", default=None,
                    help="late_bound binary (default: next to --bench)")
    a = ap.parse_args()
    nranks = a.hosts * a.per_host
    bps = rate_bytes_per_s(a.rate)
    if nranks < 3:
        ap.error("need at least 3 ranks (skip-ahead needs a rank to go around)")
    if not 0 <= a.late_rank < nranks:
        ap.error("--late-rank must be a rank of hosts x per-host")
    if a.repeat < 1 or a.iters < 1 or a.iters_none < 1 or a.warmup < 0 or not a.sizes:
        ap.error("--repeat, --iters, --iters-none and --sizes must be positive, "
                 "--warmup non-negative")
    if not os.access(a.bench, os.X_OK):
        raise sd.DemoError(f"no benchmark at {a.bench}: build it first (see --help)")
    a.late_bound = a.late_bound or os.path.join(os.path.dirname(a.bench), "late_bound")
    if a.bounds and not os.access(a.late_bound, os.X_OK):
        raise sd.DemoError(f"no late_bound at {a.late_bound}: build the late_bound target")
    os.makedirs(a.work_dir, exist_ok=True)
    commit = git_commit()
    env_text = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items())
                        if k.startswith("SKIPRING_"))

    vcluster("up", str(a.hosts), a.rate)
    try:
        points = [("late", size, ms) for size in a.sizes for ms in a.late_ms]
        if not a.no_none:
            points += [("none", size, 0.0) for size in a.sizes]
        print(f"cluster_bench: {a.hosts} emulated hosts x {a.per_host} rank(s) at {a.rate}, "
              f"sizes {', '.join(sd.fmt_size(s) for s in a.sizes)}, {a.repeat} runs per point "
              f"of {a.iters} iterations ({a.iters_none} without a straggler), commit {commit}"
              + (f", {env_text}" if env_text else ""), flush=True)
        progress = sd.Progress(len(points) * a.repeat)
        rows = {p: [] for p in points}
        bounds = {(size, sch): [] for size in a.sizes for sch in ("owners", "chain")}
        runs = []
        problems = []
        for rep in range(a.repeat):
            for scen, size, late_ms in points:
                label = (f"{sd.fmt_size(size)} " +
                         (f"rank {a.late_rank} {late_ms:g} ms late" if scen == "late"
                          else "no straggler") + f" (run {rep + 1}/{a.repeat})")
                extra = (["--late-rank", str(a.late_rank), "--late-ms", f"{late_ms:g}",
                          "--compare", "mpi"] if scen == "late"
                         else ["--overhead", "--compare", "mpi"])
                cmd = (["bash", VCLUSTER, "run", "-p", str(a.per_host), a.bench,
                        "-b", str(size), "-e", str(size), "-n", str(iters_of(a, scen)),
                        "-w", str(a.warmup)] + extra)
                tag = f"{scen}-{size}-{late_ms:g}-run{rep + 1}"
                progress.begin(label)
                try:
                    row = sd.run_bench(cmd, os.path.join(a.work_dir, tag + ".json"),
                                       os.path.join(a.work_dir, tag + ".log"), a.timeout)
                except sd.DemoError:
                    progress.end("  FAILED")
                    raise
                bad = sd.row_problems(row)
                problems += [f"{label}: {p}" for p in bad]
                rows[(scen, size, late_ms)].append(row)
                run = {"scenario": scen, "size_bytes": size, "repeat": rep + 1,
                       "nranks": nranks, "rate": a.rate,
                       "late_ms": f"{late_ms:g}" if scen == "late" else 0,
                       "iters": iters_of(a, scen),
                       "warmup": a.warmup}
                run.update({k: row.get(k) for k in RUN_FIELDS if k not in run})
                runs.append(run)
                progress.end(("  FAILED: " + "; ".join(bad)) if bad else
                             f"  skip/ring {sd.fmt_ratio(row.get('skip_over_ring'))}")
            for size, sch in (bounds if a.bounds else {}):
                log = os.path.join(a.work_dir, f"bound-{sch}-{size}-run{rep + 1}.log")
                bounds[(size, sch)].append(run_bound(a, size, sch, log))
                print(f"  late_bound {sch} {sd.fmt_size(size)} (run {rep + 1}/{a.repeat}): "
                      f"{bounds[(size, sch)][-1]:.1f} ms after the arrival", flush=True)
    finally:
        if not a.keep_up:
            vcluster("down", check=False)

    summary = []
    for scen, size, late_ms in points:
        L_ms = (nranks - 1) / nranks * size / bps * 1e3
        # The floor assumes every message crosses a downlink: one rank per host.
        floor_ms = (late_floor_ms(a.hosts, size, bps, late_ms)
                    if scen == "late" and a.per_host == 1 else None)
        p = summarize((scen, size, late_ms), rows[(scen, size, late_ms)], a, L_ms, floor_ms,
                      commit, env_text)
        if scen == "late" and a.bounds:
            for sch in ("owners", "chain"):
                b = sd.median(bounds[(size, sch)])
                p[f"{sch}_bound_ms"] = r4(b)
                p[f"skip_over_{sch}_bound"] = r4(float(p["skip_ms"]) / b)
        summary.append(p)
    for path, fields, data in ((a.out, POINT_FIELDS, summary), (a.runs_out, RUN_FIELDS, runs)):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(data)
    print()
    print_table(summary)
    print()
    print(f"Times: median over runs of the p50 after the last arrival; L = (n-1)/n*S/B at "
          f"{a.rate} ({sd.fmt_ms(summary[0]['L_ms'] and float(summary[0]['L_ms']))} ms for "
          f"{sd.fmt_size(points[0][1])}); ratios: medians of per-run ratios; floor: the least "
          f"time after a late arrival for any schedule (late_floor_ms) over the plain ring's.")
    print(f"Wrote {sd.shown_path(a.out)} and {sd.shown_path(a.runs_out)} "
          f"(logs: {sd.shown_path(a.work_dir)}/)")
    if problems:
        raise sd.DemoError("problems:\n  " + "\n  ".join(problems))


if __name__ == "__main__":
    sd.run_main(main, "cluster_bench")
