#!/usr/bin/python3
"""ctest driver: unmodified DDP training (scripts/train/ddp_train.py) on the skipring backend.

Usage: ddp_test.py --mpiexec MPIEXEC --np N [--python PY] [--expect-skips]
                   [--expect-buckets K] [-- ddp_train options]

Runs the trainer under mpiexec with SKIPRING_REPORT=1 and asserts, for every variant it ran:
the parameter hashes were equal on every rank at every check (ddp_train.py exits 4 otherwise;
here: a hash list per check, no failure), the mean training loss of the last 5 steps is below
the first 5 steps', skipring ran the all-reduces (calls > 0 on every rank for the skipring
variants), with --expect-skips that some rank skipped ahead or saw a late piece (skips + late
> 0, from the counters and from the report lines), and with --expect-buckets K that every
rank ran at least K skipring all-reduces per step (DDP's bucket_cap_mb honoured). Prints the
report line of every rank. Exit 77 with the reason where torch or skipring_torch is missing.
"""
import argparse
import json
import os
import re
import subprocess
import sys

SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Not anchored to line starts and ends: two ranks' output may share a line under mpirun.
REPORT_RE = re.compile(r"skipring: rank=(\d+) calls=(\d+) fallbacks=(\d+) skips=(\d+) "
                       r"late=(\d+) bytes=(\d+) time_s=(\d+\.\d{6})")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--np", type=int, required=True)
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--timeout", type=float, default=240)
    p.add_argument("--expect-skips", action="store_true")
    p.add_argument("--expect-buckets", type=int, default=0)
    p.add_argument("--need", default="", help="extra module the run needs (torchvision)")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    a = p.parse_args()
    for m in ["torch", "numpy", "sklearn", "skipring_torch"] + ([a.need] if a.need else []):
        r = subprocess.run([a.python, "-c", f"import importlib.util, sys; "
                            f"sys.exit(importlib.util.find_spec('{m}') is None)"])
        if r.returncode != 0:
            print(f"SKIPPED: {a.python} cannot find {m} (Debian: python3-torch python3-sklearn "
                  f"python3-torchvision; skipring_torch: build with libtorch-dev + pybind11-dev, "
                  f"PYTHONPATH=build/python)")
            return SKIP
    extra = [x for x in a.rest if x != "--"]
    env = dict(os.environ, SKIPRING_REPORT="1")
    cmd = [a.mpiexec, "-np", str(a.np), a.python,
           os.path.join(ROOT, "scripts", "train", "ddp_train.py"), *extra]
    print("ddp_test: " + " ".join(cmd), flush=True)
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=a.timeout, env=env)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        print(out[-4000:])
        print(f"ddp_test: FAIL: the job ran past {a.timeout} s", file=sys.stderr)
        return 1
    print(proc.stdout, end="")
    if proc.returncode != 0:
        print(f"ddp_test: FAIL: mpiexec exited {proc.returncode}", file=sys.stderr)
        return 1
    fails = []
    results = [json.loads(m.group(1)) for m in re.finditer(r"^ddp-result: (\{.*\})$",
                                                         proc.stdout, re.M)]
    reports = {int(m.group(1)): [int(x) for x in m.groups()[1:6]]
               for m in REPORT_RE.finditer(proc.stdout)}
    if not results:
        fails.append("no ddp-result line from rank 0")
    if sorted(reports) != list(range(a.np)):
        fails.append(f"report lines from ranks {sorted(reports)}, expected 0..{a.np - 1}")
    for res in results:
        v = res["variant"]
        if len(res["hashes"]) < 2:
            fails.append(f"{v}: {len(res['hashes'])} hash checks")
        if not res["loss_last5"] < res["loss_first5"]:
            fails.append(f"{v}: training loss did not fall: {res['loss_first5']:.4f} -> "
                         f"{res['loss_last5']:.4f}")
        if v in ("skipring", "ring"):
            if min(res["skipring_calls"]) <= 0:
                fails.append(f"{v}: skipring ran no all-reduce on some rank: "
                             f"{res['skipring_calls']}")
            if a.expect_buckets and min(res["skipring_calls"]) < a.expect_buckets * res["steps"]:
                fails.append(f"{v}: {res['skipring_calls']} skipring calls for {res['steps']} "
                             f"steps, expected >= {a.expect_buckets} buckets per step")
        if v == "skipring" and a.expect_skips:
            if sum(res["skipring_skips"]) + sum(res["skipring_late"]) == 0:
                fails.append(f"{v}: a late rank but skips + late == 0 on every rank")
        print(f"ddp_test: {v}: loss {res['loss_first5']:.4f} -> {res['loss_last5']:.4f}, "
              f"hashes {res['hashes']}, step {res['step_ms_median']:.1f} ms, skipring calls "
              f"{res['skipring_calls']} skips {res['skipring_skips']} late {res['skipring_late']}")
    if a.expect_skips and reports and sum(r[2] + r[3] for r in reports.values()) == 0:
        fails.append("report lines: skips + late == 0 on every rank")
    if fails:
        print("ddp_test: FAIL:\n  " + "\n  ".join(fails), file=sys.stderr)
        return 1
    print("ddp_test: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
