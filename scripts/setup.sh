#!/usr/bin/env bash
# Installs the Debian 12 packages skipring needs; idempotent and quiet when nothing is missing.
#
# Usage: scripts/setup.sh [GROUP...]
#   (no group)  build + test + demo: compilers, CMake, Open MPI, libraries, GoogleTest, python3
#   simgrid     also SimGrid (simulated clusters)
#   plots       also matplotlib (plotting benchmark results)
#   lint        also shellcheck and clang-format
#   cluster     also iproute2 (ip, tc: scripts/vcluster.sh, the emulated cluster)
#   mpich       also MPICH 4 (the second MPI the suite builds and runs against; Open MPI stays
#               the default mpicc/mpirun: /etc/alternatives is restored after the install)
#   slurm       also SLURM's daemons and client commands (the slurm-labelled tests)
#   train       also mpi4py, scikit-learn and PyTorch (scripts/train/, the training clients)
#   torch       also libtorch-dev, pybind11 and torchvision (the skipring torch.distributed
#               backend, python/skipring_torch; with the train group's python3-torch)
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
group_mpich=(mpich libmpich-dev)
group_slurm=(slurm-wlm slurm-client)
group_train=(python3-mpi4py python3-numpy python3-sklearn python3-torch)
group_torch=(python3-torch python3-numpy python3-sklearn python3-dev libtorch-dev pybind11-dev
             python3-pybind11 python3-torchvision)

usage() { sed -n '2,18s/^# \{0,1\}//p' "$0"; }

wanted=("${base[@]}")
for group in "$@"; do
  case "$group" in
    build|test|base) ;;
    simgrid) wanted+=("${group_simgrid[@]}") ;;
    plots) wanted+=("${group_plots[@]}") ;;
    lint) wanted+=("${group_lint[@]}") ;;
    cluster) wanted+=("${group_cluster[@]}") ;;
    mpich) wanted+=("${group_mpich[@]}") ;;
    slurm) wanted+=("${group_slurm[@]}") ;;
    train) wanted+=("${group_train[@]}") ;;
    torch) wanted+=("${group_torch[@]}") ;;
    all) wanted+=("${group_simgrid[@]}" "${group_plots[@]}" "${group_lint[@]}"
                  "${group_cluster[@]}" "${group_mpich[@]}" "${group_slurm[@]}"
                  "${group_train[@]}" "${group_torch[@]}") ;;
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
# MPICH's packages register mpicc/mpirun alternatives that can win over Open MPI's; the
# project's default MPI stays Open MPI (MPICH is always reached as mpicc.mpich/mpiexec.mpich).
for pair in mpi:/usr/bin/mpicc.openmpi mpirun:/usr/bin/mpirun.openmpi; do
  alt="${pair%%:*}" target="${pair#*:}"
  if [[ -e "$target" ]] && update-alternatives --query "$alt" >/dev/null 2>&1; then
    "${as_root[@]}" update-alternatives --quiet --set "$alt" "$target" >/dev/null 2>&1 || true
  fi
done
