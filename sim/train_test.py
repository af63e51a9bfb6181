#!/usr/bin/env python3
"""ctest sim_train (label sim): the SimGrid training loop (apps/sim_train.cpp), 4 ranks.

Usage: sim/train_test.py DRIVER      (DRIVER: build-sim/apps/skipring_sim_train)
Exits 77 (ctest: skipped) when smpirun or DRIVER is missing: scripts/sim_build.sh makes both.

Checks, each able to fail (the simulation is deterministic: no timing noise):
  1. every mode's result is exact (the same bits on every rank, near a double reference);
  2. one persistently slow rank, 2 ms late at each step against a 1 MiB bucket's ~0.2 ms
     all-reduce: skip-ahead's all-reduces cost less after the last arrival than the plain
     ring's (the late path: the others' reduce-scatter is done when the rank comes);
  3. nobody late: skip-ahead costs at most 5 % more than the plain ring;
  4. every mode sees the same lateness (the draws do not depend on the mode).
"""

import sys

from simtest import SKIP, check, driver_or_skip, rows, sim_run


def step(driver, scenario, mode):
    args = ["--params", "1048576", "--bucket", "1M", "--scenario", scenario, "--mode", mode,
            "--compute-us", "4000", "--late-us", "2000", "--steps", "3", "--warmup", "1"]
    r = rows(sim_run(driver, 4, args, env={"SKIPRING_SIM_REDUCE_GBPS": "50"}))
    check(len(r) == 1, f"{scenario}/{mode}: one line")
    print(f"# {scenario} {mode}: step {r[0]['step_us']} us, late {r[0]['late_us']} us, "
          f"comm {r[0]['comm_us']} us, exact {r[0]['exact']}")
    return r[0]


def main():
    driver = driver_or_skip(__doc__)
    if driver is None:
        return SKIP
    res = {(sc, m): step(driver, sc, m) for sc in ("slow", "none") for m in ("skip", "ring")}
    res[("exp", "skip")] = step(driver, "exp", "skip")
    res[("exp", "ring")] = step(driver, "exp", "ring")
    check(all(r["exact"] == "1" for r in res.values()), "exact in every mode")
    s, r = float(res[("slow", "skip")]["comm_us"]), float(res[("slow", "ring")]["comm_us"])
    check(s < r, f"slow rank: skip-ahead's comm {s:.1f} us < the plain ring's {r:.1f} us")
    s, r = float(res[("none", "skip")]["comm_us"]), float(res[("none", "ring")]["comm_us"])
    check(s <= 1.05 * r, f"nobody late: skip-ahead's comm {s:.1f} us <= 1.05 x the ring's {r:.1f}")
    check(res[("exp", "skip")]["late_us"] == res[("exp", "ring")]["late_us"],
          "the same lateness draws in both modes")
    check(float(res[("exp", "skip")]["late_us"]) > 0, "exp: someone is late")
    print("sim_train: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
