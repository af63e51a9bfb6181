#!/usr/bin/env python3
"""ctest driver of the cluster tests: skipring across emulated hosts (scripts/vcluster.sh).

Each test brings up its own cluster (N network-namespace hosts, each with its own hostname and
a shaped veth NIC), runs one MPI job across it through `vcluster.sh run`, checks the output,
and takes the cluster down again, pass or fail. Where network namespaces are unavailable (not
root, no iproute2, a sandbox that forbids them) `vcluster.sh up` exits 77 and so does this
test: ctest reports it as skipped, with the reason, never as failed.

Usage: cluster_test.py --vcluster scripts/vcluster.sh [--rate 1gbit] SCENARIO [options]
  topology --hosts N --per-host K --info skipring_info
      hosts come from the hostnames (no SKIPRING_HOST_MAP): N hosts, K ranks each, named as
      mpirun placed the ranks (--map-by node: rank r on host r mod N), the ranks of one host
      adjacent in the ring order, N inter-host hops
  hier --hosts N --per-host K --test mpi_allreduce_test
      SKIPRING_ALGO=hier: every type, op and count exact against PMPI_Allreduce, hier ran
  pmpi --hosts N --per-host K --check-report check_report.sh --preload libskipring_pmpi.so
       --program pmpi_allreduce_c
      an unmodified MPI program with the PMPI library preloaded: exact results (the program
      checks them), one SKIPRING_REPORT line per rank with calls > 0 (skipring ran them)
  late --hosts N [--per-host K] --test mpi_straggler_test [--late-rank R] [--late-ms MS]
      [--chain]
      one rank arrives late at every call: skips > 0, exact, and the allgather was routed
      (direct_segments == 0 on every rank: the direct allgather is for one host only)
  late ... --transport ucx
      the same over skipring's UCX transport (SKIPRING_TRANSPORT=ucx) with UCX_TLS=tcp,self:
      the emulated hosts share one kernel, so UCX would otherwise pick its shared-memory and
      CMA transports between them and bypass the emulated network; the info line must say
      UCX carried the collectives
"""
import argparse
import os
import re
import subprocess
import sys
import time

SKIP = 77


def log(msg):
    print(f"cluster_test: {msg}", flush=True)


class Cluster:
    def __init__(self, vcluster, hosts, rate):
        self.vcluster = vcluster
        self.hosts = hosts
        self.rate = rate

    def __enter__(self):
        t0 = time.monotonic()
        # A fresh cluster: a test killed at its timeout may have left hosts and processes.
        subprocess.run(["bash", self.vcluster, "down"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
        proc = subprocess.run(["bash", self.vcluster, "up", str(self.hosts), self.rate],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode == SKIP:
            reason = proc.stdout.strip() or "vcluster.sh up exited 77"
            print(f"SKIPPED: {reason}", flush=True)
            sys.exit(SKIP)
        if proc.returncode != 0:
            print(proc.stdout, end="")
            self.__exit__(None, None, None)
            raise SystemExit(f"cluster_test: vcluster.sh up failed (exit {proc.returncode})")
        log(f"{self.hosts} hosts at {self.rate} up in {time.monotonic() - t0:.1f} s")
        return self

    def __exit__(self, *exc):
        subprocess.run(["bash", self.vcluster, "down"], check=False)
        return False

    def run(self, per_host, args, env=None, timeout=240, wrapper=()):
        """Runs `vcluster.sh run -p K ARGS` (optionally under a wrapper command); returns
        (exit status, combined output), echoing the output."""
        cmd = list(wrapper) + ["bash", self.vcluster, "run", "-p", str(per_host)] + list(args)
        # vcluster.sh passes every SKIPRING_* variable on to the ranks: only the test's own.
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPRING_")}
        full_env.update(env or {})
        log("$ " + " ".join(f"{k}={v}" for k, v in (env or {}).items()) + " " + " ".join(cmd))
        t0 = time.monotonic()
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, env=full_env, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            out = e.stdout or ""
            print(out.decode(errors="replace") if isinstance(out, bytes) else out, end="")
            raise SystemExit(f"cluster_test: FAIL: timed out after {timeout} s")
        print(proc.stdout, end="", flush=True)
        log(f"exit status {proc.returncode} after {time.monotonic() - t0:.1f} s")
        skip = re.search(r"^vcluster: (.*)$", proc.stdout, re.M)
        if proc.returncode == SKIP and skip:
            print(f"SKIPPED: {skip.group(1)}", flush=True)
            self.__exit__(None, None, None)
            sys.exit(SKIP)
        return proc.returncode, proc.stdout


failures = []


def check(cond, what):
    if cond:
        log(f"ok: {what}")
    else:
        log(f"FAIL: {what}")
        failures.append(what)


def test_topology(cluster, a):
    rc, out = cluster.run(a.per_host, ["--map-by", "node", a.info, "--topology"])
    check(rc == 0, "skipring_info --topology exited 0")
    n, k = a.hosts, a.per_host
    m = re.search(r"topology: (\d+) ranks on (\d+) hosts \(hosts from ([a-z ]+)\)", out)
    check(m is not None and int(m.group(1)) == n * k and int(m.group(2)) == n,
          f"{n * k} ranks on {n} hosts")
    check(m is not None and m.group(3) == "hostnames", "hosts from the hostnames")
    hosts = {}  # host name -> ranks
    for hm in re.finditer(r"^  host (\d+) (\S+): ranks ([\d,]+)$", out, re.M):
        hosts[hm.group(2)] = [int(x) for x in hm.group(3).split(",")]
    expected = {f"sr-h{h}": [r for r in range(n * k) if r % n == h] for h in range(n)}
    check(hosts == expected, f"each rank on the host mpirun put it on: {expected}")
    rm = re.search(r"^ring: ([\d ]+)$", out, re.M)
    ring = [int(x) for x in rm.group(1).split()] if rm else []
    check(sorted(ring) == list(range(n * k)), f"the ring holds every rank once: {ring}")
    host_of = {r: h for h, ranks in hosts.items() for r in ranks}
    # The ring is a cycle: start it where the host changes, then list the host of each run of
    # consecutive positions on one host; each host must appear exactly once.
    start = next((i for i in range(len(ring))
                  if host_of.get(ring[i]) != host_of.get(ring[i - 1])), 0)
    cyc = ring[start:] + ring[:start]
    blocks = [host_of.get(r) for i, r in enumerate(cyc)
              if i == 0 or host_of.get(r) != host_of.get(cyc[i - 1])]
    check(len(blocks) == n and len(set(blocks)) == n,
          f"the ranks of one host are adjacent in the ring (host sequence {blocks})")
    hm = re.search(r"^inter-host hops: (\d+) \(hosts: (\d+)\)$", out, re.M)
    check(hm is not None and int(hm.group(2)) == n and int(hm.group(1)) == (n if n > 1 else 0),
          f"{n} inter-host hops")
    # The emulated hosts' NICs are veth devices, no RDMA: the ring's cross-host segments are cut
    # under Open MPI's TCP eager limit (cross_host_segment_bytes).
    if n > 1:
        check(re.search(r"^links between hosts: TCP sockets .* 60 KiB for chunks under 2048 KiB$",
                        out, re.M) is not None, "hosts joined by TCP sockets, 60 KiB segments")


def test_hier(cluster, a):
    rc, out = cluster.run(a.per_host, [a.test, "--expect-algo", "hier"],
                          env={"SKIPRING_ALGO": "hier", "SKIPRING_SEGMENT_BYTES": "4K"})
    check(rc == 0, "mpi_allreduce_test exited 0")
    check(re.search(r"^\d+ passed, 0 failed$", out, re.M) is not None,
          "every hier all-reduce exact (0 failed)")


def test_pmpi(cluster, a):
    np = a.hosts * a.per_host
    rc, out = cluster.run(a.per_host,
                          ["-x", f"LD_PRELOAD={a.preload}", "-x", "SKIPRING_REPORT=1",
                           a.program, "--null-buffer"],
                          wrapper=["bash", a.check_report, "--np", str(np), "--calls",
                                   "positive", "--fallbacks", "positive", "--"])
    check(rc == 0, "exact results and one report line per rank with calls > 0 "
                   "(check_report.sh)")


def test_late(cluster, a):
    inject = f"rank={a.late_rank},delay={a.late_ms:g}ms,at=arrive"
    env = {"SKIPRING_INJECT": inject}
    mpirun_args = []
    if a.transport == "ucx":
        env.update({"SKIPRING_TRANSPORT": "ucx", "SKIPRING_LOG_LEVEL": "info"})
        mpirun_args = ["-x", "UCX_TLS=tcp,self"]
    args = [a.test, "--expect-skips", "--expect-routed", "--iters", "6"]
    # The skip-ahead ring itself: the late chain (on by default across hosts) would take the late
    # rank out before any skip.
    env["SKIPRING_LATE_CHAIN"] = "0"
    if a.chain:
        env["SKIPRING_LATE_CHAIN"] = "1"
        args = [a.test, "--expect-excluded", "--iters", "4"]
    rc, out = cluster.run(a.per_host, mpirun_args + args, env=env)
    check(rc == 0, "mpi_straggler_test exited 0 (exact, skips > 0, direct_segments == 0)")
    if a.transport == "ucx":
        check(re.search(r"SKIPRING_TRANSPORT=ucx: UCX \d+\.\d+", out) is not None,
              "the UCX transport carried the collectives (its info line)")
    if a.chain:
        m = re.search(r"^excluded=(\d+)$", out, re.M)
        check(m is not None and int(m.group(1)) == a.hosts * a.per_host,
              "the census took the late rank out on every rank")
    else:
        m = re.search(r"^skips=(\d+) late=(\d+)$", out, re.M)
        check(m is not None and int(m.group(1)) > 0, "the late rank made ranks skip ahead")
    check(re.search(r"^\d+ passed, 0 failed$", out, re.M) is not None, "0 failed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vcluster", required=True, help="scripts/vcluster.sh")
    ap.add_argument("--rate", default="1gbit", help="NIC rate of every host (tc syntax)")
    ap.add_argument("scenario", choices=["topology", "hier", "pmpi", "late"])
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--per-host", type=int, default=1)
    ap.add_argument("--info")
    ap.add_argument("--test")
    ap.add_argument("--check-report")
    ap.add_argument("--preload")
    ap.add_argument("--program")
    ap.add_argument("--chain", action="store_true",
                    help="late: the late chain (SKIPRING_LATE_CHAIN=1): the census takes it out")
    ap.add_argument("--late-rank", type=int, default=1)
    ap.add_argument("--late-ms", type=float, default=50)
    ap.add_argument("--transport", choices=["mpi", "ucx"], default="mpi",
                    help="late: skipring's transport (ucx forces UCX_TLS=tcp,self)")
    a = ap.parse_args()
    t0 = time.monotonic()
    with Cluster(a.vcluster, a.hosts, a.rate) as cluster:
        {"topology": test_topology, "hier": test_hier, "pmpi": test_pmpi,
         "late": test_late}[a.scenario](cluster, a)
    log(f"{a.scenario}: {'FAILED' if failures else 'passed'} in {time.monotonic() - t0:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
