#!/usr/bin/env bash
# README command 1: the straggler demo. Installs what is missing, builds skipring (Release) and
# runs a short experiment on 4 ranks: no straggler / one rank slow at every reduce-scatter step
# / one rank arriving late, each with skip-ahead, plain ring and MPI_Allreduce interleaved per
# iteration, then the late arrival across 4 emulated hosts (scripts/vcluster.sh; skipped, with
# the reason, where network namespaces are unavailable). Prints a table, writes a PNG and fails
# if any result is wrong.
#
# Usage: scripts/demo.sh [DEMO_ARGS...]   (passed to scripts/straggler_demo.py; --help lists them)
# Env: BUILD_DIR (default: build-release, relative to the repository root).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Base packages plus python3-matplotlib for the plot and iproute2 for the emulated hosts; quiet
# when nothing is missing.
bash scripts/setup.sh plots cluster

build_dir="${BUILD_DIR:-build-release}"
# Only the benchmark is needed; its build output goes to a log that is shown only on failure.
echo "Building $build_dir/apps/skipring_bench (Release) ..."
mkdir -p "$build_dir"
log="$build_dir/demo-build.log"
if ! { cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DSKIPRING_BUILD_TESTS=OFF &&
       cmake --build "$build_dir" -j "$(nproc)" --target skipring_bench; } >"$log" 2>&1; then
  tail -n 60 "$log" >&2
  echo "demo.sh: build failed; full log in $log" >&2
  exit 1
fi

# python3-matplotlib is installed for Debian's interpreter; prefer it over another python3 on
# PATH (pyenv, a virtual environment) that may lack matplotlib.
python=python3
if [[ -x /usr/bin/python3 ]]; then
  python=/usr/bin/python3
fi
exec "$python" scripts/straggler_demo.py --bench "$build_dir/apps/skipring_bench" \
  --out-dir "$build_dir/demo" "$@"
