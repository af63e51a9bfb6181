#!/usr/bin/env python3
"""skipring_bench --late-every K: only the late calls are timed, after K - 1 quiet calls each.

Runs skipring_bench at 64 KiB with rank 1 LATE ms late, --late-every 3, 2 timed iterations
after 1 warm-up, SKIPRING_LOG_LEVEL=debug, and checks: the JSON row says late_every 3; every
variant's total time (the late rank's sleep included) is at least LATE ms at the p50, so the
timed calls are the late ones; nothing wrong; and rank 0 logged (1 + 2) x 3 x 2 = 18 skipring
all-reduces (skip and ring variants; the MPI variant does not go through skipring), so the
quiet calls ran; with --late-every 1 it would be 6.

usage: check_late_every.py --launch "MPIEXEC -n" --bench PATH [--preflags ...]
Exits 0 when every check holds, 1 naming the first that fails.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

LATE_MS = 20.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launch", required=True)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--preflags", default="")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "late_every.json")
        cmd = shlex.split(a.launch) + ["3"] + shlex.split(a.preflags) + [
            a.bench, "-b", "64K", "-e", "64K", "-n", "2", "-w", "1", "--late-rank", "1",
            "--late-ms", str(LATE_MS), "--late-every", "3", "--json", out]
        env = dict(os.environ, SKIPRING_LOG_LEVEL="debug")
        print("check_late_every: running:", " ".join(cmd), flush=True)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=240, env=env)
        calls = len(re.findall(r"r0\] debug: allreduce seq=\d+ ", proc.stdout))
        problems = []
        if proc.returncode != 0:
            problems.append(f"skipring_bench exited with {proc.returncode}")
        else:
            with open(out) as f:
                row = json.load(f)[0]
            if row.get("late_every") != 3:
                problems.append(f"late_every in the JSON row: {row.get('late_every')!r}, not 3")
            for v in ("skip", "ring", "mpi"):
                total = row.get(f"{v}_total_p50_us")
                if total is None or total < LATE_MS * 1e3:
                    problems.append(f"{v}: total p50 {total} us, under the {LATE_MS} ms sleep: "
                                    "the timed calls are not the late ones")
                if row.get(f"{v}_wrong") != 0:
                    problems.append(f"{v}: {row.get(f'{v}_wrong')} wrong elements")
            if calls != 18:
                problems.append(f"rank 0 logged {calls} skipring all-reduces, not 18 "
                                "(3 iterations x 3 calls x 2 variants)")
    if problems:
        print(proc.stdout[-3000:])
        for p in problems:
            print("check_late_every: FAILED:", p)
        return 1
    print("check_late_every: passed (late_every 3, timed calls late, 18 calls, exact)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
