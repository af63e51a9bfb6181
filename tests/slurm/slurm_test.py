#!/usr/bin/env python3
"""ctest driver of the slurm tests: scripts/slurm/*.sbatch submitted to real SLURM daemons.

Starts a private slurmctld and slurmd (configuration, state, spool, logs and job outputs in a
fresh temporary directory; ports picked free; AuthType=auth/none, CredType=cred/none, so no
munge), submits with sbatch the three scripts a user copies (scripts/slurm/), waits for them
and checks their output:
  mpirun_bench.sbatch     exit 0, the bench table with every result exact, skip-ahead and the
                          plain ring both ran, the ranks on the expected nodes
  srun_preload.sbatch     srun --mpi=pmix (Open MPI) or pmi2 (MPICH) with the PMPI library
                          preloaded: exit 0, one SKIPRING_REPORT line per rank, calls > 0 each
  straggler_array.sbatch  an array job (delays 0 and 50 ms), every task COMPLETED, one CSV each,
                          and summarize_array.py run as a job that depends on the array
                          (--dependency=afterok): every result exact, skips > 0 at 50 ms
  torch_ddp.sbatch        (with --torch-path, where the PyTorch backend was built) srun of
                          unmodified DDP on the skipring backend, a late rank: exit 0, equal
                          parameter hashes on every rank, loss falling, skipring ran the
                          all-reduces on every rank, skips + late > 0
Then it stops everything it started, by pid, pass or fail (also on SIGTERM/SIGINT; a run killed
outright is cleaned up by the next one from the pid file it leaves), and removes the directory.

One node (the local hostname, 4 CPUs declared on whatever the machine has), or with --vcluster
one slurmd per emulated host of scripts/vcluster.sh (network namespaces sr-h0.., NodeAddr
198.18.0.(i+1), slurmctld on the bridge 198.18.0.254) and every job across --hosts nodes.

Exit 77 (ctest: skipped) with the reason when the daemons cannot run here: not root, SLURM not
installed (scripts/setup.sh slurm), a daemon that does not come up (its log is shown), network
namespaces unavailable (--vcluster). SR_TEST_REQUIRE=1 turns those into failures.
The MPI jobs run under an exclusive flock on SR_TEST_LOCK (default /tmp/skipring-mpi.lock, the
lock the machine's other MPI runs take; empty: none): do not run this under flock(1) on the
same file, it would wait for itself.
"""
import argparse
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 77
PID_FILE = "/tmp/skipring-slurm-test.pids"  # what a killed run left running, for the next run
CORES_PER_NODE = 4  # declared per node in the one-node case (config_overrides): 4 ranks fit
DELAYS_MS = [0, 50]  # the array experiment: one task per delay


def log(msg):
    print(f"slurm_test: {msg}", flush=True)


class Skip(Exception):
    pass


failures = []


def check(cond, what):
    log(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)
    return cond


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def proc_environ_has(pid, needle):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:
        return False


def pids_with_env(needle):
    """Pids of the processes whose environment holds the entry `needle` (bytes)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid() and proc_environ_has(name, needle):
            out.append(int(name))
    return out


def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    # A zombie is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stop_pids(pids, what, grace=10.0):
    pids = [p for p in pids if alive(p)]
    if not pids:
        return
    log(f"stopping {what}: pids {' '.join(map(str, pids))}")
    for p in pids:
        try:
            os.kill(p, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    for p in pids:
        if alive(p):
            log(f"pid {p} ignored SIGTERM: SIGKILL")
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass


def clean_previous_run():
    """A run killed outright (ctest's timeout) leaves its daemons and directory: the pid file
    names them; only processes whose environment still points at that run's slurm.conf go."""
    try:
        with open(PID_FILE) as f:
            prev = json.load(f)
    except (OSError, ValueError):
        return
    conf = prev.get("conf", "")
    if conf:
        needle = f"SLURM_CONF={conf}".encode()
        pids = {p for p in prev.get("pids", []) if proc_environ_has(p, needle)}
        stop_pids(sorted(pids | set(pids_with_env(needle))), "a previous run's daemons and jobs")
    d = prev.get("dir", "")
    if d.startswith(tempfile.gettempdir() + "/skipring-slurm-") and os.path.isdir(d):
        shutil.rmtree(d, ignore_errors=True)
    try:
        os.unlink(PID_FILE)
    except OSError:
        pass


class SlurmCluster:
    def __init__(self, a):
        self.a = a
        self.procs = {}  # name -> Popen
        self.dir = None
        self.conf = None
        self.vcluster_up = False
        self.stopped = False
        if a.vcluster:
            self.nodes = [f"sr-h{i}" for i in range(a.hosts)]
            self.addrs = [f"198.18.0.{i + 1}" for i in range(a.hosts)]
            self.ctld_addr = "198.18.0.254"
            self.cpus = 2
        else:
            self.nodes = [socket.gethostname().split(".")[0]]
            self.addrs = ["127.0.0.1"]
            self.ctld_addr = "127.0.0.1"
            self.cpus = CORES_PER_NODE

    # ---- environment checks -------------------------------------------------------------
    def preflight(self):
        if os.geteuid() != 0:
            raise Skip("not root (slurmd must run as root to start jobs)")
        missing = [c for c in ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel",
                               "sinfo", "srun") if shutil.which(c) is None]
        if missing:
            raise Skip(f"{', '.join(missing)} not found (install: bash scripts/setup.sh slurm)")
        if self.a.vcluster and shutil.which("nsenter") is None:
            raise Skip("nsenter not found (util-linux)")

    # ---- the daemons --------------------------------------------------------------------
    def write_conf(self, ctld_port, slurmd_port):
        d = self.dir
        host = socket.gethostname().split(".")[0]
        for sub in ("state", "jobs", "results"):
            os.makedirs(os.path.join(d, sub))
        for n in self.nodes:
            os.makedirs(os.path.join(d, "spool", n))
            os.makedirs(os.path.join(d, "tmp", n))
        nodes = "\n".join(
            f"NodeName={n} NodeAddr={addr} CPUs={self.cpus} State=UNKNOWN"
            for n, addr in zip(self.nodes, self.addrs))
        node_list = ",".join(self.nodes)
        conf = f"""# written by tests/slurm/slurm_test.py: a private test cluster
ClusterName=skipringtest
SlurmctldHost={host}({self.ctld_addr})
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
# pmix makes its per-step directories under TmpFS: one per node, or the emulated hosts (one
# file system) collide on /tmp/spmix_appdir_<uid>_<job>.<step>
TmpFS={d}/tmp/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.%n.log
SlurmdDebug=info
SlurmctldDebug=info
# the declared CPUs count, not the machine's (4 ranks on a 2-core machine)
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
MinJobAge=600
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
MailProg=/bin/true
{nodes}
PartitionName=test Nodes={node_list} Default=YES MaxTime=30 State=UP
"""
        self.conf = os.path.join(d, "slurm.conf")
        with open(self.conf, "w") as f:
            f.write(conf)

    def daemon_env(self):
        env = clean_env()
        env["SLURM_CONF"] = self.conf
        return env

    def start(self, name, cmd):
        logf = open(os.path.join(self.dir, f"{name}.out"), "w")
        self.procs[name] = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf,
                                            stderr=subprocess.STDOUT, env=self.daemon_env(),
                                            start_new_session=True)
        logf.close()
        self.save_pids()

    def save_pids(self):
        with open(PID_FILE, "w") as f:
            json.dump({"dir": self.dir, "conf": self.conf,
                       "pids": [p.pid for p in self.procs.values()]}, f)

    def daemon_log(self, name, lines=15):
        text = ""
        for path in (os.path.join(self.dir, f"{name}.out"),
                     os.path.join(self.dir, f"{name.replace('-', '.', 1)}.log")):
            try:
                with open(path, errors="replace") as f:
                    text += "".join(f.readlines()[-lines:])
            except OSError:
                pass
        return text.rstrip() or "(no output)"

    def wait_until(self, what, timeout, ready):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise Skip(f"{name} exited with status {p.returncode} while waiting for "
                               f"{what}; its output:\n{self.daemon_log(name)}")
            if ready():
                return
            time.sleep(0.3)
        names = " ".join(self.procs)
        raise Skip(f"{what} not after {timeout} s; daemon output ({names}):\n" +
                   "\n".join(self.daemon_log(n) for n in self.procs))

    def up(self):
        self.dir = tempfile.mkdtemp(prefix="skipring-slurm-")
        if self.a.vcluster:
            subprocess.run(["bash", self.a.vcluster, "down"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
            self.vcluster_up = True
            proc = subprocess.run(["bash", self.a.vcluster, "up", str(self.a.hosts), "1gbit"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if proc.returncode == SKIP:
                raise Skip(proc.stdout.strip() or "vcluster.sh up exited 77")
            if proc.returncode != 0:
                raise RuntimeError(f"vcluster.sh up failed (exit {proc.returncode}):\n"
                                   f"{proc.stdout}")
            log(f"{self.a.hosts} emulated hosts up")
        ctld_port, slurmd_port = free_port(), free_port()
        while slurmd_port == ctld_port:
            slurmd_port = free_port()
        self.write_conf(ctld_port, slurmd_port)
        log(f"directory {self.dir}, slurmctld port {ctld_port}, slurmd port {slurmd_port}, "
            f"nodes {','.join(self.nodes)}")
        t0 = time.monotonic()
        self.start("slurmctld", ["slurmctld", "-D", "-f", self.conf])
        self.wait_until("slurmctld answering", 30, lambda: run_quiet(
            ["scontrol", "ping"], self.daemon_env()).find("is UP") >= 0)
        for i, node in enumerate(self.nodes):
            if self.a.vcluster:
                # nsenter, not `ip netns exec`: that one remounts /sys, and slurmd then finds
                # no cgroup file system and refuses to start.
                cmd = ["nsenter", f"--net=/run/netns/{node}", "unshare", "--uts", "sh", "-c",
                       f'hostname "$0" && exec slurmd -D -N "$0" -f "$1"', node, self.conf]
            else:
                cmd = ["slurmd", "-D", "-N", node, "-f", self.conf]
            self.start(f"slurmd-{node}", cmd)

        def all_idle():
            out = run_quiet(["sinfo", "-h", "-N", "-o", "%N %t"], self.daemon_env())
            states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
            return all(states.get(n) == "idle" for n in self.nodes)
        self.wait_until(f"node(s) {','.join(self.nodes)} idle", 40, all_idle)
        log(f"slurmctld and {len(self.nodes)} slurmd up in {time.monotonic() - t0:.1f} s")

    def down(self):
        if self.stopped:
            return
        self.stopped = True
        if self.conf and "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            ids = run_quiet(["squeue", "-h", "-o", "%A"], self.daemon_env()).split()
            if ids:
                log(f"cancelling jobs still queued or running: {' '.join(ids)}")
                run_quiet(["scancel"] + ids, self.daemon_env())
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline and run_quiet(
                        ["squeue", "-h", "-o", "%A"], self.daemon_env()).split():
                    time.sleep(0.5)
        # The slurmds first (the controller would otherwise mark them down and try to requeue),
        # then the controller.
        stop_pids([p.pid for n, p in self.procs.items() if n != "slurmctld"], "slurmd")
        stop_pids([p.pid for n, p in self.procs.items() if n == "slurmctld"], "slurmctld")
        for p in self.procs.values():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        # Whatever the jobs left (slurmstepd, ranks): the processes whose environment points
        # at this run's slurm.conf.
        if self.conf:
            stop_pids(pids_with_env(f"SLURM_CONF={self.conf}".encode()), "leftover job processes",
                      grace=5)
        if self.vcluster_up:
            subprocess.run(["bash", self.a.vcluster, "down"], check=False)
        if self.dir and not self.a.keep:
            shutil.rmtree(self.dir, ignore_errors=True)
        elif self.dir:
            log(f"kept {self.dir} (--keep)")
        try:
            os.unlink(PID_FILE)
        except OSError:
            pass


def clean_env():
    """The caller's environment without anything that would steer SLURM's commands to another
    cluster or job (SLURM_*, SBATCH_*, SRUN_*, SALLOC_*) or reach the ranks (SKIPRING_*)."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SKIPRING_"))}


def run_quiet(cmd, env, timeout=20):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=env, timeout=timeout)
        return p.stdout
    except (subprocess.TimeoutExpired, OSError):
        return ""


def mpi_flavour(mpirun):
    out = run_quiet([mpirun, "--version"], os.environ.copy())
    if re.search(r"Open MPI|OpenRTE", out):
        return "openmpi"
    if re.search(r"HYDRA|MPICH", out, re.I):
        return "mpich"
    return "unknown"


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError as e:
        return f"(cannot read {path}: {e.strerror})"


def job_states(env, job_id):
    """{job id or array task as 'J_T': (JobState, ExitCode)} from scontrol show job."""
    out = run_quiet(["scontrol", "-o", "show", "job", str(job_id)], env)
    states = {}
    for line in out.splitlines():
        f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if "JobId" not in f:
            continue
        key = f["JobId"]
        if f.get("ArrayTaskId"):
            key = f"{f['ArrayJobId']}_{f['ArrayTaskId']}"
        states[key] = (f.get("JobState", "?"), f.get("ExitCode", "?"))
    return states


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scripts", required=True, help="scripts/slurm")
    ap.add_argument("--build-dir", required=True, help="the build directory (SR_BUILD_DIR)")
    ap.add_argument("--bench", required=True, help="skipring_bench")
    ap.add_argument("--preload", required=True, help="libskipring_pmpi.so")
    ap.add_argument("--program", required=True, help="the MPI program run under the preload")
    ap.add_argument("--mpirun", default="mpirun", help="the MPI launcher the build uses")
    ap.add_argument("--vcluster", help="scripts/vcluster.sh: one slurmd per emulated host")
    ap.add_argument("--hosts", type=int, default=2, help="emulated hosts (with --vcluster)")
    ap.add_argument("--timeout", type=float, default=200,
                    help="seconds to wait for all jobs (keep it below ctest's TIMEOUT)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--torch-path", help="where skipring_torch is (build/python): run the DDP job")
    ap.add_argument("--python", default="/usr/bin/python3", help="the Python with torch")
    ap.add_argument("--source-dir", help="the source tree (scripts/train/ddp_train.py)")
    a = ap.parse_args()
    # The jobs run in another directory: every path absolute.
    for name in ("scripts", "build_dir", "bench", "preload", "program", "vcluster", "torch_path",
                 "source_dir"):
        if getattr(a, name):
            setattr(a, name, os.path.abspath(getattr(a, name)))
    if "/" in a.mpirun:
        a.mpirun = os.path.abspath(a.mpirun)
    t_start = time.monotonic()
    require = os.environ.get("SR_TEST_REQUIRE", "0") not in ("", "0")

    lock_path = os.environ.get("SR_TEST_LOCK", "/tmp/skipring-mpi.lock")
    lock_file = None
    if lock_path:
        lock_file = open(lock_path, "a")
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for the MPI lock {lock_path} (another MPI job runs)")
            fcntl.flock(lock_file, fcntl.LOCK_EX)
        log(f"holding {lock_path} after {time.monotonic() - t_start:.1f} s")

    cluster = SlurmCluster(a)

    def on_signal(signum, _frame):
        log(f"signal {signum}: cleaning up")
        cluster.down()
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    clean_previous_run()
    try:
        cluster.preflight()
        cluster.up()
        run_jobs(cluster, a)
    except Skip as e:
        if require:
            log(f"FAIL (SR_TEST_REQUIRE=1): {e}")
            failures.append(str(e))
        else:
            print(f"SKIPPED: {e}", flush=True)
            cluster.down()
            return SKIP
    finally:
        cluster.down()
    log(f"{'FAILED' if failures else 'passed'} in {time.monotonic() - t_start:.1f} s")
    return 1 if failures else 0


def run_jobs(cluster, a):
    d = cluster.dir
    multi = a.vcluster is not None
    nnodes = len(cluster.nodes)
    flavour = mpi_flavour(a.mpirun)
    plugin = "pmi2" if flavour == "mpich" else "pmix"
    env = clean_env()
    env.update({
        "SLURM_CONF": cluster.conf,
        "SR_BUILD_DIR": a.build_dir, "SR_BENCH": a.bench, "SR_PRELOAD": a.preload,
        "SR_MPIRUN": a.mpirun, "SR_SRUN_MPI": plugin,
        # every rank of every node shares this machine's cores
        "OMPI_MCA_mpi_yield_when_idle": "1",
    })
    if multi:
        # Open MPI between the emulated hosts: TCP on their subnet (as scripts/vcluster.sh run).
        env.update({"OMPI_MCA_btl": "tcp,self,vader",
                    "OMPI_MCA_btl_tcp_if_include": "198.18.0.0/24",
                    "OMPI_MCA_oob_tcp_if_include": "198.18.0.0/24"})
        shape = ["--nodes", str(nnodes), "--ntasks-per-node", str(4 // nnodes)]
    else:
        shape = ["--nodes", "1", "--ntasks", "4"]
    np = 4
    plugins = run_quiet(["srun", "--mpi=list"], env)
    log(f"MPI: {flavour} ({a.mpirun}); srun --mpi={plugin}; srun --mpi=list: "
        f"{' '.join(plugins.split())}")
    jobs_dir = os.path.join(d, "jobs")
    results = os.path.join(d, "results")

    def sbatch(script, extra_env, args, out_name, sbatch_args=()):
        e = dict(env)
        e.update(extra_env)
        cmd = (["sbatch", "--parsable", f"--chdir={jobs_dir}", f"--output={jobs_dir}/{out_name}"]
               + shape + list(sbatch_args) + [os.path.join(a.scripts, script)] + list(args))
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e)
        if p.returncode != 0:
            raise RuntimeError(f"sbatch {script} failed (exit {p.returncode}): {p.stdout.strip()}")
        job = p.stdout.strip().split(";")[0]
        log(f"submitted {script} as job {job}")
        return job

    small = {"SR_MINBYTES": "8", "SR_MAXBYTES": "64K", "SR_ITERS": "3", "SR_LATE_MS": "20"}
    bench_job = sbatch("mpirun_bench.sbatch", small, [], "bench-%j.out")
    preload_job = sbatch("srun_preload.sbatch", {}, [a.program], "preload-%j.out")
    array_env = {"SR_DELAYS_MS": " ".join(map(str, DELAYS_MS)), "SR_RESULTS_DIR": results,
                 "SR_MINBYTES": "64K", "SR_MAXBYTES": "256K", "SR_ITERS": "3"}
    array_job = sbatch("straggler_array.sbatch", array_env, [], "straggler-%A_%a.out",
                       [f"--array=0-{len(DELAYS_MS) - 1}"])
    # The summary as a job after the array, as the script's header shows.
    summary_cmd = (f"{sys.executable} {os.path.join(a.scripts, 'summarize_array.py')} "
                   f"--expect {len(DELAYS_MS)} {results}/task-*.csv")
    e = dict(env)
    p = subprocess.run(["sbatch", "--parsable", f"--chdir={jobs_dir}",
                        f"--output={jobs_dir}/summary-%j.out", "--ntasks=1",
                        f"--dependency=afterok:{array_job}", "--kill-on-invalid-dep=yes",
                        "--wrap", summary_cmd],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e)
    if p.returncode != 0:
        raise RuntimeError(f"sbatch of the summary failed: {p.stdout.strip()}")
    summary_job = p.stdout.strip().split(";")[0]
    log(f"submitted the summary as job {summary_job} (afterok:{array_job})")
    # (d) DDP on the skipring backend under srun (issue 39), where the backend was built: the
    # skip-ahead ring forced and rank 1 late by an exponential 15 ms per step, so that skips or
    # late pieces show. Across nodes, torch's store listens on the first node's address.
    ddp_job = None
    if a.torch_path:
        ddp_env = {"SR_TORCH_PATH": a.torch_path, "SR_PYTHON": a.python,
                   "SKIPRING_ALGO": "skipring"}
        if multi:
            ddp_env["MASTER_ADDR"] = cluster.addrs[0]
        ddp_args = [os.path.join(a.source_dir, "scripts", "train", "ddp_train.py"),
                    "--variants", "skipring", "--hidden", "256,256", "--max-steps", "12",
                    "--eval-every", "4", "--straggler-dist", "exp", "--straggler-ranks", "1",
                    "--straggler-ms", "15", "--json", os.path.join(jobs_dir, "ddp-result.json")]
        ddp_job = sbatch("torch_ddp.sbatch", ddp_env, ddp_args, "ddp-%j.out")

    t0 = time.monotonic()
    while True:
        queued = run_quiet(["squeue", "-h", "-o", "%i %T %R"], env).strip()
        if not queued:
            break
        if time.monotonic() - t0 > a.timeout:
            log(f"FAIL: jobs not finished after {a.timeout:.0f} s (--timeout); still queued:\n"
                f"{queued}")
            failures.append("jobs finished in time")
            for f in sorted(os.listdir(jobs_dir)):
                log(f"--- {f} (so far) ---\n{read(os.path.join(jobs_dir, f))[-3000:]}")
            return
        time.sleep(1)
    log(f"all jobs done in {time.monotonic() - t0:.1f} s")

    def out_of(prefix, job):
        path = os.path.join(jobs_dir, f"{prefix}-{job}.out")
        text = read(path)
        print(f"----- {os.path.basename(path)} -----\n{text.rstrip()}\n-----", flush=True)
        return text

    def completed(job, what):
        states = job_states(env, job)
        st = states.get(str(job), ("?", "?"))
        return check(st == ("COMPLETED", "0:0"), f"{what}: job {job} COMPLETED, exit 0 "
                     f"(JobState={st[0]} ExitCode={st[1]})")

    # (a) mpirun inside the allocation
    text = out_of("bench", bench_job)
    completed(bench_job, "mpirun_bench")
    check(re.search(r"^# Out of bounds values : 0 OK", text, re.M) is not None,
          "mpirun_bench: every result exact (Out of bounds values : 0 OK)")
    rows = re.findall(r"^\s+\d+\s+\d+\s+float\s+sum\s", text, re.M)
    check(len(rows) == 7, f"mpirun_bench: 7 table rows, 8 B..64 KiB (got {len(rows)})")
    check(re.search(r"^# plain-ring skips\s+: 0 ", text, re.M) is not None and
          re.search(r"^# Geomean skip/ring\s+: [0-9.]+", text, re.M) is not None,
          "mpirun_bench: skip-ahead and the plain ring both timed (straggler mode)")
    placed = re.findall(r"^#\s+Rank\s+(\d+) Pid\s+\d+ on (\S+)$", text, re.M)
    hosts = sorted({h for _, h in placed})
    check(len(placed) == np and hosts == sorted(cluster.nodes),
          f"mpirun_bench: {np} ranks on node(s) {','.join(cluster.nodes)} (got {placed})")

    # (b) srun with the preload
    text = out_of("preload", preload_job)
    completed(preload_job, "srun_preload")
    reports = re.findall(r"^skipring: rank=(\d+) calls=(\d+) fallbacks=\d+ skips=\d+ late=\d+ "
                         r"bytes=\d+ time_s=\d+\.\d{6}(?: [a-z_]+=\d+)*$", text, re.M)
    ranks = sorted(int(r) for r, _ in reports)
    check(ranks == list(range(np)), f"srun_preload: one report line per rank 0..{np - 1} "
          f"(got ranks {ranks})")
    check(bool(reports) and all(int(c) > 0 for _, c in reports),
          "srun_preload: calls > 0 on every rank (skipring ran the program's all-reduces)")
    check(re.search(rf"^srun_preload: exit status 0, {np} report line\(s\)", text, re.M)
          is not None, "srun_preload: the script's summary line (exit 0, all report lines)")

    # (c) the array job and its summary
    states = job_states(env, array_job)
    tasks = {k: v for k, v in states.items() if k.startswith(f"{array_job}_")}
    check(len(tasks) == len(DELAYS_MS) and
          all(v == ("COMPLETED", "0:0") for v in tasks.values()),
          f"straggler_array: all {len(DELAYS_MS)} array tasks COMPLETED, exit 0 (got {tasks})")
    for i in range(len(DELAYS_MS)):
        name = f"straggler-{array_job}_{i}.out"
        out = [name] if os.path.exists(os.path.join(jobs_dir, name)) else []
        if out:
            t = read(os.path.join(jobs_dir, out[0]))
            print(f"----- {out[0]} (tail) -----\n{t.rstrip()[-1500:]}\n-----", flush=True)
            check(re.search(r"^# Out of bounds values : 0 OK", t, re.M) is not None,
                  f"straggler_array task {i}: every result exact")
        else:
            check(False, f"straggler_array task {i}: job output present")
        check(os.path.getsize(os.path.join(results, f"task-{i}.csv")) > 0
              if os.path.exists(os.path.join(results, f"task-{i}.csv")) else False,
              f"straggler_array task {i}: results/task-{i}.csv written")
    text = out_of("summary", summary_job)
    completed(summary_job, "summarize_array (afterok dependency)")
    check(re.search(rf"^summarize_array: {len(DELAYS_MS)} task\(s\), all results exact$", text,
                    re.M) is not None, "summarize_array: every task's results exact")
    rows = {}
    for m in re.finditer(r"^\s*(\d+)\s+\d+\s+([0-9.]+)\s+.*B \(\d+\)\s+([0-9.na]+)\s+([0-9.]+)"
                         r"\s+(\d+)$", text, re.M):
        rows[float(m.group(2))] = float(m.group(4))
    check(sorted(rows) == [float(x) for x in DELAYS_MS],
          f"summarize_array: one line per delay {DELAYS_MS} ms (got {sorted(rows)})")
    late = float(max(DELAYS_MS))
    check(rows.get(late, 0) > 0, f"straggler_array: skip-ahead skipped at {late:g} ms "
          f"(skips/iter {rows.get(late)})")

    # (d) DDP under srun
    if ddp_job is not None:
        text = out_of("ddp", ddp_job)
        completed(ddp_job, "torch_ddp")
        reports = re.findall(r"skipring: rank=(\d+) calls=(\d+) fallbacks=\d+ skips=(\d+) "
                             r"late=(\d+) ", text)
        ranks = sorted(int(r[0]) for r in reports)
        check(ranks == list(range(np)), f"torch_ddp: one report line per rank 0..{np - 1} "
              f"(got ranks {ranks})")
        check(bool(reports) and all(int(r[1]) > 0 for r in reports),
              "torch_ddp: calls > 0 on every rank (skipring ran DDP's all-reduces)")
        check(sum(int(r[2]) + int(r[3]) for r in reports) > 0,
              "torch_ddp: skips + late > 0 (rank 1 late at every step)")
        # The result from the file rank 0 writes (--json): in the job output other ranks' report
        # lines can split it (srun forwards every task's output as it comes).
        path = os.path.join(jobs_dir, "ddp-result.json")
        results = []
        for line in (read(path) if os.path.exists(path) else "").splitlines():
            try:
                results.append(json.loads(line))
            except ValueError:
                check(False, f"torch_ddp: {path} holds JSON lines (got {line[:80]!r})")
        check(len(results) == 1, f"torch_ddp: one result in {path} (got {len(results)})")
        for res in results:
            hashes = res.get("hashes", [])
            check(len(hashes) >= 3, f"torch_ddp: parameter hashes equal on every rank at "
                  f"{len(hashes)} checks (ddp_train.py exits 4 when they differ)")
            check(res["loss_last5"] < res["loss_first5"], f"torch_ddp: training loss falls "
                  f"({res['loss_first5']:.4f} -> {res['loss_last5']:.4f})")


if __name__ == "__main__":
    sys.exit(main())
