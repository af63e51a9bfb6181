#!/usr/bin/env bash
# Builds skipring for SimGrid SMPI: installs what is missing (scripts/setup.sh simgrid), then
# configures and builds build-sim/ with smpicc/smpicxx and -DSKIPRING_SIMGRID=ON: the library
# (static) and the experiment driver build-sim/apps/skipring_sim. Run it with scripts/sim_run.sh.
#
# Usage: scripts/sim_build.sh
# Env: SIM_BUILD_DIR (default: build-sim, relative to the repository root),
#      SIM_BUILD_TYPE (default: Release).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh simgrid

build_dir="${SIM_BUILD_DIR:-build-sim}"
# SMPI copies the executable once per simulated rank (global privatisation): no debug info
# keeps that copy small.
build_type="${SIM_BUILD_TYPE:-Release}"

cmake -S . -B "$build_dir" -DSKIPRING_SIMGRID=ON -DCMAKE_BUILD_TYPE="$build_type" \
  -DCMAKE_C_COMPILER=smpicc -DCMAKE_CXX_COMPILER=smpicxx >/dev/null
cmake --build "$build_dir" -j "$(nproc)" --target skipring_sim skipring_sim_train
