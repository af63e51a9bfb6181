#!/usr/bin/env bash
# Runs an SMPI program (built by scripts/sim_build.sh) under smpirun with the settings
# skipring's simulations need; like scripts/mpirun.sh for real runs.
#
# Usage: scripts/sim_run.sh -np N [-platform XML -hostfile FILE] [SMPIRUN_OPTIONS] PROGRAM [ARGS...]
#   e.g. scripts/sim_run.sh -np 8 build-sim/apps/skipring_sim --bytes 64K --mode skip,ring
# Without -platform, sim/platforms/cluster-N.xml and cluster-N.hosts are used (made by
# sim/make_platform.py when missing: 100 Gbit/s host links, 5 us host to host).
# Env: SIM_CFG   extra smpirun options (e.g. "--cfg=network/model:SMPI"), after the defaults
#      SIM_LOG   SimGrid log setting (default: --log=root.thres:warning)
#
# The settings, and why:
#   network/model:CM02, network/crosstraffic:0   plain alpha-beta: lat + bytes/bw, no
#       SMPI piecewise correction factors, no modelled TCP acks stealing reverse bandwidth
#   smpi/simulate-computation:no   the host's real CPU time between MPI calls never leaks
#       into simulated time; skipring charges reductions explicitly
#       (SKIPRING_SIM_REDUCE_GBPS), nothing else computes
#   smpi/host-speed:1Gf   the platforms' host speed (and silences SMPI's warning about it)
#   smpi/test:0, smpi/iprobe:0, smpi/grow-injected-times:no, smpi/wtime:0   no simulated
#       time injected into MPI_Test*/MPI_Iprobe/MPI_Wtime (SMPI's defaults: 0.1 ms per failed
#       test, growing, 10 ns per MPI_Wtime would swamp a 3 us step). SMPI injects that time
#       so that busy-polling programs do not livelock; skipring's progress engine never
#       busy-polls under SMPI: idle, it blocks until its next completion or timer
#       (SKIPRING_SIM_WAIT=block, sim/smpi_wait.h: exact, one wake-up per event; the
#       platforms' loopback links time it) or sleeps SKIPRING_SIM_POLL_NS of simulated time
#       between polls (SKIPRING_SIM_WAIT=poll: a message is seen at most that late; about
#       30 times slower at 256 ranks).
#   smpi/async-small-thresh:65536   messages up to 64 KiB go out when sent and wait in the
#       receiver's queue, as real MPI's eager protocol does (SMPI's default, 0, moves a small
#       message only once its receive is posted: a control message then costs a latency at
#       the reader, which no real MPI charges). Segments above 64 KiB stay rendezvous.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if ! command -v smpirun >/dev/null 2>&1; then
  echo "sim_run.sh: smpirun not found; run scripts/sim_build.sh first" >&2
  exit 1
fi

np=""
have_platform=0
args=("$@")
for ((i = 0; i < ${#args[@]}; ++i)); do
  case "${args[i]}" in
    -np|-n) np="${args[i + 1]:-}" ;;
    -platform) have_platform=1 ;;
  esac
done
if [[ -z "$np" ]]; then
  echo "sim_run.sh: -np N is required" >&2
  exit 2
fi
if [[ ! "$np" =~ ^[1-9][0-9]*$ ]]; then
  echo "sim_run.sh: bad -np '$np'" >&2
  exit 2
fi

platform_args=()
if ((have_platform == 0)); then
  dir="$repo/sim/platforms"
  if [[ ! -f "$dir/cluster-$np.xml" || ! -f "$dir/cluster-$np.hosts" ]]; then
    dir="${TMPDIR:-/tmp}/skipring-sim-platforms"
    python3 "$repo/sim/make_platform.py" "$np" --out-dir "$dir" >/dev/null
  fi
  platform_args=(-platform "$dir/cluster-$np.xml" -hostfile "$dir/cluster-$np.hosts")
fi

cfg=(--cfg=network/model:CM02 --cfg=network/crosstraffic:0
     --cfg=smpi/simulate-computation:no --cfg=smpi/host-speed:1Gf
     --cfg=smpi/test:0 --cfg=smpi/iprobe:0 --cfg=smpi/grow-injected-times:no
     --cfg=smpi/wtime:0 --cfg=smpi/async-small-thresh:65536)
# shellcheck disable=SC2206  # SIM_CFG / SIM_LOG are option lists: split on purpose
extra=(${SIM_CFG:-} ${SIM_LOG:---log=root.thres:warning})

exec smpirun "${platform_args[@]}" "${cfg[@]}" "${extra[@]}" "$@"
