#!/usr/bin/env bash
# --version on every tool: `TOOL --version` exits 0 and prints one line
# "<tool name> <VERSION>" or "<tool name> <VERSION> (git <describe>)", VERSION being CMake's
# project() version (passed by tests/release/CMakeLists.txt); no MPI launch is needed.
#
# usage: check_versions.sh VERSION TOOL...
set -u
if (($# < 2)); then
  echo "usage: $0 VERSION TOOL..." >&2
  exit 2
fi
version="$1"
shift
status=0
for tool in "$@"; do
  name="$(basename "$tool")"
  out="$(timeout 30 "$tool" --version 2>&1)"
  rc=$?
  if ((rc != 0)); then
    echo "FAIL: $name --version exited with $rc: $out"
    status=1
    continue
  fi
  pattern="^${name} ${version//./\\.}( \\(git [^ ()]+\\))?$"
  if [[ "$(printf '%s\n' "$out" | wc -l)" -ne 1 || ! "$out" =~ $pattern ]]; then
    echo "FAIL: $name --version printed '$out', expected '$name $version [(git ...)]'"
    status=1
    continue
  fi
  echo "ok: $out"
done
exit "$status"
