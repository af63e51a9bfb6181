#!/usr/bin/python3
"""ctest driver: unmodified DDP training (scripts/train/ddp_train.py) on the skipring backend.

Usage: ddp_test.py --mpiexec MPIEXEC --np N [--python PY] [--expect-skips]
                   [--expect-buckets K] [--expect-timeline] [-- ddp_train options]

Runs the trainer under mpiexec with SKIPRING_REPORT=1 and asserts, for every variant it ran:
the parameter hashes were equal on every rank at every check (ddp_train.py exits 4 otherwise;
here: a hash list per check, no failure), the mean training loss of the last 5 steps is below
the first 5 steps', skipring ran the all-reduces (calls > 0 on every rank for the skipring
variants), with --expect-skips that some rank skipped ahead or saw a late piece (skips + late
> 0, from the counters and from the report lines), and with --expect-buckets K that every
rank ran at least K skipring all-reduces per step (DDP's bucket_cap_mb honoured), with
--expect-timeline (ddp_train.py --timeline) that every rank noted every bucket of every step,
each completing after it was ready, the buckets adding up to the model's gradients, and that the
floor of torch_bench.py ddp-floor lies between 0 and each step's time. Variant nocomm (no
all-reduce) is checked for a falling loss only. Prints the
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


def check_timeline(res, n):
    sys.path.insert(0, os.path.join(ROOT, "scripts", "train"))
    from torch_bench import step_floor_ms
    v, tl, fails = res["variant"], res.get("timeline"), []
    if not tl or len(tl) != n:
        return [f"{v}: timeline of {0 if not tl else len(tl)} ranks, expected {n}"]
    per_rank = []
    for r, marks in enumerate(tl):
        steps = {}
        for st, b, nbytes, ready, done in marks:
            steps.setdefault(int(st), []).append(nbytes)
            if not done >= ready:
                fails.append(f"{v}: rank {r} step {st} bucket {b} done before ready")
        per_rank.append(steps)
        if sorted(steps) != list(range(res["steps"])):
            fails.append(f"{v}: rank {r} noted steps {sorted(steps)}, expected all "
                         f"{res['steps']}")
        if len({sum(x) for x in steps.values()}) != 1:
            fails.append(f"{v}: rank {r}'s buckets add up differently per step")
    if any(p != per_rank[0] for p in per_rank):
        fails.append(f"{v}: ranks noted different buckets")
    for step_ms, floor in step_floor_ms(res, n, 125e6):
        if not 0 < floor <= step_ms:
            fails.append(f"{v}: floor {floor:.1f} ms outside (0, step {step_ms:.1f} ms]")
    return fails


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--np", type=int, required=True)
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--timeout", type=float, default=240)
    p.add_argument("--expect-skips", action="store_true")
    p.add_argument("--expect-buckets", type=int, default=0)
    p.add_argument("--expect-timeline", action="store_true")
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
        if v == "nocomm":
            if not res["loss_last5"] < res["loss_first5"]:
                fails.append(f"nocomm: training loss did not fall")
            continue
        if a.expect_timeline:
            fails += check_timeline(res, a.np)
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
