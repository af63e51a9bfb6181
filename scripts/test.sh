#!/usr/bin/env bash
# README command 2: install dependencies, build (RelWithDebInfo) and run the whole test suite.
#
# Usage: scripts/test.sh [CTEST_ARGS...]   e.g. scripts/test.sh -R config
# Env: BUILD_DIR (default: build), SIM_BUILD_DIR (default: build-sim; the SimGrid build,
#      scripts/sim_build.sh), both relative to the repository root.
# Exits with ctest's status (non-zero if any test failed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# simgrid: the SimGrid SMPI build and its smoke test (label sim) are part of the suite;
# cluster: iproute2 for the emulated-cluster tests (label cluster).
bash scripts/setup.sh simgrid cluster lint

# Every C/C++/CUDA source as .clang-format says (issue 12): fails fast, before the build.
bash scripts/check_format.sh

# mpirun (from ctest, and from gtest discovery at build time) as root, oversubscribed; same
# values as scripts/mpirun.sh.
export OMPI_ALLOW_RUN_AS_ROOT="${OMPI_ALLOW_RUN_AS_ROOT:-1}"
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}"
export OMPI_MCA_rmaps_base_oversubscribe="${OMPI_MCA_rmaps_base_oversubscribe:-1}"
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"

build_dir="${BUILD_DIR:-build}"
jobs="$(nproc)"

sim_dir="${SIM_BUILD_DIR:-build-sim}"
[[ "$sim_dir" == /* ]] || sim_dir="$PWD/$sim_dir"

cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSKIPRING_SIM_DRIVER="$sim_dir/apps/skipring_sim"
cmake --build "$build_dir" -j "$jobs"
# The SimGrid SMPI build (build-sim/) whose driver the sim-labelled tests run.
SIM_BUILD_DIR="$sim_dir" bash scripts/sim_build.sh

# Three passes. Tests labelled "mpi" start several ranks each with mpirun, usually more ranks
# than cores, and Open MPI ranks busy-poll: two such tests side by side on a 2-core machine
# starve each other and their timing (straggler detection, timeouts) goes wrong, so they run one
# at a time. Tests labelled "cluster" do the same across emulated hosts (scripts/vcluster.sh),
# each bringing up and tearing down its own network namespaces: one at a time too, after the mpi
# tests (skipped, exit 77, where namespaces are not permitted). Everything else (in-process
# unit tests) is cheap and independent, so it runs in parallel.
status=0
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" -LE '^(mpi|cluster)$' "$@" ||
  status=$?
ctest --test-dir "$build_dir" --output-on-failure -j 1 -L '^mpi$' "$@" || status=$?
ctest --test-dir "$build_dir" --output-on-failure -j 1 -L '^cluster$' "$@" || status=$?
exit "$status"
