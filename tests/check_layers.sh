#!/usr/bin/env bash
# Layering check (issue 12): common/ is the base layer and includes nothing of skipring but
# common/; common/, collectives/, straggler/ and topology/ never include <mpi.h>, a runtime/
# header or the public API, and never call MPI. MPI calls live in runtime/ only.
#
# Usage: tests/check_layers.sh [repository root]
set -euo pipefail
root="${1:-$(dirname "${BASH_SOURCE[0]}")/..}"
cd "$root"

# Known exceptions owned by other parts of issue 12, to be removed when they land:
#   collectives/select.h: runtime/config.h (Algo moves into collectives/)
allowed='^(collectives/select\.h:.*"runtime/config\.h")'

fail=0
report() {
  echo "check_layers: $1"
  fail=1
}

lower=(common collectives straggler topology)
while IFS= read -r hit; do
  [[ -z "$hit" ]] && continue
  if [[ "$hit" =~ $allowed ]]; then
    echo "check_layers: pending (another part of issue 12): $hit"
    continue
  fi
  report "upward include: $hit"
done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](mpi\.h|runtime/|skipring/)' \
           "${lower[@]}" --include='*.h' --include='*.cpp' || true)

while IFS= read -r hit; do
  [[ -z "$hit" ]] && continue
  report "MPI call below runtime/: $hit"
done < <(grep -rnE '\bP?MPI_[A-Z][a-z_]+[[:space:]]*\(' "${lower[@]}" --include='*.h' --include='*.cpp' |
           grep -vE ':[[:space:]]*//' || true)

while IFS= read -r hit; do
  [[ -z "$hit" ]] && continue
  report "common/ depends on a higher layer: $hit"
done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"(collectives|straggler|topology|runtime|apps|sim)/' \
           common --include='*.h' --include='*.cpp' || true)

if [[ $fail -ne 0 ]]; then
  echo "check_layers: FAILED"
  exit 1
fi
echo "check_layers: OK (common/ collectives/ straggler/ topology/: no MPI, no runtime/)"
