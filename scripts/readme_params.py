#!/usr/bin/env python3
"""Checks (or, with --update, rewrites) README.md's SKIPRING_* tables against the table in
runtime/params.cpp, as `skipring_info --markdown` and `--markdown-simgrid` print it.

Each table sits between the lines `<!-- BEGIN skipring_info FLAG -->` and
`<!-- END skipring_info FLAG -->`. The readme_params test runs the check; after changing a
parameter, run:

    scripts/readme_params.py --info build/apps/skipring_info --update
"""
import argparse
import difflib
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = ("--markdown", "--markdown-simgrid")


def block_bounds(lines, flag, readme):
    """Indices of the BEGIN and END marker lines of flag's table."""
    begin, end = f"<!-- BEGIN skipring_info {flag} -->", f"<!-- END skipring_info {flag} -->"
    starts = [i for i, line in enumerate(lines) if line.rstrip("\n") == begin]
    ends = [i for i, line in enumerate(lines) if line.rstrip("\n") == end]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        sys.exit(f"readme_params: {readme} needs exactly one '{begin}' line followed by one "
                 f"'{end}' line")
    return starts[0], ends[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--info", required=True, help="the skipring_info executable")
    ap.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    ap.add_argument("--update", action="store_true", help="rewrite the tables in the README")
    args = ap.parse_args()
    with open(args.readme, encoding="utf-8") as f:
        lines = f.readlines()
    stale = []
    for flag in FLAGS:
        want = subprocess.run([args.info, flag], check=True, stdout=subprocess.PIPE,
                              encoding="utf-8").stdout.splitlines(keepends=True)
        begin, end = block_bounds(lines, flag, args.readme)
        have = lines[begin + 1:end]
        if have == want:
            continue
        stale.append(flag)
        if args.update:
            lines[begin + 1:end] = want
        else:
            sys.stdout.writelines(difflib.unified_diff(
                have, want, f"{args.readme} ({flag} table)", f"skipring_info {flag}"))
    if args.update:
        if stale:
            with open(args.readme, "w", encoding="utf-8") as f:
                f.writelines(lines)
        print(f"readme_params: {len(stale)} table(s) rewritten in {args.readme}")
        return 0
    if stale:
        print(f"readme_params: FAILED: {args.readme} differs from skipring_info "
              f"{' / '.join(stale)}; run scripts/readme_params.py --info <build>/apps/"
              f"skipring_info --update")
        return 1
    print(f"readme_params: {args.readme} holds skipring_info's tables")
    return 0


if __name__ == "__main__":
    sys.exit(main())
