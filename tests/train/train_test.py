#!/usr/bin/env python3
"""ctest driver: a short data-parallel training run (scripts/train/dp_train.py) under the
PMPI preload with a straggler.

Usage: train_test.py --mpiexec MPIEXEC --preload libskipring_pmpi.so --np N
                     [--framework numpy|torch] [--python /usr/bin/python3] [--env K=V]...
                     [--expect-skips] [-- dp_train options]

Asserts: every rank printed a SKIPRING_REPORT line with calls > 0 (skipring ran mpi4py's
all-reduces) and, with --expect-skips, skips + late > 0 somewhere; the parameter hashes were equal
across ranks at every evaluation (dp_train.py aborts otherwise; checked again here on the
hashes it reports); the test loss after training is below the loss before it, and the mean
training loss of the last evaluation interval below the first's. Exit 77 (ctest: skipped) with
the reason when the python lacks mpi4py/numpy/scikit-learn, or PyTorch for --framework torch.
"""
import argparse
import atexit
import json
import os
import re
import subprocess
import sys
import tempfile

SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Not anchored to line starts and ends: two ranks' output may share a line under mpirun.
REPORT_RE = re.compile(r"skipring: rank=(\d+) calls=(\d+) fallbacks=(\d+) skips=(\d+) "
                       r"late=(\d+) bytes=(\d+) time_s=(\d+\.\d{6})")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--preload", required=True)
    p.add_argument("--np", type=int, required=True)
    p.add_argument("--framework", default="numpy")
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--env", action="append", default=[],
                   help="K=V passed to the ranks (mpiexec -x), repeatable")
    p.add_argument("--expect-skips", action="store_true",
                   help="fail unless some rank skipped ahead or saw a late piece")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    a = p.parse_args()
    mods = ["mpi4py", "numpy", "sklearn"] + (["torch"] if a.framework == "torch" else [])
    for m in mods:
        r = subprocess.run([a.python, "-c", f"import {m}"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        if r.returncode != 0:
            print(f"SKIPPED: {a.python} has no {m} (Debian: scripts/setup.sh train installs "
                  f"python3-mpi4py python3-numpy python3-sklearn python3-torch)")
            return SKIP
    if not os.path.exists(a.preload):
        print(f"train_test: {a.preload} does not exist", file=sys.stderr)
        return 1
    extra = [x for x in a.rest if x != "--"]
    fd, jpath = tempfile.mkstemp(suffix=".json", prefix="train_test_")
    os.close(fd)
    atexit.register(lambda: os.path.exists(jpath) and os.unlink(jpath))
    extra += ["--json", jpath]
    cmd = [a.mpiexec, "-np", str(a.np), "-x", f"LD_PRELOAD={a.preload}", "-x",
           "SKIPRING_REPORT=1", *[x for kv in a.env for x in ("-x", kv)], a.python, os.path.join(ROOT, "scripts", "train", "dp_train.py"),
           "--framework", a.framework, *extra]
    print("train_test: " + " ".join(cmd), flush=True)
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=a.timeout)
    except subprocess.TimeoutExpired as e:
        print((e.stdout or b"")[-4000:] if isinstance(e.stdout, str) else "")
        print(f"train_test: FAIL: the job ran past {a.timeout} s", file=sys.stderr)
        return 1
    print(proc.stdout, end="")
    if proc.returncode != 0 or not os.path.getsize(jpath):
        print(f"train_test: FAIL: mpiexec exited {proc.returncode}", file=sys.stderr)
        return 1
    fails = []
    reports = {int(m.group(1)): [int(x) for x in m.groups()[1:6]]
               for m in REPORT_RE.finditer(proc.stdout)}
    if sorted(reports) != list(range(a.np)):
        fails.append(f"report lines from ranks {sorted(reports)}, expected 0..{a.np - 1}")
    for r, (calls, fallbacks, skips, late, _) in sorted(reports.items()):
        if calls <= 0:
            fails.append(f"rank {r}: calls={calls}: skipring ran none of the all-reduces")
    if a.expect_skips and reports:
        if sum(v[2] + v[3] for v in reports.values()) == 0:
            fails.append("a straggler was injected but no rank skipped ahead or saw a late "
                         "piece (skips + late == 0)")
    m = re.search(r"^train-result: (\{.*\})$", proc.stdout, re.M)
    if not m:
        fails.append("no train-result line from rank 0")
    else:
        res = json.loads(m.group(1))
        with open(jpath) as f:
            full = json.load(f)
        evals = full["evals"]
        hashes = full["rank_hashes"]
        if len(hashes) != a.np or any(h != hashes[0] for h in hashes):
            fails.append(f"parameter hashes differ across ranks: {hashes}")
        if len(evals) < 2:
            fails.append(f"only {len(evals)} evaluations: run more steps")
        else:
            if evals[-1]["loss"] >= evals[0]["loss"]:
                fails.append(f"test loss did not decrease: {evals[0]['loss']:.4f} before, "
                             f"{evals[-1]['loss']:.4f} after")
            tl = [e["train_loss"] for e in evals if e["train_loss"] is not None]
            if len(tl) >= 2 and tl[-1] >= tl[0]:
                fails.append(f"training loss did not decrease: {tl}")
            print(f"train_test: test loss {evals[0]['loss']:.4f} -> {evals[-1]['loss']:.4f}, "
                  f"train loss {tl}, hashes {[e['hash'] for e in evals]}")
        if res["steps"] <= 0:
            fails.append("no training step ran")
        # The per-step pairs experiment.py --steps-csv bins (the late rank's sleep and its own
        # all-reduce time): one per step of the rank that slept most, its sleeps summing to its
        # total.
        totals = full.get("sleep_s_total") or []
        if totals and max(totals) > 0:
            sys.path.insert(0, os.path.join(ROOT, "scripts", "train"))
            from experiment import late_rank_steps  # noqa: E402
            pairs = late_rank_steps(full)
            late = max(range(len(totals)), key=lambda i: totals[i])
            if len(pairs) != res["steps"]:
                fails.append(f"per-step pairs: {len(pairs)} for {res['steps']} steps")
            elif abs(sum(x for x, _ in pairs) - 1e3 * totals[late]) > 1e-3:
                fails.append(f"per-step sleeps of rank {late} sum to "
                             f"{sum(x for x, _ in pairs):.3f} ms, its total is "
                             f"{1e3 * totals[late]:.3f} ms")
            elif any(y <= 0 for _, y in pairs):
                fails.append("a per-step all-reduce time is not positive")
            else:
                print(f"train_test: per-step pairs of rank {late}: {len(pairs)} steps, sleeps "
                      f"{sum(x for x, _ in pairs):.1f} ms in all")
    for r, v in sorted(reports.items()):
        print(f"train_test: rank {r}: calls={v[0]} fallbacks={v[1]} skips={v[2]} late={v[3]}")
    if fails:
        print("train_test: FAIL:\n  " + "\n  ".join(fails), file=sys.stderr)
        return 1
    print("train_test: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
