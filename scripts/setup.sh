#!/usr/bin/env bash
# Installs the Debian 12 packages skipring needs; idempotent and quiet when nothing is missing.
#
# Usage: scripts/setup.sh [GROUP...]
#   (no group)  build + test + demo: compilers, CMake, Open MPI, libraries, GoogleTest, python3
#   simgrid     also SimGrid (simulated clusters)
#   plots       also matplotlib (plotting benchmark results)
#   lint        also shellcheck and clang-format
#   cluster     also iproute2 (ip, tc: scripts/vcluster.sh, the emulated cluster)
#   all         every group above
# The base group is always included: no other group is useful without it.
set -euo pipefail

# libgtest-dev on bookworm ships prebuilt libgtest*.a and CMake config files and depends on
# googletest (the sources), so googletest need not be listed.
base=(build-essential cmake pkg-config gfortran libopenmpi-dev openmpi-bin libucx-dev
      libhwloc-dev libspdlog-dev libfmt-dev libgtest-dev libbenchmark-dev libcli11-dev
      nlohmann-json3-dev python3)
group_simgrid=(libsimgrid-dev)
group_plots=(python3-matplotlib)
group_lint=(shellcheck clang-format)
group_cluster=(iproute2)

usage() { sed -n '2,12s/^# \{0,1\}//p' "$0"; }

wanted=("${base[@]}")
for group in "$@"; do
  case "$group" in
    build|test|base) ;;
    simgrid) wanted+=("${group_simgrid[@]}") ;;
    plots) wanted+=("${group_plots[@]}") ;;
    lint) wanted+=("${group_lint[@]}") ;;
    cluster) wanted+=("${group_cluster[@]}") ;;
    all) wanted+=("${group_simgrid[@]}" "${group_plots[@]}" "${group_lint[@]}"
                  "${group_cluster[@]}") ;;
    -h|--help) usage; exit 0 ;;
    *) echo "setup.sh: unknown group '$group'" >&2; usage >&2; exit 2 ;;
  esac
done

# Only packages dpkg does not report as fully installed go to apt-get.
missing=()
for pkg in "${wanted[@]}"; do
  if [[ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)" != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

# Root runs apt-get directly (fresh containers have no sudo); other users need sudo.
as_root=()
if ((EUID != 0)); then
  if command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
  else
    echo "setup.sh: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "setup.sh: installing ${missing[*]}"
# apt/dpkg are chatty even with -qq; keep their output in a log and show it only on failure.
log="$(mktemp "${TMPDIR:-/tmp}/skipring-setup.XXXXXX")"
trap 'rm -f "$log"' EXIT
if ! { "${as_root[@]}" apt-get update -qq &&
       "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
         apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "setup.sh: apt-get failed" >&2
  exit 1
fi
