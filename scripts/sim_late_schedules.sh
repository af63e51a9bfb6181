#!/usr/bin/env bash
# Yardstick for issue 11's late-arrival target: the time two omniscient schedules take after
# one late rank arrives, under SimGrid on sim/platforms/cluster-N (sim/late_schedules.cpp: the
# late rank's input broadcast down a chain or two binary trees, the others' reduction sent to
# it; no protocol, no headers). Builds the program with smpicxx into build-sim/ and writes
# docs/data/sim_late_schedules.csv (one row per run) plus the lines on stdout.
#
# Usage: scripts/sim_late_schedules.sh [N ...]      (default: 8 16 64 256; 256 takes minutes)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
command -v smpicxx >/dev/null || { echo "sim_late_schedules.sh: smpicxx not found (bash scripts/setup.sh simgrid)" >&2; exit 1; }
mkdir -p build-sim docs/data
smpicxx -O2 -std=c++17 -Wall -Wextra -o build-sim/late_schedules sim/late_schedules.cpp
sizes=("$@")
[[ ${#sizes[@]} -gt 0 ]] || sizes=(8 16 64 256)
out=docs/data/sim_late_schedules.csv
echo "commit,schedule,n,bytes,seg,inflight,after_arrival_ms,L_ms,in_L,S_over_B_in_L,result" >"$out"
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
for n in "${sizes[@]}"; do
  if [[ $n -ge 256 ]]; then grid=("8M 32K 4"); else grid=("64M 256K 2" "64M 256K 4"); fi
  for g in "${grid[@]}"; do
    read -r bytes seg inflight <<<"$g"
    for s in chain tree; do
      line="$(bash scripts/sim_run.sh -np "$n" build-sim/late_schedules --schedule "$s" \
        --bytes "$bytes" --seg "$seg" --inflight "$inflight" --reduce-gbps 50 | tail -1)"
      echo "$line"
      # key=value pairs -> CSV columns in header order
      python3 - "$commit" "$line" >>"$out" <<'PY'
import sys
kv = dict(p.split("=", 1) for p in sys.argv[2].split())
cols = ["schedule", "n", "bytes", "seg", "inflight", "after_arrival_ms", "L_ms", "in_L",
        "S_over_B_in_L", "result"]
print(",".join([sys.argv[1]] + [kv[c] for c in cols]))
PY
    done
  done
done
