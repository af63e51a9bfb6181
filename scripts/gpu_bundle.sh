#!/usr/bin/env bash
# Runs the GPU check on a GPU machine that has no compiler toolchain for skipring and no MPI
# (docs/gpu.md, "Running the GPU check"): build here, run there.
#
#   scripts/gpu_bundle.sh pack [--build-dir DIR] [--out FILE]
#       here (Debian 12 with scripts/setup.sh's packages): writes FILE (default
#       .gpu_bundle/runtime.tar.gz, a folder .gitignore ignores) holding Open MPI's
#       runtime (mpirun, its components, PMIx, help texts, config) and every shared library that
#       it and the built GPU-check programs in DIR (default build-gpu/) load, except the C
#       library's own and the NVIDIA driver's. Build DIR first (scripts/gpu_check.sh --build-only).
#   scripts/gpu_bundle.sh unpack [--from FILE]
#       there, as root: extracts FILE into a staging folder and copies it into / WITHOUT
#       replacing any file that is already there (cp -n), so the machine's own libraries win;
#       then runs ldconfig and checks that mpirun and the programs find every library.
#
# Exit status: 0 done; 1 a step failed (with the reason); 2 bad usage.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
verb="${1:-}"
[[ $# -gt 0 ]] && shift
build="$root/build-gpu"
bundle="$root/.gpu_bundle/runtime.tar.gz"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build="$(realpath -m "$2")"; shift 2 ;;
    --out | --from) bundle="$(realpath -m "$2")"; shift 2 ;;
    *) echo "gpu_bundle: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
programs=(apps/skipring_info apps/gpu_reduce_bench apps/gpu_allreduce_bench tests/cuda/skipring_cuda_tests)

# Paths under the merged /usr: /lib/x86_64-linux-gnu/x -> /usr/lib/x86_64-linux-gnu/x.
usr_path() { local p="$1"; [[ "$p" == /lib/* || "$p" == /lib64/* ]] && p="/usr$p"; echo "$p"; }

pack() {
  local p missing=0
  for p in "${programs[@]}"; do
    [[ -x "$build/$p" ]] || { echo "gpu_bundle: $build/$p is not built" >&2; missing=1; }
  done
  [[ $missing -eq 0 ]] || exit 1
  local list
  list="$(mktemp)"
  # Open MPI's and PMIx's installed files (no documentation, manuals or headers).
  dpkg -L openmpi-bin libopenmpi3 openmpi-common libpmix2 \
    | grep -Ev '^/usr/share/(doc|man|lintian)|/include/|\.h$|^/\.$' > "$list.pkg"
  while read -r p; do
    if [[ -f "$p" || -L "$p" ]]; then usr_path "$p"; fi
  done < "$list.pkg" > "$list"
  # Every shared library any ELF among them or among the programs loads, with its symlinks.
  local elf lib
  {
    for p in "${programs[@]}"; do echo "$build/$p"; done
    while read -r p; do
      if [[ -f "$p" && ! -L "$p" ]]; then echo "$p"; fi
    done < "$list"
  } | while read -r elf; do
    file -b "$elf" 2>/dev/null | grep -q '^ELF' || continue
    ldd "$elf" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\/(usr\/)?lib/ { print $3 }' || true
  done | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux* | libcuda.so* | libnvidia*) continue ;;
    esac
    usr_path "$lib"
    usr_path "$(readlink -f "$lib")"
  done > "$list.libs"
  sort -u "$list" "$list.libs" -o "$list"
  mkdir -p "$(dirname "$bundle")"
  tar -C / -czf "$bundle" --no-recursion -T <(sed 's|^/||' "$list")
  echo "gpu_bundle: $(wc -l < "$list") files, $(du -h "$bundle" | cut -f1) -> $bundle"
  rm -f "$list" "$list.pkg" "$list.libs"
}

unpack() {
  [[ -f "$bundle" ]] || { echo "gpu_bundle: no bundle at $bundle (run 'pack' on the build machine)" >&2; exit 1; }
  [[ $(id -u) -eq 0 ]] || { echo "gpu_bundle: unpack copies into /usr: run it as root" >&2; exit 1; }
  local stage
  stage="$(mktemp -d)"
  tar -C "$stage" -xzf "$bundle"
  local kept
  kept=$(cd "$stage" && find . \( -type f -o -type l \) | while read -r f; do
    if [[ -e "/${f#./}" || -L "/${f#./}" ]]; then echo "$f"; fi; done | wc -l)
  cp -an "$stage/." /
  ldconfig
  rm -rf "$stage"
  echo "gpu_bundle: unpacked into / ($kept files already there were kept as they were)"
  local p bad=0
  for p in /usr/bin/orterun "${programs[@]/#/$build/}"; do
    [[ -e "$p" ]] || continue
    local missing
    missing="$(LD_LIBRARY_PATH="$build" ldd "$p" | grep 'not found' | paste -sd ' ' || true)"
    if [[ -n "$missing" ]]; then
      echo "gpu_bundle: $p still misses: $missing" >&2
      bad=1
    fi
  done
  [[ $bad -eq 0 ]] || exit 1
  [[ -e /usr/bin/mpirun ]] || ln -s orterun /usr/bin/mpirun
  [[ -e /usr/bin/mpiexec ]] || ln -s orterun /usr/bin/mpiexec
  echo "gpu_bundle: mpirun and the programs find their libraries"
}

case "$verb" in
  pack) pack ;;
  unpack) unpack ;;
  *) echo "usage: scripts/gpu_bundle.sh pack|unpack [--build-dir DIR] [--out|--from FILE]" >&2; exit 2 ;;
esac
