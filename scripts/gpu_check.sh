#!/usr/bin/env bash
# The GPU check (docs/gpu.md, "Running the GPU check"): on a machine with an NVIDIA GPU, in one
# command and under 8 minutes,
#   1. configures a CUDA build (nvcc from $CUDA_HOME, arch from nvidia-smi's compute capability,
#      else 90) and builds only what the check runs;
#   2. runs the device tests (ctest label `gpu`: cuda_device_tests, tests/cuda/test_cuda.cpp);
#   3. measures the CUDA reduce kernel against cudaMemcpy device to device (gpu_reduce_bench,
#      float32 SUM, 1-256 MiB; goal: >= 80 % at the sizes beyond L2);
#   4. measures skipring_allreduce on device buffers (the staged path) against host buffers
#      (gpu_allreduce_bench under mpirun, np 2 on the first GPU by default, 1-256 MiB);
# and writes a Markdown report (path printed at the end).
#
# Usage: scripts/gpu_check.sh [--build-dir DIR] [--report FILE] [--np N] [--sizes-mib LIST]
#                             [--build-only | --no-build]
# --build-only: configure and build only (on a machine without a GPU; no GPU needed).
# --no-build: run what DIR already holds, built on another machine (a GPU machine with no MPI or
# compilers for skipring: build here with --build-only, then scripts/gpu_bundle.sh pack, carry
# DIR and the bundle, and there run scripts/gpu_bundle.sh unpack before this; the device tests
# then run as the test program itself, since ctest's files name the build machine's paths).
# Environment: CUDA_HOME (default /usr/local/cuda), CUDA_ARCH (e.g. 90; default: detected),
# BUILD_TYPE (default Release), OUT (when set and no --report: the report goes to
# $OUT/gpu_check.md; default: <build dir>/gpu_check.md), GPU_CHECK_BUDGET_S (default 480: the
# whole check's time limit), GPU_CHECK_DRY=1 (run every step without a GPU, to test
# this script: device steps then skip instead of failing).
#
# Exit status: 0 every step passed and the reduce goal was met; 1 a step failed (configure,
# build, a device test, a benchmark's check) or ran out of the time budget; 2 bad usage;
# 3 every step passed but the reduce kernel missed its goal; 77 no NVIDIA GPU here (nothing
# run).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-gpu"
report=""
np=2
sizes="1,4,16,64,256"
budget_s="${GPU_CHECK_BUDGET_S:-480}"  # the whole check, build included
build_mode=both
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build="$(realpath -m "$2")"; shift 2 ;;
    --report) report="$(realpath -m "$2")"; shift 2 ;;
    --np) np="$2"; shift 2 ;;
    --sizes-mib) sizes="$2"; shift 2 ;;
    --build-only) build_mode=only; shift ;;
    --no-build) build_mode=none; shift ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
[[ "$np" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_check: --np wants a positive count" >&2; exit 2; }
[[ "$sizes" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "gpu_check: --sizes-mib wants e.g. 1,4,16" >&2; exit 2; }
[[ "$budget_s" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_check: GPU_CHECK_BUDGET_S wants seconds" >&2; exit 2; }
dry="${GPU_CHECK_DRY:-0}"

# 1. Is there an NVIDIA GPU? (Before anything is built.)
gpu_list=""
if ! command -v nvidia-smi > /dev/null 2>&1; then
  why="nvidia-smi is not on PATH (no NVIDIA driver installed)"
elif ! gpu_list="$(nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>&1)"; then
  why="nvidia-smi found no usable GPU: ${gpu_list//$'\n'/ }"
  gpu_list=""
elif [[ -z "$gpu_list" ]]; then
  why="nvidia-smi lists no GPU"
fi
if [[ -z "$gpu_list" && "$build_mode" != only ]]; then
  if [[ "$dry" != 1 ]]; then
    echo "gpu_check: no NVIDIA GPU on this machine: $why. Nothing was built or run (exit 77)."
    exit 77
  fi
  echo "gpu_check: no NVIDIA GPU ($why); GPU_CHECK_DRY=1: running every step anyway"
fi

# 2. Tools.
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
nvcc="$cuda_home/bin/nvcc"
tools=(cmake ctest "$nvcc")
[[ "$build_mode" == none ]] && tools=()  # nothing is built here
for tool in "${tools[@]}"; do
  if ! command -v "$tool" > /dev/null 2>&1; then
    echo "gpu_check: '$tool' not found (CUDA_HOME=$cuda_home; scripts/setup.sh installs the rest)" >&2
    exit 1
  fi
done
arch="${CUDA_ARCH:-}"
if [[ -z "$arch" ]]; then
  cc="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')"
  if [[ "$cc" =~ ^[0-9]+$ ]]; then arch="$cc"; else arch=90; fi
fi
[[ -n "$report" ]] || report="${OUT:+$OUT/gpu_check.md}"
[[ -n "$report" ]] || report="$build/gpu_check.md"
mkdir -p "$build" "$(dirname "$report")" || exit 1
logs="$build/gpu_check_logs"
mkdir -p "$logs"

start=$(date +%s)
elapsed() { echo $(($(date +%s) - start)); }
failed=0
goal_missed=0
{
  echo "# skipring GPU check"
  echo
  echo "- commit: ${GPU_CHECK_COMMIT:-$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)}"
  echo "- date (UTC): $(date -u '+%Y-%m-%d %H:%M:%S')"
  echo "- host: $(hostname), $(nproc) cores"
  no_gpu="none (dry run)"
  [[ "$build_mode" == only ]] && no_gpu="none needed (--build-only)"
  echo "- GPUs (index, name, driver): $(printf '%s' "${gpu_list:-$no_gpu}" | paste -sd ';')"
  if [[ "$build_mode" == none ]]; then
    echo "- built on another machine (--no-build): $(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=/CUDA architecture /p' "$build/CMakeCache.txt" 2>/dev/null)"
  else
    echo "- nvcc: $("$nvcc" --version | tail -n 1), CUDA architecture: $arch"
  fi
  echo "- command: scripts/gpu_check.sh --build-dir $build --np $np --sizes-mib $sizes"
  echo
} > "$report"

# run_step NAME CAP_SECONDS COMMAND...: runs COMMAND with what is left of the budget (at most
# CAP), its stdout in $logs/NAME.log and stderr in $logs/NAME.err; appends the outcome to the
# report; returns its status (124: out of time).
run_step() {
  local name="$1" cap="$2"
  shift 2
  local left=$((budget_s - $(elapsed)))
  ((left < cap)) && cap=$left
  local t0 rc
  t0=$(date +%s)
  if ((cap <= 0)); then
    rc=124
    echo "(not started: the ${budget_s} s budget is spent)" > "$logs/$name.log"
  else
    timeout --kill-after=10 "$cap" "$@" > "$logs/$name.log" 2> "$logs/$name.err"
    rc=$?
  fi
  local took=$(($(date +%s) - t0))
  echo "gpu_check: $name: exit $rc after ${took} s (log: $logs/$name.log)"
  printf '## %s: exit %d, %d s\n\n' "$name" "$rc" "$took" >> "$report"
  [[ $rc -eq 124 || $rc -eq 137 ]] && printf 'Stopped after %d s (time budget).\n\n' "$cap" >> "$report"
  return $rc
}

# Appends the tail of a step's output to the report: stdout and stderr as text, or (raw, for
# the benchmarks' Markdown) stdout as it is and stderr as text when there is any.
log_to_report() {
  local name="$1" lines="$2" raw="${3:-}"
  if [[ -n "$raw" ]]; then
    { tail -n "$lines" "$logs/$name.log"; echo; } >> "$report"
    if [[ -s "$logs/$name.err" ]]; then
      { echo '```'; tail -n "$lines" "$logs/$name.err"; echo '```'; echo; } >> "$report"
    fi
  else
    { echo '```'; cat "$logs/$name.log" "$logs/$name.err" 2>/dev/null | tail -n "$lines"; echo '```'
      echo; } >> "$report"
  fi
}

# 3. Configure and build what the check runs.
if [[ "$build_mode" == none ]]; then
  echo "gpu_check: --no-build: running the programs already built in $build" | tee -a "$report"
elif ! run_step configure 120 cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" \
  -DSKIPRING_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="$arch"; then
  log_to_report configure 30
  failed=1
fi
targets=(skipring_cuda_tests gpu_reduce_bench gpu_allreduce_bench skipring_info)
build_cap=$((budget_s - $(elapsed) - 200))  # 200 s kept for the tests and benchmarks
((build_cap < 60)) && build_cap=60
if [[ $failed -eq 0 && "$build_mode" != none ]] && ! run_step build "$build_cap" cmake --build "$build" -j "$(nproc)" \
  --target "${targets[@]}"; then
  log_to_report build 40
  failed=1
fi

mpiexec="$(sed -n 's/^MPIEXEC_EXECUTABLE:FILEPATH=//p' "$build/CMakeCache.txt" 2>/dev/null)"
[[ -n "$mpiexec" && -x "$mpiexec" ]] || mpiexec="$(command -v mpiexec || command -v mpirun || echo mpirun)"
if [[ "$build_mode" == only ]]; then
  printf '## Result: built (--build-only), nothing run\n' >> "$report"
  echo "gpu_check: built in $build in $(elapsed) s (--build-only); nothing run"
  exit "$failed"
fi
# Open MPI as root and with more ranks than cores (ignored by other MPIs), as scripts/mpirun.sh.
# Containers often forbid the cross-process copy (CMA) of Open MPI's shared-memory transport.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"
# Without ssh or rsh Open MPI's launcher refuses even a local job: launch locally.
if ! command -v ssh > /dev/null 2>&1 && ! command -v rsh > /dev/null 2>&1; then
  export OMPI_MCA_plm="${OMPI_MCA_plm:-isolated}"
fi
# Built elsewhere: the programs' run path names the build machine's folder.
[[ "$build_mode" == none ]] && export LD_LIBRARY_PATH="$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

if [[ $failed -eq 0 ]]; then
  # The device path as skipring sees it (built with CUDA, driver, devices).
  if run_step device_path 30 "$mpiexec" -np 1 "$build/apps/skipring_info"; then
    { echo '```'; sed -n '1,2p' "$logs/device_path.log"; echo '```'; echo; } >> "$report"
  else
    log_to_report device_path 20
    failed=1
  fi

  # 4. Device tests (a skip on a machine with a GPU is a failure: the runtime saw no device).
  skipped=0
  if [[ "$build_mode" == none ]]; then
    run_step device_tests 150 "$build/tests/cuda/skipring_cuda_tests"
    rc=$?
    if [[ $rc -eq 77 ]]; then skipped=1; rc=0; fi
  else
    run_step device_tests 150 ctest --test-dir "$build" -L gpu --output-on-failure
    rc=$?
    grep -q '(Skipped)' "$logs/device_tests.log" && skipped=1
  fi
  log_to_report device_tests 25
  if [[ $rc -ne 0 ]]; then
    failed=1
  elif [[ $skipped -eq 1 && "$dry" != 1 ]]; then
    echo "gpu_check: the device tests skipped although nvidia-smi lists a GPU" | tee -a "$report"
    failed=1
  fi

  # 5. Reduce kernel against cudaMemcpy D2D.
  run_step reduce_bandwidth 90 "$build/apps/gpu_reduce_bench" --sizes-mib "$sizes"
  rc=$?
  log_to_report reduce_bandwidth 20 raw
  case $rc in
    0) ;;
    3) goal_missed=1 ;;
    77) [[ "$dry" == 1 ]] || failed=1 ;;
    *) failed=1 ;;
  esac

  # 6. Device against host buffers, staged, under mpirun.
  run_step allreduce_device_vs_host 150 "$mpiexec" -np "$np" "$build/apps/gpu_allreduce_bench" \
    --sizes-mib "$sizes"
  rc=$?
  log_to_report allreduce_device_vs_host 20 raw
  if [[ $rc -ne 0 ]] && ! [[ "$dry" == 1 && $rc -eq 77 ]]; then failed=1; fi
  gpus=$(printf '%s\n' "$gpu_list" | grep -c .)
  if [[ "$np" -gt 1 && "$gpus" -eq 1 ]]; then
    printf '(%d ranks sharing the one GPU: fine for the staged path, whose collective runs on the host, but the ranks'"'"' copies share its copy engines.)\n\n' "$np" >> "$report"
  fi
fi

total=$(elapsed)
if [[ $failed -eq 0 && "$dry" == 1 && -z "$gpu_list" ]]; then
  verdict="dry run without a GPU: every step ran, the device programs skipped (nothing measured)"
  status=0
elif [[ $failed -ne 0 ]]; then
  verdict="FAILED (a step failed; logs in $logs)"
  status=1
elif [[ $goal_missed -ne 0 ]]; then
  verdict="passed, but the reduce kernel missed its >= 80 % goal"
  status=3
else
  verdict="passed"
  status=0
fi
over=""
((total > budget_s)) && over=" (over the ${budget_s} s budget)"
printf '## Result: %s\n\nTotal %d s%s.\n' "$verdict" "$total" "$over" >> "$report"
echo "gpu_check: $verdict in ${total} s${over}; report: $report"
exit $status
