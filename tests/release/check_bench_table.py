#!/usr/bin/env python3
"""skipring_bench's stdout tables read the way their parsers read them (issue 15).

--format nccl (the default): every data line split on whitespace gives nccl-tests'
all_reduce_perf columns at nccl-tests' positions,
    0 size  1 count  2 type  3 redop  4 root  5-8 out-of-place time algbw busbw #wrong
    9-12 in-place time algbw busbw #wrong
then skipring's (13 algo, then p50 p99 [mpi_p50 speedup] per variant); root is -1, size is
count x the type's size, algbw = size / time, busbw = algbw x 2(n-1)/n (to the printed
rounding), #wrong is 0, a variant not run shows '-' at its positions, and the algo column's
right edge is the same on every line (no label overflows it). --format osu: osu_allreduce -f's
header and columns (size, avg, min, max latency, iterations) with min <= avg <= max, the
iteration count asked for and sizes doubling from -b to -e.

usage: check_bench_table.py --launch "MPIEXEC -n" --bench PATH [--np N] [--preflags ...]
Runs three short skipring_bench jobs; exits 0 when every check holds, 1 naming the first that
fails.
"""
import argparse
import re
import shlex
import subprocess
import sys

TYPE_BYTES = {"int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
              "int64": 8, "uint64": 8, "float": 4, "double": 8, "half": 2, "bfloat16": 2}
NCCL_TITLES = ["size", "count", "type", "redop", "root",
               "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"]


class CheckError(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise CheckError(what)


def run(args, bench_args):
    cmd = shlex.split(args.launch) + [str(args.np)] + shlex.split(args.preflags) + \
        [args.bench] + bench_args
    print("check_bench_table: running:", " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=240)
    print(proc.stdout, flush=True)
    expect(proc.returncode == 0, f"skipring_bench exited with {proc.returncode}")
    return proc.stdout.splitlines()


def data_lines(lines):
    return [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def close(a, b, abs_tol, rel_tol=0.02):
    return abs(a - b) <= abs_tol + rel_tol * abs(b)


def check_nccl(lines, np, oop, ip, compare_mpi):
    titles = next((ln for ln in lines if ln.startswith("#") and " redop " in ln), None)
    expect(titles is not None, "no column-title line (# size count type redop ...)")
    t = titles[1:].split()
    expect(t[:13] == NCCL_TITLES, f"titles 0-12 are {t[:13]}, nccl-tests has {NCCL_TITLES}")
    extra = ["p50", "p99"] + (["mpi_p50", "speedup"] if compare_mpi else [])
    expect(t[13:] == ["algo"] + extra + extra, f"skipring's titles after nccl-tests': {t[13:]}")
    algo_end = len(titles) - len(titles[1:].split(" algo", 1)[1]) if " algo" in titles else -1
    rows = data_lines(lines)
    expect(rows, "no data lines")
    factor = 2.0 * (np - 1) / np
    for ln in rows:
        f = ln.split()
        expect(len(f) == len(t), f"{len(f)} fields, {len(t)} titles: {ln!r}")
        size, count, typ, root = int(f[0]), int(f[1]), f[2], int(f[4])
        expect(root == -1, f"root {root}, not -1: {ln!r}")
        expect(typ in TYPE_BYTES and size == count * TYPE_BYTES[typ],
               f"size {size} is not count {count} x sizeof({typ}): {ln!r}")
        for first, ran in ((5, oop), (9, ip)):
            cells = f[first:first + 4]
            if not ran:
                expect(cells == ["-"] * 4, f"variant not run: {cells}, expected '-': {ln!r}")
                continue
            time_us, algbw, busbw, wrong = float(cells[0]), float(cells[1]), float(cells[2]), \
                int(cells[3])
            expect(time_us > 0, f"time {time_us} us: {ln!r}")
            expect(wrong == 0, f"#wrong {wrong}: {ln!r}")
            expect(close(algbw, size / time_us / 1e3, 0.006), f"algbw {algbw} != size/time: {ln!r}")
            expect(close(busbw, algbw * factor, 0.011), f"busbw {busbw} != algbw x {factor}: {ln!r}")
        algo = f[13]
        expect(re.fullmatch(r"(auto:)?[a-z]+", algo), f"algo '{algo}': {ln!r}")
        # The algo column ends where its title ends: no label overflows it.
        end = ln.index(" " + algo + " ", len(" ".join(f[:13]))) + 1 + len(algo)
        expect(end == algo_end, f"algo column ends at {end}, its title at {algo_end}: {ln!r}")
    return rows


def check_osu(lines, iters, lo, hi):
    header = next((ln for ln in lines if ln.startswith("# Size")), None)
    expect(header is not None, "no '# Size' header line")
    expect(re.match(r"# Size +Avg Latency\(us\) +Min Latency\(us\) +Max Latency\(us\) +"
                    r"Iterations", header), f"OSU header: {header!r}")
    rows = data_lines(lines)
    sizes = []
    for ln in rows:
        f = ln.split()
        size, avg, lo_lat, hi_lat, n = int(f[0]), float(f[1]), float(f[2]), float(f[3]), int(f[4])
        expect(0 < lo_lat <= avg + 0.011 and avg <= hi_lat + 0.011,
               f"not min <= avg <= max: {ln!r}")
        expect(n == iters, f"iterations {n}, asked for {iters}: {ln!r}")
        expect(f[-1] == "0", f"#wrong {f[-1]}: {ln!r}")
        sizes.append(size)
    want = []
    s = lo
    while s <= hi:
        want.append(s)
        s *= 2
    expect(sizes == want, f"sizes {sizes}, expected {want}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launch", required=True, help="launcher and its rank-count flag")
    ap.add_argument("--preflags", default="")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--bench", required=True)
    args = ap.parse_args()
    try:
        lines = run(args, ["-b", "8", "-e", "256K", "-f", "8", "-n", "3", "-w", "1",
                           "-d", "float,int8", "--algo", "auto,rabenseifner"])
        rows = check_nccl(lines, args.np, oop=True, ip=True, compare_mpi=False)
        expect(len(rows) == 6 * 2 * 2, f"{len(rows)} rows, expected 24 (6 sizes x 2 types x 2)")
        lines = run(args, ["-b", "4K", "-e", "64K", "-f", "16", "-n", "3", "-w", "1",
                           "--outofplace-only", "--compare", "mpi"])
        check_nccl(lines, args.np, oop=True, ip=False, compare_mpi=True)
        lines = run(args, ["--format", "osu", "-b", "4", "-e", "1K", "-n", "5", "-w", "1"])
        check_osu(lines, 5, 4, 1024)
    except (CheckError, ValueError, IndexError) as e:
        print(f"check_bench_table: FAIL: {e}", file=sys.stderr)
        return 1
    print("check_bench_table: OK (nccl-tests positions, '-' for a variant not run, OSU table)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
