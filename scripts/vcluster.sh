#!/usr/bin/env bash
# An emulated cluster on one machine: N "hosts" as Linux network namespaces on a bridge, each
# with its own hostname and a veth NIC shaped to RATE in both directions, and Open MPI's mpirun
# across them, so skipring's cross-host paths (node-aware ring, hier, the routed allgather) run
# over a real TCP stack.
#
# Usage: scripts/vcluster.sh up N [RATE]         create or reconfigure N hosts (default 1gbit)
#        scripts/vcluster.sh run [-p K] [MPIRUN_ARGS...]   mpirun across the hosts, K slots per
#                                                 host (default 1); -np N*K unless given
#        scripts/vcluster.sh down                 remove everything `up` created
#        scripts/vcluster.sh status               what is up (exit 1 when nothing is)
#
# Host i (0-based) is network namespace sr-hI with hostname sr-hI (set by `unshare --uts` when
# a process is launched there), address 198.18.0.(I+1)/24 on eth0, a veth whose other end
# sr-vI is a port of bridge sr-br0 (198.18.0.254 in the root namespace, where mpirun runs).
# RATE (tc syntax: 500mbit, 1gbit, 2gbit) shapes with tbf the egress of both veth ends: the
# host's uplink and its downlink. /etc/hosts gets one line per host, tagged "skipring-vcluster".
# Addresses are from 198.18.0.0/15 (RFC 2544 benchmarking), never from the private ranges.
#
# `run` launches mpirun with a plm_rsh_agent that stands in for ssh: it runs the daemon in the
# host's namespace under its own hostname, with a clean login-like environment, so as on a real
# cluster only -x variables reach the ranks; every SKIPRING_* variable set in the caller's
# environment is passed with -x for you. TCP between hosts (btl tcp on 198.18.0.0/24), shared
# memory within one host, no binding (every host sees the same cores).
#
# Needs root, iproute2 (ip, tc) and unshare. Where network namespaces are not permitted, `up`
# exits 77 with a message saying why (tests skip on 77). `up` is idempotent; `up` with another
# N or RATE reconfigures. `run` exits 77 too when mpirun is not Open MPI's.
# Env: VCLUSTER_STATE_DIR (default /run/skipring-vcluster), VCLUSTER_MPIRUN (default mpirun).
set -euo pipefail

readonly SKIP_RC=77
readonly PREFIX=sr
readonly BRIDGE="${PREFIX}-br0"
readonly SUBNET=198.18.0.0/24
readonly NET=198.18.0
readonly HEAD_ADDR="${NET}.254"
readonly MAX_HOSTS=200
readonly HOSTS_TAG="# skipring-vcluster"
state_dir="${VCLUSTER_STATE_DIR:-/run/skipring-vcluster}"
[[ -d /run && -w /run ]] || state_dir="${VCLUSTER_STATE_DIR:-/tmp/skipring-vcluster}"

usage() { sed -n '7,12s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
die() { echo "vcluster: $*" >&2; exit 1; }
# Exits 77 (tests skip on it) with the reason; what `up` had created so far goes again.
unavailable() {
  echo "vcluster: network namespaces unavailable: $*" >&2
  ((!creating)) || teardown >/dev/null 2>&1 || true
  exit "$SKIP_RC"
}
creating=0

host_name() { echo "${PREFIX}-h$1"; }
veth_name() { echo "${PREFIX}-v$1"; }

# Namespaces of ours that exist now (sr-h<digits>), one per line.
existing_hosts() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}-h[0-9]+$" | sort -V || true
}

# Serialises up/down (a second `up` waits for the first).
lock() {
  mkdir -p "$state_dir"
  exec 9>"$state_dir.lock"
  flock 9
}

# Root, the tools, and a namespace we may create and enter with its own UTS namespace; exits 77
# with the reason otherwise.
check_available() {
  ((EUID == 0)) || unavailable "not root (creating namespaces, veths and a bridge needs root)"
  local tool
  for tool in ip tc unshare flock; do
    command -v "$tool" >/dev/null 2>&1 ||
      unavailable "'$tool' not found (Debian: apt-get install iproute2 util-linux)"
  done
  local probe="${PREFIX}-probe$$" err
  if ! err="$(ip netns add "$probe" 2>&1)"; then
    unavailable "'ip netns add' failed: ${err:-no message}"
  fi
  if ! err="$(ip netns exec "$probe" unshare --uts sh -c 'hostname sr-probe' 2>&1)"; then
    ip netns del "$probe" 2>/dev/null || true
    unavailable "'ip netns exec ... unshare --uts' failed: ${err:-no message}"
  fi
  ip netns del "$probe" 2>/dev/null || true
}

# tc rate -> bytes per second (for the tbf burst); accepts what tc accepts for rates in common use.
rate_bytes_per_s() {
  local rate="${1,,}" num unit mult
  [[ "$rate" =~ ^([0-9]+(\.[0-9]+)?)([kmgt]?)(bit|bps)$ ]] || return 1
  num="${BASH_REMATCH[1]}"
  unit="${BASH_REMATCH[3]}"
  case "$unit" in
    "") mult=1 ;; k) mult=1000 ;; m) mult=1000000 ;; g) mult=1000000000 ;; t) mult=1000000000000 ;;
  esac
  if [[ "${BASH_REMATCH[4]}" == bit ]]; then
    awk -v n="$num" -v m="$mult" 'BEGIN { printf "%.0f\n", n * m / 8 }'
  else
    awk -v n="$num" -v m="$mult" 'BEGIN { printf "%.0f\n", n * m }'
  fi
}

# Usage: shape RATE BURST DEV [NAMESPACE]
# tbf on one device: RATE, a burst of 1 ms of traffic (at least 64 KiB, one TSO packet) and a
# queue of 50 ms of traffic, deep enough that several senders converging on one host's downlink
# queue rather than drop (each drop would cost TCP a retransmit timeout, 200 ms at least).
shape() {
  local ns_args=()
  [[ -z "${4:-}" ]] || ns_args=(-n "$4")
  tc "${ns_args[@]}" qdisc replace dev "$3" root tbf rate "$1" burst "$2" latency 50ms
}

remove_hosts_entries() {
  [[ -f /etc/hosts ]] || return 0
  grep -qF "$HOSTS_TAG" /etc/hosts || return 0
  local tmp
  tmp="$(mktemp)"
  grep -vF "$HOSTS_TAG" /etc/hosts >"$tmp" || true
  # Rewritten in place: in containers /etc/hosts is often a bind mount that cannot be replaced.
  cat "$tmp" >/etc/hosts
  rm -f "$tmp"
}

write_hosts_entries() {
  local n="$1" i
  remove_hosts_entries
  for ((i = 0; i < n; i++)); do
    printf '%s.%d\t%s\t%s\n' "$NET" $((i + 1)) "$(host_name "$i")" "$HOSTS_TAG"
  done >>/etc/hosts
}

# Kills what still runs in namespace $1 (processes the cluster launched: orphaned daemons or
# ranks of an interrupted run), so that deleting it really frees it.
kill_in_namespace() {
  local pids
  pids="$(ip netns pids "$1" 2>/dev/null || true)"
  [[ -n "$pids" ]] || return 0
  echo "vcluster: stopping leftover processes in $1: ${pids//$'\n'/ }" >&2
  # shellcheck disable=SC2086
  kill $pids 2>/dev/null || true
  sleep 0.5
  pids="$(ip netns pids "$1" 2>/dev/null || true)"
  # shellcheck disable=SC2086
  [[ -z "$pids" ]] || kill -9 $pids 2>/dev/null || true
}

remove_host() {
  local ns="$1" idx="${1#"${PREFIX}-h"}"
  kill_in_namespace "$ns"
  ip netns del "$ns" 2>/dev/null || true
  ip link del "$(veth_name "$idx")" 2>/dev/null || true
}

# Waits until the kernel has really removed the veth ends of deleted namespaces (it does that
# asynchronously; a quick `up` would otherwise find the old names taken).
wait_links_gone() {
  local tries
  for ((tries = 0; tries < 50; tries++)); do
    ip -o link show 2>/dev/null | grep -qE ": ${PREFIX}-v[0-9]+@" || return 0
    sleep 0.1
  done
}

cmd_up() {
  (($# >= 1 && $# <= 2)) || { usage >&2; exit 2; }
  local n="$1" rate="${2:-1gbit}" bps burst i ns veth
  if ! [[ "$n" =~ ^[0-9]+$ ]] || ((n < 1 || n > MAX_HOSTS)); then
    die "N must be 1..$MAX_HOSTS, got '$n'"
  fi
  bps="$(rate_bytes_per_s "$rate")" ||
    die "RATE must be a tc rate such as 1gbit or 500mbit, got '$rate'"
  ((bps > 0)) || die "RATE must be positive, got '$rate'"
  burst=$((bps / 1000))
  ((burst >= 65536)) || burst=65536
  check_available
  lock
  creating=1
  # Any other failure while creating (a sandbox that allows namespaces but not bridges, a
  # read-only /etc/hosts, ...) is the environment's too: exit 77 with the failing command.
  set -o errtrace
  trap 'unavailable "failed: $BASH_COMMAND"' ERR

  # Hosts beyond N (an earlier, larger cluster) go.
  local old
  for old in $(existing_hosts); do
    ((${old#"${PREFIX}-h"} < n)) || remove_host "$old"
  done
  wait_links_gone

  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge || unavailable "cannot create bridge $BRIDGE"
  fi
  ip addr replace "$HEAD_ADDR/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up

  for ((i = 0; i < n; i++)); do
    ns="$(host_name "$i")"
    veth="$(veth_name "$i")"
    if ! ip netns list | awk '{print $1}' | grep -qx "$ns"; then
      ip netns add "$ns"
    fi
    if ! ip -n "$ns" link show eth0 >/dev/null 2>&1; then
      ip link del "$veth" 2>/dev/null || true
      ip link add "$veth" type veth peer name eth0 netns "$ns" ||
        unavailable "cannot create veth pair $veth/$ns:eth0"
    fi
    ip link set "$veth" master "$BRIDGE"
    ip link set "$veth" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr flush dev eth0
    ip -n "$ns" addr add "$NET.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    shape "$rate" "$burst" "$veth" || unavailable "tc tbf on $veth failed (no sch_tbf?)"
    shape "$rate" "$burst" eth0 "$ns" || unavailable "tc tbf in $ns failed (no sch_tbf?)"
  done
  write_hosts_entries "$n"
  printf 'hosts=%d\nrate=%s\n' "$n" "$rate" >"$state_dir/config"
  write_agent
  trap - ERR
  creating=0
}

# The plm_rsh_agent: Open MPI runs "AGENT [options] HOST COMMAND..." as it would run ssh; this
# runs COMMAND (joined by spaces and given to sh -c, as sshd does) in HOST's network namespace,
# in a new UTS namespace whose hostname is HOST, with a login-like environment.
write_agent() {
  cat >"$state_dir/rsh_agent.sh" <<'EOF'
#!/bin/sh
# plm_rsh_agent of scripts/vcluster.sh (written by `up`): "ssh" into an emulated host.
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
host="$1"
shift
case "$host" in
  sr-h[0-9]*) ;;
  *) echo "vcluster rsh agent: unknown host '$host'" >&2; exit 255 ;;
esac
exec ip netns exec "$host" unshare --uts env -i PATH="$PATH" HOME="${HOME:-/root}" \
  USER="${USER:-root}" LOGNAME="${LOGNAME:-root}" SHELL=/bin/sh LANG=C.UTF-8 \
  ${LD_LIBRARY_PATH:+LD_LIBRARY_PATH="$LD_LIBRARY_PATH"} \
  sh -c "hostname $host && $*"
EOF
  chmod 755 "$state_dir/rsh_agent.sh"
}

configured_hosts() {
  [[ -f "$state_dir/config" ]] || return 1
  sed -n 's/^hosts=//p' "$state_dir/config"
}

cmd_run() {
  local per_host=1 n
  if [[ "${1:-}" == -p || "${1:-}" == --per-host ]]; then
    [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || die "-p needs a positive number of slots per host"
    per_host="$2"
    shift 2
  fi
  n="$(configured_hosts)" || die "no cluster is up (run: $0 up N [RATE])"
  local mpirun="${VCLUSTER_MPIRUN:-mpirun}"
  # The launch (plm_rsh_agent, btl/oob MCA parameters) is Open MPI's.
  if ! "$mpirun" --version 2>/dev/null | grep -qE "Open MPI|OpenRTE"; then
    echo "vcluster: '$mpirun' is not Open MPI's mpirun (needed to launch across the hosts)" >&2
    exit "$SKIP_RC"
  fi
  [[ -x "$state_dir/rsh_agent.sh" ]] || die "the cluster is incomplete: run '$0 up' again"

  local i
  run_hostfile="$(mktemp "$state_dir/hostfile.XXXXXX")"
  trap 'rm -f "$run_hostfile"' EXIT
  for ((i = 0; i < n; i++)); do
    echo "$(host_name "$i") slots=$per_host"
  done >"$run_hostfile"

  local args=() np=$((n * per_host)) a prev="" name
  for a in "$@"; do
    case "$prev" in -np|-n|--np|-c|--n) [[ "$a" =~ ^[0-9]+$ ]] && np="$a" ;; esac
    prev="$a"
  done
  case " $* " in
    *" -np "*|*" -n "*|*" --np "*|*" -c "*|*" --n "*) ;;
    *) args+=(-np "$np") ;;
  esac
  # The hosts share this machine's cores, which Open MPI cannot see: with more ranks than
  # cores, ranks that busy-poll without yielding wait for the scheduler (measured: 8 ms per
  # 8-byte all-reduce at 2 hosts x 2 ranks on 2 cores, 70 us with yielding).
  if ((np > $(nproc))) && [[ -z "${OMPI_MCA_mpi_yield_when_idle:-}" &&
        " $* " != *yield_when_idle* ]]; then
    args+=(--mca mpi_yield_when_idle 1)
  fi
  while IFS= read -r name; do
    args+=(-x "$name")
  done < <(env | sed -n 's/^\(SKIPRING_[A-Za-z0-9_]*\)=.*/\1/p' | sort -u)

  export OMPI_ALLOW_RUN_AS_ROOT="${OMPI_ALLOW_RUN_AS_ROOT:-1}"
  export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}"
  # Not ours to override when the caller set them, but they would break the emulation.
  unset OMPI_MCA_btl OMPI_MCA_btl_tcp_if_include OMPI_MCA_oob_tcp_if_include \
    OMPI_MCA_plm_rsh_agent OMPI_MCA_btl_tcp_if_exclude OMPI_MCA_oob_tcp_if_exclude
  local status=0
  "$mpirun" --hostfile "$run_hostfile" \
    --mca plm_rsh_agent "$state_dir/rsh_agent.sh" \
    --mca btl tcp,self,vader --mca btl_tcp_if_include "$SUBNET" \
    --mca oob_tcp_if_include "$SUBNET" \
    --bind-to none "${args[@]}" "$@" || status=$?
  return "$status"
}

cmd_down() {
  (($# == 0)) || { usage >&2; exit 2; }
  ((EUID == 0)) || die "not root"
  command -v ip >/dev/null 2>&1 || { rm -rf "$state_dir" "$state_dir.lock"; exit 0; }
  lock
  teardown
}

teardown() {
  local ns
  for ns in $(existing_hosts); do
    remove_host "$ns"
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  remove_hosts_entries
  wait_links_gone
  rm -rf "$state_dir"
  rm -f "$state_dir.lock"
}

cmd_status() {
  local n rate hosts
  hosts="$(existing_hosts | tr '\n' ' ')"
  if ! n="$(configured_hosts)" || [[ -z "$hosts" ]]; then
    echo "vcluster: down${hosts:+ (leftover namespaces: $hosts; run down)}"
    return 1
  fi
  rate="$(sed -n 's/^rate=//p' "$state_dir/config")"
  echo "vcluster: $n hosts at $rate: $hosts(bridge $BRIDGE $HEAD_ADDR, state $state_dir)"
}

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  run) shift; cmd_run "$@" ;;
  down) shift; cmd_down "$@" ;;
  status) shift; cmd_status "$@" ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
