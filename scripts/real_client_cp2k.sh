#!/usr/bin/env bash
# A real Fortran client under the drop-in (issue 40 item 3): CP2K (Debian's cp2k 2023.1, built on
# Open MPI 4.1.4) computes the PBE energy of one water molecule (Quickstep, DZVP-MOLOPT basis,
# 200 Ry cutoff), once on Open MPI alone and once with libskipring_pmpi.so preloaded. Checks that
# both energies are the same to the last printed digit and prints skipring's report lines: how
# many of CP2K's all-reduces ran in skipring and why the others went to the MPI library
# (fallback_datatype, fallback_op, ...). Exit 0: same energy; 1: differ or a run failed; 77:
# cp2k not installed and not installable (--install not given, or apt failed).
#
# Usage: scripts/real_client_cp2k.sh [--build DIR] [--np N] [--install] [--keep DIR]
#                                    [--no-datatype-fallbacks]
#   --build DIR   the build tree holding runtime/pmpi/libskipring_pmpi.so (default build-release)
#   --np N        ranks (default 2)
#   --no-datatype-fallbacks  also fail unless every rank's report says fallback_datatype=0
#   --install     apt-get install cp2k when it is missing (~60 MB)
#   --keep DIR    write the input and outputs there (default: a temporary directory, removed)
set -euo pipefail

build="build-release"
np=2
install=0
keep=""
strict=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --np) np="$2"; shift 2 ;;
    --install) install=1; shift ;;
    --keep) keep="$2"; shift 2 ;;
    --no-datatype-fallbacks) strict=1; shift ;;
    -h | --help) sed -n '2,17s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "real_client_cp2k: unknown option '$1'" >&2; exit 2 ;;
  esac
done

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[[ "$build" = /* ]] || build="$root/$build"
lib="$build/runtime/pmpi/libskipring_pmpi.so"
[[ -f "$lib" ]] || { echo "real_client_cp2k: $lib not found (build first)" >&2; exit 1; }

if ! command -v cp2k.psmp >/dev/null; then
  if ((install)); then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q cp2k >/dev/null 2>&1 ||
      { echo "real_client_cp2k: apt-get install cp2k failed" >&2; exit 77; }
  else
    echo "real_client_cp2k: cp2k.psmp not found (apt-get install cp2k, or --install)" >&2
    exit 77
  fi
fi

if [[ -n "$keep" ]]; then
  mkdir -p "$keep"
  dir="$(cd "$keep" && pwd)"
else
  dir="$(mktemp -d)"
  trap 'rm -rf "$dir"' EXIT
fi

cat >"$dir/h2o.inp" <<'EOF'
&GLOBAL
  PROJECT h2o
  RUN_TYPE ENERGY
  PRINT_LEVEL LOW
&END GLOBAL
&FORCE_EVAL
  METHOD Quickstep
  &DFT
    BASIS_SET_FILE_NAME BASIS_MOLOPT
    POTENTIAL_FILE_NAME GTH_POTENTIALS
    &MGRID
      CUTOFF 200
    &END MGRID
    &SCF
      SCF_GUESS ATOMIC
      EPS_SCF 1.0E-6
      MAX_SCF 30
    &END SCF
    &XC
      &XC_FUNCTIONAL PBE
      &END XC_FUNCTIONAL
    &END XC
  &END DFT
  &SUBSYS
    &CELL
      ABC 8.0 8.0 8.0
    &END CELL
    &COORD
      O   0.000000    0.000000   -0.065587
      H   0.000000   -0.757136    0.520545
      H   0.000000    0.757136    0.520545
    &END COORD
    &KIND H
      BASIS_SET DZVP-MOLOPT-SR-GTH
      POTENTIAL GTH-PBE-q1
    &END KIND
    &KIND O
      BASIS_SET DZVP-MOLOPT-SR-GTH
      POTENTIAL GTH-PBE-q6
    &END KIND
  &END SUBSYS
&END FORCE_EVAL
EOF

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
run() {  # name, extra mpirun args...
  local name="$1"
  shift
  (cd "$dir" && mpirun -np "$np" -x OMP_NUM_THREADS=1 "$@" cp2k.psmp -i h2o.inp -o "$name.out" \
    >"$name.log" 2>&1) || { echo "real_client_cp2k: the $name run failed:" >&2; tail -20 "$dir/$name.log" >&2; exit 1; }
  grep -E 'ENERGY\| Total FORCE_EVAL' "$dir/$name.out" | tail -1 | awk '{print $NF}'
}
plain="$(run plain)"
pre="$(run preload -x SKIPRING_REPORT=1 -x LD_PRELOAD="$lib")"
grep '^skipring: rank=' "$dir/preload.log" || true
echo "energy (Ha): Open MPI $plain, under the preload $pre"
if [[ -z "$plain" || "$plain" != "$pre" ]]; then
  echo "real_client_cp2k: FAILED: the energies differ" >&2
  exit 1
fi
if ((strict)); then
  reports="$(grep -c '^skipring: rank=' "$dir/preload.log" || true)"
  clean="$(grep -c '^skipring: rank=.* fallback_datatype=0 ' "$dir/preload.log" || true)"
  if [[ "$reports" != "$np" || "$clean" != "$np" ]]; then
    echo "real_client_cp2k: FAILED: $reports report lines for $np ranks, $clean with no datatype fallback" >&2
    exit 1
  fi
fi
echo "real_client_cp2k: passed (same energy)"
