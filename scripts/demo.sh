#!/usr/bin/env bash
# README command 1: build skipring (Release) and benchmark it against MPI_Allreduce on 4 ranks.
#
# Usage: scripts/demo.sh [BENCH_ARGS...]   (extra arguments are appended to skipring_bench's)
# Env: BUILD_DIR (default: build-release, relative to the repository root).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

echo "skipring demo: 4-rank all-reduce, skipring vs MPI_Allreduce, sizes from 8 B growing x8 up to 64 MiB."

bash scripts/setup.sh

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

exec bash scripts/mpirun.sh -np 4 "$build_dir/apps/skipring_bench" \
  -b 8 -e 64M -f 8 -n 10 -w 3 --compare mpi "$@"
