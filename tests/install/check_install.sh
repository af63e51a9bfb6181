#!/usr/bin/env bash
# Checks that an installed skipring is consumable: installs a build tree into a scratch prefix,
# builds tests/install/consumer with find_package(skipring) and with pkg-config, runs both.
#
# Usage: tests/install/check_install.sh BUILD_DIR   (an already built skipring build tree)
set -euo pipefail

if (($# != 1)); then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
build="$(cd "$1" && pwd -P)"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"

# mpirun as root and oversubscribed, as everywhere else in the project.
export OMPI_ALLOW_RUN_AS_ROOT="${OMPI_ALLOW_RUN_AS_ROOT:-1}"
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}"
export OMPI_MCA_rmaps_base_oversubscribe="${OMPI_MCA_rmaps_base_oversubscribe:-1}"
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"

# The build's own MPI (its compiler wrapper and launcher, from the build's CMake cache): the
# consumers are built and run with the same MPI, and the package must say which one it is.
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
mpi_cc="$(cache_value MPI_C_COMPILER)"
mpiexec="$(cache_value MPIEXEC_EXECUTABLE)"
mpi_cc="${mpi_cc:-mpicc}"
mpiexec="${mpiexec:-mpirun}"
mpi_vendor="$(sed -n 's/^#define OPEN_MPI 1$/Open MPI/p;s/^#define MPICH_VERSION .*/MPICH/p' \
  "$(cache_value MPI_C_HEADER_DIR)/mpi.h" 2>/dev/null | head -n 1)"
case "$mpi_vendor" in
  "Open MPI") pc_requires=ompi-c other_cc=mpicc.mpich other_vendor=MPICH ;;
  MPICH) pc_requires=mpich other_cc=mpicc.openmpi other_vendor="Open MPI" ;;
  *) pc_requires="" other_cc="" other_vendor="" ;;
esac

# Scratch space inside the build tree: nothing leaks into /tmp, and it stays for inspection
# after a failure. Start clean so files from an older install cannot hide a missing one.
work="$build/install_check"
prefix="$work/prefix"
rm -rf "$work"
mkdir -p "$work"

step() { echo "== check_install: $*"; }
fail() { echo "check_install: FAILED: $*" >&2; exit 1; }

step "install $build into $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || {
  cat "$work/install.log" >&2; fail "cmake --install"; }

# The library directory is lib/ or lib/<multiarch>/ depending on the configured prefix
# (GNUInstallDirs), so locate the package files rather than assume.
config="$(find "$prefix" -name skipringConfig.cmake -print -quit)"
pcfile="$(find "$prefix" -name skipring.pc -print -quit)"
[[ -n "$config" ]] || fail "no skipringConfig.cmake under $prefix"
[[ -n "$pcfile" ]] || fail "no skipring.pc under $prefix"
[[ -f "$prefix/include/skipring/skipring.h" ]] || fail "no include/skipring/skipring.h under $prefix"

# Installed programs and libraries must find their shared libraries where they were installed
# (run paths fixed at configure time break installs into any other prefix).
step "installed binaries resolve their libraries"
while IFS= read -r -d '' elf; do
  if ldd "$elf" 2>/dev/null | grep -q 'not found'; then
    fail "$elf: $(ldd "$elf" | grep 'not found' | tr -s ' \t' ' ')"
  fi
done < <(find "$prefix" -type f \( -name '*.so*' -o -perm -u+x \) -print0)
if [[ -x "$prefix/bin/skipring_info" ]]; then
  "$prefix/bin/skipring_info" --help >/dev/null || fail "$prefix/bin/skipring_info --help"
fi

step "find_package(skipring) consumer (CMAKE_PREFIX_PATH=$prefix)"
cmake -S "$here/consumer" -B "$work/cmake-consumer" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DMPI_C_COMPILER="$mpi_cc" ||
  fail "configuring the find_package consumer"
# It must have used the scratch install, not some skipring installed on the system.
found_dir="$(sed -n 's/^skipring_DIR:[A-Z]*=//p' "$work/cmake-consumer/CMakeCache.txt")"
[[ "$found_dir" == "$prefix"/* ]] || fail "find_package used $found_dir, not the install in $prefix"
cmake --build "$work/cmake-consumer" || fail "building the find_package consumer"

# A consumer whose FindMPI finds another MPI is refused at configure time, naming both (it would
# load two MPIs and crash in skipring_init).
if [[ -n "$other_cc" ]] && command -v "$other_cc" >/dev/null; then
  step "find_package(skipring) refuses a consumer built with $other_vendor ($other_cc)"
  if cmake -S "$here/consumer" -B "$work/cmake-consumer-other" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" -DMPI_C_COMPILER="$other_cc" >"$work/other-mpi.log" 2>&1; then
    cat "$work/other-mpi.log" >&2
    fail "find_package(skipring) accepted a consumer using $other_vendor (built with $mpi_vendor)"
  fi
  # CMake may wrap the message: compare with the line breaks and indentation removed.
  refusal="$(tr -s ' \n' ' ' <"$work/other-mpi.log")"
  if [[ "$refusal" != *"was built with $mpi_vendor"* ||
        "$refusal" != *"FindMPI found $other_vendor"* ]]; then
    cat "$work/other-mpi.log" >&2
    fail "the refusal does not name both MPIs ($mpi_vendor, $other_vendor)"
  fi
else
  step "no ${other_cc:-second MPI} here: the refusal of another MPI is not checked"
fi

step "pkg-config consumer (PKG_CONFIG_PATH=$(dirname "$pcfile"))"
PKG_CONFIG_PATH="$(dirname "$pcfile")"
export PKG_CONFIG_PATH
pc_libdir="$(pkg-config --variable=libdir skipring)" || fail "pkg-config cannot read skipring.pc"
pc_includedir="$(pkg-config --variable=includedir skipring)"
# pkg-config paths must point into the prefix the package was installed to (a relocatable .pc
# may say ${pcfiledir}/../..; compare resolved paths).
pc_libdir="$(realpath -m "$pc_libdir")"
[[ "$pc_libdir" == "$prefix"/* ]] ||
  fail "skipring.pc libdir=$pc_libdir is outside the install prefix $prefix"
[[ "$(realpath -m "$pc_includedir")" == "$prefix"/* ]] ||
  fail "skipring.pc includedir=$pc_includedir is outside the install prefix $prefix"
# It requires the MPI it was built with, and says which one it is.
pc_req="$(pkg-config --print-requires skipring | tr -d '[:space:]')"
[[ "$pc_req" == "$pc_requires" ]] ||
  fail "skipring.pc requires '$pc_req', expected '$pc_requires' (built with ${mpi_vendor:-an unknown MPI})"
pc_mpi="$(pkg-config --variable=mpi skipring)"
[[ -z "$mpi_vendor" || "$pc_mpi" == "$mpi_vendor" ]] ||
  fail "skipring.pc says mpi=$pc_mpi, the build used $mpi_vendor"
pc_out="$(pkg-config --cflags --libs skipring)" || fail "pkg-config --cflags --libs skipring"
read -r -a pc_flags <<<"$pc_out"
# pkg-config gives no run path; add one so the binary finds libskipring without LD_LIBRARY_PATH.
"$mpi_cc" -o "$work/pc-consumer" "$here/consumer/main.c" "${pc_flags[@]}" -Wl,-rpath,"$pc_libdir" ||
  fail "compiling the consumer with $mpi_cc and pkg-config flags: ${pc_flags[*]}"

for exe in "$work/cmake-consumer/skipring_consumer" "$work/pc-consumer"; do
  # The binary must load the installed library, not the one in the build tree.
  lib="$(ldd "$exe" | grep 'libskipring\.so' || true)"
  [[ "$lib" == *"=> $prefix/"* ]] || fail "$exe must load libskipring from $prefix; ldd says: $lib"
  # One MPI only: libskipring and the program load the same libmpi.
  mpilibs="$(ldd "$exe" | grep -oE 'lib(mpi|mpich)\.so\.[0-9]+' | sort -u | tr '\n' ' ')"
  [[ "$(wc -w <<<"$mpilibs")" -eq 1 ]] || fail "$exe loads more than one MPI: $mpilibs"
  step "run $mpiexec -n 1 $exe ($mpilibs)"
  "$mpiexec" -n 1 "$exe" || fail "running $exe"
done

step "OK"
