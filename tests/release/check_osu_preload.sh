#!/usr/bin/env bash
# The drop-in under an OSU-style benchmark (issue 15, part 4): runs the command (mpiexec ...
# osu_style_allreduce -c, with libskipring_pmpi.so preloaded and SKIPRING_REPORT=1) through
# tests/pmpi/check_report.sh (one well-formed report line per rank, calls > 0, exit 0), then
# checks what that script does not: every size from 4 B to the largest asked passed
# validation, and every rank's report line has time_s > 0 (the small sizes take the direct
# recursive-doubling path, which used to report time_s=0).
#
# usage: check_osu_preload.sh CHECK_REPORT_SH NP MAX_BYTES -- command [args...]
set -u
if (($# < 5)) || [[ "$4" != "--" ]]; then
  echo "usage: $0 CHECK_REPORT_SH NP MAX_BYTES -- command [args...]" >&2
  exit 2
fi
check_report="$1"
np="$2"
max_bytes="$3"
shift 4

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
bash "$check_report" --np "$np" --calls positive -- "$@" >"$log" 2>&1
rc=$?
cat "$log"
fail() {
  echo "check_osu_preload.sh: FAIL: $*" >&2
  exit 1
}
((rc == 0)) || fail "check_report.sh failed (status $rc)"

size=4
while ((size <= max_bytes)); do
  grep -Eq "^${size} +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+ +Pass$" "$log" ||
    fail "no validated ('Pass') result line for $size bytes"
  size=$((size * 2))
done
grep -q '^# validation: 0 wrong elements' "$log" || fail "no '# validation: 0 wrong' line"

lines=0
while IFS= read -r time_s; do
  lines=$((lines + 1))
  [[ "$time_s" =~ ^[0-9]+\.[0-9]+$ && ! "$time_s" =~ ^0+\.0+$ ]] ||
    fail "a report line has time_s=$time_s (expected > 0)"
done < <(grep -a -o 'skipring: rank=[0-9]* .* time_s=[0-9.]*' "$log" | sed 's/.*time_s=//')
((lines == np)) || fail "$lines report lines with time_s, expected $np"
echo "check_osu_preload.sh: OK (sizes 4..$max_bytes B validated; time_s > 0 on $np ranks)"
