#!/usr/bin/env bash
# Test driver for the PMPI drop-in: runs an MPI command line (mpiexec ... program) and checks
# the per-rank "skipring: rank=..." report lines libskipring_pmpi.so writes to stderr at
# MPI_Finalize: exactly one line per rank, in the exact format, with the expected counters.
#
# usage: check_report.sh --np N [--calls any|zero|positive] [--fallbacks any|zero|positive]
#                        [--field NAME=any|zero|positive]... [--no-report]
#                        [--expect-fail REGEX] -- command [args...]
#   --expect-output RE  the output (stdout and stderr) must match RE (ERE) too
#   --field NAME=E      a field after time_s (issue 40: mpi, fallback_datatype, fallback_op,
#                       fallback_comm, fallback_memory, fallback_disabled, fallback_other,
#                       fallback_thread)
#                       must be present with a value as E says on every rank
#   --no-report         no report line may appear (SKIPRING_REPORT unset)
#   --expect-fail RE    the command must exit non-zero and its output must match RE (ERE);
#                       report lines are not checked
set -u

np=""
calls="any"
fallbacks="any"
no_report=0
expect_fail=""
fields=()
expect_output=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --np) np="$2"; shift 2 ;;
    --calls) calls="$2"; shift 2 ;;
    --fallbacks) fallbacks="$2"; shift 2 ;;
    --field) fields+=("$2"); shift 2 ;;
    --expect-output) expect_output+=("$2"); shift 2 ;;
    --no-report) no_report=1; shift ;;
    --expect-fail) expect_fail="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "check_report.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
if [[ -z "$np" || $# -eq 0 ]]; then
  echo "check_report.sh: usage: --np N [options] -- command [args...]" >&2
  exit 2
fi

fail() {
  echo "check_report.sh: FAIL: $*" >&2
  exit 1
}

out_file="$(mktemp)"
err_file="$(mktemp)"
trap 'rm -f "$out_file" "$err_file"' EXIT

echo "check_report.sh: running: $*"
"$@" >"$out_file" 2>"$err_file"
rc=$?
cat "$out_file"
cat "$err_file" >&2
echo "check_report.sh: exit status $rc"

if [[ -n "$expect_fail" ]]; then
  [[ $rc -ne 0 ]] || fail "the command succeeded but was expected to fail"
  grep -Eq -- "$expect_fail" "$out_file" "$err_file" ||
    fail "the output does not match '$expect_fail'"
  echo "check_report.sh: OK (failed as expected, output matches '$expect_fail')"
  exit 0
fi
if [[ $rc -eq 77 ]]; then
  echo "check_report.sh: skipped (the command exited with 77)"
  exit 77
fi
[[ $rc -eq 0 ]] || fail "the command exited with status $rc"
for re in "${expect_output[@]}"; do
  grep -Eq -- "$re" "$out_file" "$err_file" || fail "the output does not match '$re'"
done

# Counter expectation check: check_value NAME VALUE any|zero|positive RANK
check_value() {
  case "$3" in
    any) ;;
    zero) [[ "$2" -eq 0 ]] || fail "rank $4: $1=$2, expected 0" ;;
    positive) [[ "$2" -gt 0 ]] || fail "rank $4: $1=$2, expected > 0" ;;
    *) fail "bad expectation '$3' for $1" ;;
  esac
}

format='^skipring: rank=([0-9]+) calls=([0-9]+) fallbacks=([0-9]+) skips=([0-9]+) '
# The fields of issue 15 in this order and form, then (issue 40) name=value fields.
format+='late=([0-9]+) bytes=([0-9]+) time_s=([0-9]+\.[0-9]{6})(( [a-z_]+=[0-9]+)*)$'
declare -A seen=()
lines=0
while IFS= read -r line; do
  lines=$((lines + 1))
  [[ "$line" =~ $format ]] || fail "badly formatted report line: '$line'"
  rank="${BASH_REMATCH[1]}"
  [[ "$rank" -lt "$np" ]] || fail "report line for rank $rank with only $np ranks"
  [[ -z "${seen[$rank]:-}" ]] || fail "more than one report line for rank $rank"
  seen[$rank]=1
  check_value calls "${BASH_REMATCH[2]}" "$calls" "$rank"
  check_value fallbacks "${BASH_REMATCH[3]}" "$fallbacks" "$rank"
  extra="${BASH_REMATCH[8]}"
  sum=0
  for f in "${fields[@]}"; do
    name="${f%%=*}"
    [[ "$extra" =~ (^| )$name=([0-9]+) ]] || fail "rank $rank: no field $name in '$line'"
    check_value "$name" "${BASH_REMATCH[2]}" "${f#*=}" "$rank"
  done
  # The fallbacks by reason add up to fallbacks.
  if [[ "$extra" == *fallback_* ]]; then
    for v in $(grep -Eo 'fallback_[a-z]+=[0-9]+' <<<"$extra" | cut -d= -f2); do sum=$((sum + v)); done
    fb=$(sed -E 's/.* fallbacks=([0-9]+) .*/\1/' <<<"$line")
    [[ "$sum" -eq "$fb" ]] || fail "rank $rank: fallbacks by reason add up to $sum, not $fb"
  fi
done < <(grep -a -- 'skipring: rank=' "$err_file")

if [[ $no_report -eq 1 ]]; then
  [[ $lines -eq 0 ]] || fail "$lines report line(s) although SKIPRING_REPORT is not set"
  echo "check_report.sh: OK (no report lines, as expected)"
  exit 0
fi
[[ $lines -eq $np ]] || fail "$lines report line(s) for $np ranks"
echo "check_report.sh: OK ($np report lines; calls $calls, fallbacks $fallbacks)"
