"""Shared pieces of the SimGrid ctest scripts (sim/smoke_test.py, sim/hier_test.py)."""
import csv
import io
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIM_RUN = os.path.join(REPO, "scripts", "sim_run.sh")
PLATFORMS = os.path.join(REPO, "sim", "platforms")
SKIP = 77  # ctest SKIP_RETURN_CODE


def driver_or_skip(doc):
    """The driver named on the command line, or None (after saying why) when it cannot run."""
    if len(sys.argv) != 2:
        raise SystemExit(doc)
    driver = sys.argv[1]
    if shutil.which("smpirun") is None:
        print("skipped: smpirun not found (bash scripts/sim_build.sh installs SimGrid)")
        return None
    if not os.access(driver, os.X_OK):
        print(f"skipped: {driver} not built (bash scripts/sim_build.sh)")
        return None
    return driver


def sim_run(driver, np, args, env=None, platform=None, expect_rc=0):
    """skipring_sim under scripts/sim_run.sh with only the SKIPRING_* of `env`."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPRING_")}
    full_env.update(env or {})
    cmd = ["bash", SIM_RUN, "-np", str(np)]
    if platform:
        stem = os.path.join(PLATFORMS, platform)
        cmd += ["-platform", stem + ".xml", "-hostfile", stem + ".hosts"]
    cmd += [driver] + args
    p = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=120)
    if p.returncode != expect_rc:
        sys.stdout.write(p.stdout + p.stderr)
        raise SystemExit(f"FAIL: exit {p.returncode} (expected {expect_rc}): {' '.join(cmd)} "
                         f"{env or ''}")
    return p


def rows(p):
    return [r for r in csv.DictReader(io.StringIO(p.stdout)) if r.get("mode")]


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        raise SystemExit(1)
