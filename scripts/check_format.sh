#!/usr/bin/env bash
# Fails when a tracked C/C++/CUDA source differs from what the repository's .clang-format
# makes of it (run by scripts/test.sh, hence CI). Fix with: scripts/check_format.sh --fix
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v clang-format >/dev/null || { echo "check_format.sh: clang-format not found (bash scripts/setup.sh lint)" >&2; exit 1; }
mapfile -t files < <(git ls-files -- '*.h' '*.hpp' '*.c' '*.cc' '*.cpp' '*.cu' '*.cuh')
if [[ "${1:-}" == "--fix" ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [[ ${#bad[@]} -gt 0 ]]; then
  echo "check_format.sh: ${#bad[@]} of ${#files[@]} files are not clang-formatted (scripts/check_format.sh --fix):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_format.sh: ${#files[@]} files formatted"
