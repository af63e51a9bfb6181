#!/usr/bin/python3
"""Straggler experiment on real training: skip-ahead vs plain ring vs the MPI's own all-reduce.

Runs scripts/train/dp_train.py under mpirun for every (scenario, variant), the variants
interleaved within each repetition, all with the same data and seeds (so the same straggler
schedule), and writes
  docs/data/training.csv         one row per run: epoch time, all-reduce p50/p99 per step (the
                                 slowest rank's), share of the step in the all-reduce, time to
                                 the target accuracy, final accuracy and loss, parameter hash,
                                 the SKIPRING_REPORT totals (calls, skips, late)
  docs/data/training_curves.csv  test accuracy and loss against training time, per run
  docs/figures/training_tta.png  time-to-accuracy curves per scenario (matplotlib)
Variants:
  skip    LD_PRELOAD=libskipring_pmpi.so (SKIPRING_ALGO=auto, skip-ahead on)
  ring    LD_PRELOAD=libskipring_pmpi.so, SKIPRING_SKIP=0 SKIPRING_ALGO=ring: the plain ring,
          the same summation order every run
  mpi     no preload: Open MPI's MPI_Allreduce
  skipring  LD_PRELOAD, SKIPRING_ALGO=skipring: skip-ahead ring forced for every size
  skip-aware0  LD_PRELOAD, SKIPRING_AUTO_STRAGGLER=0: auto as it was before it became
          straggler-aware (bucketed scenarios run skipring and skip-aware0 too)
--bucket-late also runs scripts/train/bucket_late.py (one rank 10 ms late at bucket-sized
all-reduces: time after its arrival per algorithm) -> docs/data/training_bucket_late.csv.
Checks (exit 1 when one fails): dp_train.py itself aborts when the ranks' parameter hashes
differ at any evaluation; here every skipring run must report calls > 0 on every rank, the
`ring` runs of one (framework, bucketing) must end with the same parameter hash (bit-identical
across runs, whatever the stragglers), and the straggler schedule hash must be the same in
every variant of a scenario.

--cluster HOSTS runs across emulated hosts (scripts/vcluster.sh up HOSTS must have been run; as
root): mpirun goes through `vcluster.sh run -p PER_HOST`.
"""
import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "scripts", "train", "dp_train.py")
PY = "/usr/bin/python3"
REPORT_RE = re.compile(r"skipring: rank=(\d+) calls=(\d+) fallbacks=(\d+) skips=(\d+) "
                       r"late=(\d+) bytes=(\d+) time_s=([0-9.]+)")

# name -> dp_train.py options. Delays are in the range of a step (~50-100 ms at np 4 on 2 cores).
SCENARIOS = {
    "none": [],
    "exp": ["--straggler-dist", "exp", "--straggler-ranks", "1", "--straggler-ms", "20"],
    "pareto": ["--straggler-dist", "pareto", "--straggler-ranks", "1,3", "--straggler-ms", "10",
               "--pareto-shape", "1.5"],
    "slow": ["--slow-rank", "2", "--slow-ms", "20"],
    "stall": ["--stall-rank", "3", "--stall-every", "10", "--stall-ms", "150"],
    "exp-bucket1M": ["--straggler-dist", "exp", "--straggler-ranks", "1", "--straggler-ms", "20",
                     "--bucket-mib", "1", "--late-at", "spread"],
    "none-bucket1M": ["--bucket-mib", "1"],
}
VARIANTS = {
    "skip": {"preload": True, "env": {}},
    "ring": {"preload": True, "env": {"SKIPRING_SKIP": "0", "SKIPRING_ALGO": "ring"}},
    "mpi": {"preload": False, "env": {}},
    "skipring": {"preload": True, "env": {"SKIPRING_ALGO": "skipring"}},
    "skip-aware0": {"preload": True, "env": {"SKIPRING_AUTO_STRAGGLER": "0"}},
    # the census at every call (no rests; late_plan.h: CensusBackoff), for an A/B of the rests
    "skip-census": {"preload": True, "env": {"SKIPRING_LATE_CHAIN": "1"}},
}
# bucket_late.py variants: (label, preload, env)
LATE_VARIANTS = [
    ("auto", True, {}),
    ("auto-aware0", True, {"SKIPRING_AUTO_STRAGGLER": "0"}),
    ("skipring", True, {"SKIPRING_ALGO": "skipring"}),
    ("rabenseifner", True, {"SKIPRING_ALGO": "rabenseifner"}),
    ("mpi", False, {}),
]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--np", type=int, default=4)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--scenarios", default="none,exp,pareto,slow,stall,none-bucket1M,exp-bucket1M")
    p.add_argument("--variants", default="skip,ring,mpi",
                   help="comma separated; bucketed scenarios also run 'skipring'")
    p.add_argument("--frameworks", default="numpy",
                   help="numpy, torch or numpy,torch (torch runs the scenarios in "
                   "--torch-scenarios only)")
    p.add_argument("--torch-scenarios", default="none,exp")
    p.add_argument("--train-args", default="--max-steps 44 --eval-every 4 --target-acc 0.9",
                   help="extra dp_train.py options for every run")
    p.add_argument("--csv", default=os.path.join(ROOT, "docs", "data", "training.csv"))
    p.add_argument("--curves", default=os.path.join(ROOT, "docs", "data", "training_curves.csv"))
    p.add_argument("--plot", default=os.path.join(ROOT, "docs", "figures", "training_tta.png"))
    p.add_argument("--steps-csv", default="",
                   help="one row per step of every run: the late rank's sleep and its own "
                   "all-reduce time; the summary then bins them by the sleep (scenarios with a "
                   "straggler)")
    p.add_argument("--cluster", type=int, default=0, help="run across this many emulated hosts")
    p.add_argument("--per-host", type=int, default=1)
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--bucket-late", action="store_true",
                   help="also measure the time after a late arrival per algorithm "
                   "(bucket_late.py)")
    p.add_argument("--bucket-late-sizes", default="256K,1M,4M")
    p.add_argument("--bucket-late-csv",
                   default=os.path.join(ROOT, "docs", "data", "training_bucket_late.csv"))
    a = p.parse_args()
    for s in a.scenarios.split(","):
        if s not in SCENARIOS:
            p.error(f"unknown scenario {s!r}; known: {', '.join(SCENARIOS)}")
    for v in a.variants.split(","):
        if v not in VARIANTS:
            p.error(f"unknown variant {v!r}; known: {', '.join(VARIANTS)}")
    if a.cluster:
        a.np = a.cluster * a.per_host
    return a


def find_preload(build):
    lib = os.path.join(build, "runtime", "pmpi", "libskipring_pmpi.so")
    if not os.path.exists(lib):
        sys.exit(f"experiment: {lib} not found: build the skipring_pmpi target first")
    return lib


def late_rank_ar_ms(res):
    """The p50 over steps of the all-reduce time of the rank that slept most (the late rank's own
    calls: from its arrival to its return, what the step waits for after it), "" without sleeps.
    The per-step p50 of the slowest rank (ar_ms_p50) is what the others see: their wait for the
    late rank plus that."""
    vals = sorted(ar for _, ar in late_rank_steps(res))
    return round(vals[len(vals) // 2], 2) if vals else ""


def late_rank_steps(res):
    """(sleep_ms, all-reduce ms) per step of the rank that slept most, [] without sleeps; the
    same schedule makes them comparable across variants step by step."""
    sleeps = res.get("sleep_s") or []
    totals = res.get("sleep_s_total") or []
    if not sleeps or not totals or max(totals) <= 0 or not res.get("ar_s"):
        return []
    late = max(range(len(totals)), key=lambda i: totals[i])
    sl, ar = sleeps[late], res["ar_s"][late]
    n = min(len(sl), len(ar))
    return [(1e3 * x, 1e3 * y) for x, y in zip(sl[len(sl) - n:], ar[len(ar) - n:])]


LATE_BINS_MS = (0, 5, 10, 15, 20, 30, 45, 70, float("inf"))


def print_late_bins(steps, scenarios):
    """Per scenario with a straggler: the late rank's own all-reduce (its arrival to its
    return), median per variant in bins of its sleep; the difference to the plain ring is paired
    (same step, same sleep)."""
    for sc in scenarios:
        rs = [r for r in steps if r["scenario"] == sc]
        variants = sorted({r["variant"] for r in rs})
        if not rs or "ring" not in variants:
            continue
        ring = {(r["framework"], r["rep"], r["step"]): r["late_ar_ms"] for r in rs
                if r["variant"] == "ring"}
        print(f"\n{sc}: the late rank's all-reduce (ms) by its sleep; median, and the median "
              "paired difference to the plain ring")
        print("sleep (ms)   steps  " + "  ".join(f"{v:>15s}" for v in variants))
        for lo, hi in zip(LATE_BINS_MS, LATE_BINS_MS[1:]):
            cells, count = [], 0
            for v in variants:
                xs = [r for r in rs if r["variant"] == v and lo <= r["sleep_ms"] < hi]
                count = max(count, len(xs))
                if not xs:
                    cells.append(f"{'-':>15s}")
                    continue
                med = statistics.median(r["late_ar_ms"] for r in xs)
                diffs = [r["late_ar_ms"] - ring[k] for r in xs
                         if (k := (r["framework"], r["rep"], r["step"])) in ring]
                d = f" ({statistics.median(diffs):+.1f})" if v != "ring" and diffs else ""
                cells.append(f"{med:6.1f}{d:>9s}")
            if count:
                print(f"{lo:4g}-{hi:<6g} {count:6d}  " + "  ".join(cells))


def run_one(a, preload, framework, scenario, variant, rep):
    v = VARIANTS[variant]
    env = dict(os.environ)
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMPI_MCA_rmaps_base_oversubscribe": "1",
                "OMPI_MCA_btl_vader_single_copy_mechanism": "none"})
    for k in [k for k in env if k.startswith("SKIPRING_")]:
        del env[k]
    xs = []
    if v["preload"]:
        env["SKIPRING_REPORT"] = "1"
        env.update(v["env"])
        xs += ["-x", f"LD_PRELOAD={preload}"]
    for k in ("SKIPRING_REPORT", "SKIPRING_SKIP", "SKIPRING_ALGO", "SKIPRING_AUTO_STRAGGLER"):
        if k in env and not a.cluster:
            xs += ["-x", k]
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out_json = f.name
    train = [PY, TRAIN, "--framework", framework, "--quiet", "--json", out_json,
             *a.train_args.split(), *SCENARIOS[scenario]]
    if a.cluster:
        # vcluster.sh passes every SKIPRING_* variable of its environment with -x.
        cmd = ["bash", os.path.join(ROOT, "scripts", "vcluster.sh"), "run", "-p",
               str(a.per_host), *xs, *train]
    else:
        cmd = ["mpirun", "-np", str(a.np), *xs, *train]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=a.timeout)
    except subprocess.TimeoutExpired:
        sys.exit(f"experiment: {framework}/{scenario}/{variant} rep {rep} ran past "
                 f"{a.timeout} s: {' '.join(cmd)}")
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        print(proc.stdout[-4000:])
        sys.exit(f"experiment: {framework}/{scenario}/{variant} rep {rep} failed (exit "
                 f"{proc.returncode}): {' '.join(cmd)}")
    with open(out_json) as f:
        res = json.load(f)
    os.unlink(out_json)
    reports = [tuple(int(x) for x in m.groups()[:6]) for m in REPORT_RE.finditer(proc.stdout)]
    res["report_ranks"] = len(reports)
    res["calls_min"] = min((r[1] for r in reports), default=0)
    res["skips"] = sum(r[3] for r in reports)
    res["late"] = sum(r[4] for r in reports)
    res["fallbacks"] = sum(r[2] for r in reports)
    res["job_s"] = wall
    return res


LATE_RE = re.compile(r"bucket-late: algo=\S+ np=(\d+) bytes=(\d+) iters=(\d+) none_us=(\d+) "
                     r"after_us=(\d+) after_p90_us=(\d+)")


def bucket_late(a, preload):
    """bucket_late.py per variant, interleaved over repetitions; medians to a CSV."""
    env0 = {k: v for k, v in os.environ.items() if not k.startswith("SKIPRING_")}
    env0.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                 "OMPI_MCA_rmaps_base_oversubscribe": "1",
                 "OMPI_MCA_btl_vader_single_copy_mechanism": "none"})
    rows = []
    for rep in range(a.reps):
        for label, pre, venv in LATE_VARIANTS:
            env = dict(env0, **venv)
            xs = ["-x", f"LD_PRELOAD={preload}"] if pre else []
            xs += [x for k in venv for x in ("-x", k)]
            cmd = ["mpirun", "-np", str(a.np), *xs, PY,
                   os.path.join(ROOT, "scripts", "train", "bucket_late.py"), "--sizes",
                   a.bucket_late_sizes]
            proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=a.timeout)
            if proc.returncode != 0:
                print(proc.stdout[-3000:])
                sys.exit(f"experiment: bucket_late {label} failed: {' '.join(cmd)}")
            for m in LATE_RE.finditer(proc.stdout):
                n, b, it, none, after, p90 = (int(x) for x in m.groups())
                rows.append({"variant": label, "rep": rep, "np": n, "bytes": b, "iters": it,
                             "none_us": none, "after_us": after, "after_p90_us": p90})
                print(f"bucket-late {label:13s} rep {rep} {b:>8d} B: no straggler {none} us, "
                      f"after the late arrival {after} us (p90 {p90})", flush=True)
    os.makedirs(os.path.dirname(a.bucket_late_csv) or ".", exist_ok=True)
    with open(a.bucket_late_csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print(f"experiment: wrote {a.bucket_late_csv}")
    print("\nvariant        bytes     none_us(median)  after_us(median)")
    for label, _, _ in LATE_VARIANTS:
        for b in sorted({r["bytes"] for r in rows}):
            rs = sorted(r["none_us"] for r in rows if (r["variant"], r["bytes"]) == (label, b))
            ra = sorted(r["after_us"] for r in rows if (r["variant"], r["bytes"]) == (label, b))
            print(f"{label:13s} {b:>8d} {rs[len(rs) // 2]:>12d} {ra[len(ra) // 2]:>16d}")


def plot(rows_curves, scenarios, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("experiment: matplotlib missing (apt-get install python3-matplotlib): no plot")
        return
    keys = sorted({(r["framework"], r["scenario"]) for r in rows_curves},
                  key=lambda k: (k[0], scenarios.index(k[1]) if k[1] in scenarios else 99))
    cols = min(4, len(keys))
    nrows = (len(keys) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3.2 * nrows), squeeze=False)
    colors = {"skip": "tab:blue", "ring": "tab:orange", "mpi": "tab:green",
              "skipring": "tab:purple", "skip-aware0": "tab:red", "skip-census": "tab:brown"}
    for ax, (fw, sc) in zip(axes.ravel(), keys):
        seen = set()
        for r in sorted({(x["variant"], x["rep"]) for x in rows_curves
                         if x["framework"] == fw and x["scenario"] == sc}):
            pts = [x for x in rows_curves if x["framework"] == fw and x["scenario"] == sc
                   and (x["variant"], x["rep"]) == r]
            ax.plot([p["time_s"] for p in pts], [p["acc"] for p in pts],
                    color=colors.get(r[0], "k"), alpha=0.8, marker=".",
                    label=None if r[0] in seen else r[0])
            seen.add(r[0])
        ax.set_title(f"{fw}: {sc}", fontsize=9)
        ax.set_xlabel("training time (s)")
        ax.set_ylabel("test accuracy")
        ax.set_ylim(0.0, 1.0)
        target = next((float(x["target"]) for x in rows_curves if "target" in x), None)
        if target:
            ax.axhline(target, color="grey", linestyle="--", linewidth=0.8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes.ravel()[len(keys):]:
        ax.axis("off")
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"experiment: wrote {path}")


def main():
    a = parse_args()
    preload = find_preload(a.build)
    scenarios = a.scenarios.split(",")
    base_variants = a.variants.split(",")
    frameworks = a.frameworks.split(",")
    torch_sc = a.torch_scenarios.split(",")
    plan = []
    for rep in range(a.reps):
        for fw in frameworks:
            for sc in scenarios:
                if fw == "torch" and sc not in torch_sc:
                    continue
                vs = list(base_variants)
                if "bucket" in sc:
                    vs += [x for x in ("skipring", "skip-aware0") if x not in vs]
                for v in vs:  # interleaved: every variant once per repetition
                    plan.append((fw, sc, v, rep))
    print(f"experiment: {len(plan)} runs at np {a.np}"
          f"{f' on {a.cluster} emulated hosts' if a.cluster else ''}", flush=True)
    rows, curves, failures, steps = [], [], [], []
    t_all = time.monotonic()
    for i, (fw, sc, v, rep) in enumerate(plan):
        r = run_one(a, preload, fw, sc, v, rep)
        row = {"framework": fw, "scenario": sc, "variant": v, "rep": rep, "np": r["np"],
               "hosts": a.cluster or 1, "grad_MiB": round(r["grad_bytes"] / 2**20, 2),
               "buckets": r["buckets"], "steps": r["steps"],
               "epoch_s": round(r["epoch_s"], 3),
               "warmup_ms": round(1e3 * r.get("warmup_s", 0.0), 1),
               "ar_ms_p50": round(r["ar_ms_p50"], 2),
               "ar_ms_p99": round(r["ar_ms_p99"], 2), "ar_share": round(r["ar_share"], 3),
               "compute_ms_p50": round(r["compute_ms_p50"], 2),
               "time_to_target_s": (round(r["time_to_target_s"], 3)
                                    if r["time_to_target_s"] is not None else ""),
               "target_acc": r["target_acc"], "final_acc": round(r["final_acc"], 4),
               "final_loss": round(r["final_loss"], 5), "param_hash": r["final_hash"],
               "schedule_hash": r["schedule_hash"], "calls_min": r["calls_min"],
               "fallbacks": r["fallbacks"], "skips": r["skips"], "late": r["late"],
               "late_rank_ar_ms_p50": late_rank_ar_ms(r)}
        rows.append(row)
        for i_step, (sl, ar) in enumerate(late_rank_steps(r)):
            steps.append({"framework": fw, "scenario": sc, "variant": v, "rep": rep,
                          "step": i_step, "sleep_ms": round(sl, 3), "late_ar_ms": round(ar, 3)})
        for e in r["evals"]:
            curves.append({"framework": fw, "scenario": sc, "variant": v, "rep": rep,
                           "step": e["step"], "time_s": round(e["time_s"], 4),
                           "acc": round(e["acc"], 4), "loss": round(e["loss"], 5),
                           "target": r["target_acc"]})
        if VARIANTS[v]["preload"] and (r["report_ranks"] != r["np"] or r["calls_min"] <= 0):
            failures.append(f"{fw}/{sc}/{v} rep {rep}: {r['report_ranks']} report lines, "
                            f"calls_min {r['calls_min']} (skipring did not run the all-reduces)")
        print(f"[{i + 1}/{len(plan)}] {fw:5s} {sc:14s} {v:8s} rep {rep}: epoch "
              f"{row['epoch_s']:.2f}s ar p50 {row['ar_ms_p50']:.1f} p99 "
              f"{row['ar_ms_p99']:.1f} ms late rank's {row['late_rank_ar_ms_p50'] or '-'} ms "
              f"share {row['ar_share']:.2f} tta "
              f"{row['time_to_target_s']} acc {row['final_acc']:.4f} skips {row['skips']} "
              f"hash {row['param_hash']} ({r['job_s']:.1f} s)", flush=True)
    # Bit-identical plain ring across runs, same schedule in every variant.
    groups = {}
    for r in rows:
        if r["variant"] == "ring":
            groups.setdefault((r["framework"], r["buckets"]), set()).add(r["param_hash"])
    for k, hs in groups.items():
        if len(hs) != 1:
            failures.append(f"plain ring (SKIPRING_SKIP=0) {k}: parameter hashes differ across "
                            f"runs: {sorted(hs)}")
        else:
            print(f"experiment: plain ring {k[0]} buckets={k[1]}: "
                  f"{sum(1 for r in rows if r['variant'] == 'ring' and (r['framework'], r['buckets']) == k)}"
                  f" runs, one parameter hash {next(iter(hs))} (bit-identical)")
    sched = {}
    for r in rows:
        sched.setdefault((r["framework"], r["scenario"]), set()).add(r["schedule_hash"])
    for k, hs in sched.items():
        if len(hs) != 1:
            failures.append(f"{k}: straggler schedules differ across variants: {sorted(hs)}")
    for path, data in ((a.csv, rows), (a.curves, curves), (a.steps_csv, steps)):
        if not path or not data:
            continue
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(data[0].keys()))
            w.writeheader()
            w.writerows(data)
        print(f"experiment: wrote {path}")
    # Summary: medians per (framework, scenario, variant).
    print("\nframework scenario       variant   epoch_s warmup_ms  ar_p50  ar_p99  late_ar  share  "
          "tta_s  acc")
    for key in sorted({(r["framework"], r["scenario"], r["variant"]) for r in rows},
                      key=lambda k: (k[0], scenarios.index(k[1]), k[2])):
        rs = [r for r in rows if (r["framework"], r["scenario"], r["variant"]) == key]

        def med(field):
            vals = sorted(float(r[field]) for r in rs if r[field] != "")
            return vals[len(vals) // 2] if vals else float("nan")
        print(f"{key[0]:9s} {key[1]:14s} {key[2]:8s} {med('epoch_s'):7.2f} {med('warmup_ms'):9.1f} "
              f"{med('ar_ms_p50'):7.1f} {med('ar_ms_p99'):7.1f} {med('late_rank_ar_ms_p50'):7.1f} "
              f"{med('ar_share'):6.2f} "
              f"{med('time_to_target_s'):6.2f} {med('final_acc'):.4f}")
    print_late_bins(steps, scenarios)
    if a.plot:
        plot(curves, scenarios, a.plot)
    if a.bucket_late and not a.cluster:
        bucket_late(a, preload)
    print(f"experiment: {len(plan)} runs in {time.monotonic() - t_all:.0f} s")
    if failures:
        print("experiment: FAILED checks:\n  " + "\n  ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
