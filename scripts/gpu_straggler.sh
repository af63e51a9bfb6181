#!/usr/bin/env bash
# Skip-ahead against the plain ring with a straggler, on device and host buffers (docs/gpu.md,
# "A straggler on device buffers"): gpu_allreduce_bench --fastest under mpirun, rank 1 late by
# each DELAY at the reduce-scatter's step 0 (SKIPRING_INJECT), SKIPRING_SKIP=0 then 1, REPS
# times, then once with nobody late. Prints each run's table; every run checks exactness and
# that every device-buffer call was staged; at the end, a table of the medians over the reps.
#
# Usage: scripts/gpu_straggler.sh [--build-dir DIR] [--np N] [--sizes-mib 4,16,64]
#                                 [--delays 20ms,5ms] [--reps 2]
# Built with scripts/gpu_check.sh --build-only; on a GPU machine without MPI (the device tool's)
# run scripts/gpu_bundle.sh unpack first, as for the GPU check. Exit status: 0 every run passed,
# 1 a run failed, 2 bad usage.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-gpu" np=4 sizes=4,16,64 delays=20ms,5ms reps=2
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build="$(realpath -m "$2")"; shift 2 ;;
    --np) np="$2"; shift 2 ;;
    --sizes-mib) sizes="$2"; shift 2 ;;
    --delays) delays="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    *) echo "gpu_straggler: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ "$np" =~ ^[0-9]+$ && "$np" -ge 2 && "$reps" =~ ^[1-9][0-9]*$ ]] \
  || { echo "gpu_straggler: --np wants >= 2 ranks, --reps a positive count" >&2; exit 2; }
[[ -x "$build/apps/gpu_allreduce_bench" ]] \
  || { echo "gpu_straggler: $build/apps/gpu_allreduce_bench is not built (scripts/gpu_check.sh --build-only)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"
if ! command -v ssh > /dev/null 2>&1 && ! command -v rsh > /dev/null 2>&1; then
  export OMPI_MCA_plm="${OMPI_MCA_plm:-isolated}"
fi
export LD_LIBRARY_PATH="$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bench=("$build/apps/gpu_allreduce_bench" --sizes-mib "$sizes" --runs 7 --fastest)
failed=0
log="$(mktemp)"
run() {  # label, then mpirun's -x arguments
  local label="$1"
  shift
  echo "== np $np $label"
  timeout 150 mpirun -np "$np" "$@" "${bench[@]}" 2>&1 | grep -v '^$'
  local rc=${PIPESTATUS[0]}
  [[ $rc -eq 0 ]] || { echo "gpu_straggler: that run failed (exit $rc)"; touch "$log.failed"; }
}
{
for rep in $(seq "$reps"); do
  for delay in ${delays//,/ }; do
    for skip in 0 1; do
      run "rank 1 +$delay at rs step 0, SKIPRING_SKIP=$skip (rep $rep)" -x SKIPRING_SKIP=$skip \
        -x "SKIPRING_INJECT=rank=1,delay=$delay,at=rs,step=0"
    done
  done
done
run "nobody late"
} | tee "$log"
# The summary: per size and delay, the medians over the reps of each variant's call time (the
# slowest rank's), host and device buffers, and skip / ring.
if command -v python3 > /dev/null 2>&1; then
  python3 - "$log" <<'PY'
import re, statistics as st, sys
runs, cur = {}, None
for line in open(sys.argv[1]):
    m = re.match(r"== np \d+ (.*)", line)
    if m:
        t = m.group(1)
        d = re.search(r"\+(\S+) at", t)
        k = re.search(r"SKIP=(\d)", t)
        cur = (d.group(1), k.group(1)) if d and k else ("none", "-")
        continue
    m = re.match(r"\| (\d+) \| \S+ \| ([\d.]+) \| [\d.]+ \| ([\d.]+) \|", line)
    if m and cur:
        runs.setdefault((int(m.group(1)),) + cur, []).append((float(m.group(2)), float(m.group(3))))
print("\n| MiB | late by | host: ring ms | skip-ahead ms | skip / ring | device: ring ms | skip-ahead ms | skip / ring | runs |")
print("|---|---|---|---|---|---|---|---|---|")
for (mib, delay, skip) in sorted(k for k in runs if k[2] == "0"):
    ring, sk = runs[(mib, delay, "0")], runs.get((mib, delay, "1"))
    if not sk:
        continue
    med = lambda v, i: st.median(x[i] for x in v)
    print(f"| {mib} | {delay} | {med(ring, 0):.1f} | {med(sk, 0):.1f} | {med(sk, 0) / med(ring, 0):.2f} "
          f"| {med(ring, 1):.1f} | {med(sk, 1):.1f} | {med(sk, 1) / med(ring, 1):.2f} | {len(ring)} / {len(sk)} |")
PY
fi
[[ -e "$log.failed" ]] && failed=1
rm -f "$log" "$log.failed"
exit $failed
