#!/usr/bin/env python3
"""The census's rests across emulated hosts: long runs and a straggler after a quiet spell.

Brings up 4 emulated hosts x 1 rank at 1 Gbit/s (scripts/vcluster.sh) and runs
build-release/apps/skipring_bench there, interleaved run by run, writing one line per
(run, case, variant) to --out with the commit in its header (docs/benchmarks.md, "The census's
rests (long runs)" and "A straggler after a quiet spell"):

  long   40 timed calls after 2 warm-ups, out-of-place, per case "SIZE:LATE_MS" (LATE_MS 0: no
         straggler, --overhead), the default (the census rests) against SKIPRING_LATE_CHAIN=1
         (a census at every call); columns: run size late_ms variant skip_after_p50_us
         ring_after_p50_us skip/ring.
  quiet  --late-every K (default 10): only the late calls are timed, each after K - 1 quiet
         calls, --iters timed calls after 1 warm-up; columns: run size late_ms skip_after_p50_us
         ring_after_p50_us mpi_after_p50_us skip/ring skips_per_call wrong(skip,ring,mpi).

  /usr/bin/python3 scripts/census_rests_bench.py long --out docs/data/cluster_census_rests_ab.txt
  /usr/bin/python3 scripts/census_rests_bench.py quiet --iters 8 \\
      --out docs/data/census_rest_quiet_spell.txt

Exits 77 where emulated hosts are not possible, 1 when a run fails or a result is wrong.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_bench as cb  # noqa: E402  (vcluster, git_commit)

BENCH = os.path.join(cb.ROOT, "build-release", "apps", "skipring_bench")


def bench(args):
    """One skipring_bench run across the hosts (vcluster.sh passes on every SKIPRING_*
    variable of this environment); its single JSON row."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "row.json")
        proc = cb.vcluster("run", "-p", "1", BENCH, *args, "--json", out, check=False)
        if proc.returncode != 0 or not os.path.exists(out):
            raise SystemExit(f"census_rests_bench: skipring_bench {' '.join(args)} failed "
                             f"({proc.returncode}):\n{proc.stdout[-3000:]}")
        with open(out) as f:
            rows = json.load(f)
    if len(rows) != 1:
        raise SystemExit(f"census_rests_bench: expected one row, got {len(rows)}")
    return rows[0]


def check_exact(row, variants):
    bad = {v: row.get(f"{v}_wrong") for v in variants if row.get(f"{v}_wrong") != 0}
    if bad:
        raise SystemExit(f"census_rests_bench: wrong results {bad} in {row}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["long", "quiet"])
    ap.add_argument("--runs", type=int, default=None, help="rounds (long 2, quiet 3)")
    ap.add_argument("--cases", default=None,
                    help="SIZE:LATE_MS,... (long 4M:10,16M:40,4M:0; quiet 4M:20,4M:200,16M:20,"
                         "16M:200)")
    ap.add_argument("--iters", type=int, default=None, help="timed calls (long 40, quiet 4)")
    ap.add_argument("--every", type=int, default=10, help="quiet: --late-every K")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    long_mode = a.mode == "long"
    runs = a.runs or (2 if long_mode else 3)
    iters = a.iters or (40 if long_mode else 4)
    cases = a.cases or ("4M:10,16M:40,4M:0" if long_mode else "4M:20,4M:200,16M:20,16M:200")
    cases = [(c.split(":")[0], float(c.split(":")[1])) for c in cases.split(",")]
    if not os.path.exists(BENCH):
        raise SystemExit(f"census_rests_bench: {BENCH} missing: cmake --build build-release "
                         "--target skipring_bench")
    cb.vcluster("up", "4", "1gbit")
    commit = cb.git_commit()
    lines = []
    if long_mode:
        lines.append(f"# skipring_bench -n {iters} -w 2 --outofplace-only across 4 emulated hosts"
                     f" x 1 rank, 1 Gbit/s, rests (default) vs census (SKIPRING_LATE_CHAIN=1),"
                     f" at {commit}")
        lines.append("# columns: run size late_ms variant skip_after_p50_us ring_after_p50_us "
                     "skip/ring")
    else:
        lines.append(f"# skipring_bench --late-every {a.every} across 4 emulated hosts x 1 rank, "
                     f"1 Gbit/s, -n {iters} -w 1 --late-rank 1 --late-ms LATE, at {commit}")
        lines.append("# columns: run size late_ms skip_after_p50_us ring_after_p50_us "
                     "mpi_after_p50_us skip/ring skips_per_call wrong_skip wrong_ring wrong_mpi")
    for run in range(1, runs + 1):
        for size, late in cases:
            late_txt = f"{late:g}"
            if long_mode:
                mode = (["--overhead"] if late == 0 else
                        ["--late-rank", "1", "--late-ms", late_txt])
                for variant in ("rests", "census"):
                    if variant == "census":
                        os.environ["SKIPRING_LATE_CHAIN"] = "1"
                    try:
                        row = bench(["-b", size, "-e", size, "-n", str(iters), "-w", "2",
                                     "--outofplace-only", *mode])
                    finally:
                        os.environ.pop("SKIPRING_LATE_CHAIN", None)
                    check_exact(row, ("skip", "ring"))
                    s, r = row["skip_after_p50_us"], row["ring_after_p50_us"]
                    lines.append(f"{run} {size} {late_txt} {variant} {s:.1f} {r:.1f} {s / r:.3f}")
                    print(lines[-1], flush=True)
            else:
                row = bench(["-b", size, "-e", size, "-n", str(iters), "-w", "1", "--late-rank",
                             "1", "--late-ms", late_txt, "--late-every", str(a.every)])
                check_exact(row, ("skip", "ring", "mpi"))
                s, r, m = (row["skip_after_p50_us"], row["ring_after_p50_us"],
                           row["mpi_after_p50_us"])
                lines.append(f"{run} {size} {late_txt} {s:.1f} {r:.1f} {m:.1f} {s / r:.3f} "
                             f"{row['skip_skips_per_iter']:.1f} {row['skip_wrong']} "
                             f"{row['ring_wrong']} {row['mpi_wrong']}")
                print(lines[-1], flush=True)
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"census_rests_bench: wrote {a.out}")


if __name__ == "__main__":
    main()
