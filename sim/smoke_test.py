#!/usr/bin/env python3
"""ctest sim_smoke (label sim): skipring's real implementation under SimGrid SMPI, 4 ranks.

Usage: sim/smoke_test.py DRIVER      (DRIVER: build-sim/apps/skipring_sim)
Exits 77 (ctest: skipped) when smpirun or DRIVER is missing: scripts/sim_build.sh makes both.

Checks, each able to fail:
  1. a rank slow by 50 us at every reduce-scatter step, the paper's 8 KiB pieces (32 KiB over
     4 ranks): skip-ahead skips (skips > 0), the plain ring does not, int64 sums are exact on
     every rank; the same with floats: every rank holds the same bits;
  2. reductions cost simulated time: 3 reduce-scatter steps of 8 KiB at 2.73 GB/s add
     3 x 3.0 us to the reduce-scatter against a 1000 GB/s run;
  3. the progress engine's blocking wait (one wake-up per event, loopback timers) gives the
     times and skip decisions of polling every simulated nanosecond (late rank, skip timers);
  4. bad SimGrid-build settings fail at init naming the variable.
"""

import sys

from simtest import SKIP, check, driver_or_skip, rows, sim_run


def run(driver, args, env=None, expect_rc=0):
    return sim_run(driver, 4, args, env=env, expect_rc=expect_rc)


def main():
    driver = driver_or_skip(__doc__)
    if driver is None:
        return SKIP

    # 1. Injected straggler (after 4 warm-up collectives that teach the step timer T).
    straggler = ["--bytes", "32K", "--mode", "skip,ring", "--iters", "2", "--warmup", "4",
                 "--slow-rank", "1", "--delta-us", "50", "--at", "rs", "--expect-skips"]
    for dtype in ("int64", "float"):
        rs = rows(run(driver, straggler + ["--type", dtype]))
        print(f"# {dtype}: " + "; ".join(f"{r['mode']} t_rs={r['t_rs_us']}us skips={r['skips']}"
                                         for r in rs))
        check(len(rs) == 4, f"{dtype}: 4 measurements")
        check(all(r["exact"] == "1" for r in rs), f"{dtype}: exact on every rank")
        check(all(int(r["skips"]) > 0 for r in rs if r["mode"] == "skip"),
              f"{dtype}: skip-ahead skipped the slow rank")
        check(all(int(r["skips"]) == 0 for r in rs if r["mode"] == "ring"),
              f"{dtype}: the plain ring never skips")

    # 2. Reduction time is simulated: 3 steps x 8 KiB / 2.73 GB/s = 9.0 us.
    ring = ["--bytes", "32K", "--mode", "ring", "--iters", "1", "--warmup", "1"]
    slow = rows(run(driver, ring, {"SKIPRING_SIM_REDUCE_GBPS": "2.73"}))[0]
    fast = rows(run(driver, ring, {"SKIPRING_SIM_REDUCE_GBPS": "1000"}))[0]
    expect = 3 * 8192 * (1 / 2.73e9 - 1 / 1e12) * 1e6
    got = float(slow["t_rs_us"]) - float(fast["t_rs_us"])
    check(abs(got - expect) < 0.05,
          f"reduce time charged: reduce-scatter {got:.3f} us longer at 2.73 GB/s "
          f"(expected {expect:.3f})")

    # 3. Blocking wait == fine polling, with skip timers and a late rank (skip decisions too).
    late = ["--bytes", "32K", "--mode", "skip,ring", "--iters", "1", "--warmup", "4",
            "--late-rank", "2", "--late-us", "100"]
    block = rows(run(driver, late, {"SKIPRING_SIM_WAIT": "block"}))
    poll = rows(run(driver, late, {"SKIPRING_SIM_WAIT": "poll", "SKIPRING_SIM_POLL_NS": "1"}))
    for b, p in zip(block, poll):
        diff = abs(float(b["t_total_us"]) - float(p["t_total_us"]))
        check(diff < 0.05 and b["skips"] == p["skips"],
              f"{b['mode']}: blocking wait matches 1 ns polling: {b['t_total_us']} vs "
              f"{p['t_total_us']} us, skips {b['skips']} vs {p['skips']}")

    # 4. Bad settings fail at init, naming the variable.
    for var, value in (("SKIPRING_SIM_REDUCE_GBPS", "0"), ("SKIPRING_SIM_WAIT", "spin"),
                       ("SKIPRING_CLOCK", "steady")):
        p = run(driver, ["--iters", "1"], {var: value}, expect_rc=1)
        check(f"invalid value '{value}' for {var}" in p.stderr, f"{var}={value} rejected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
