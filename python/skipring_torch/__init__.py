"""skipring as a torch.distributed backend.

    import skipring_torch                      # registers the "skipring" backend
    import torch.distributed as dist
    dist.init_process_group("skipring")        # under mpirun or srun: rank and size from MPI

Importing initialises MPI (MPI_Init_thread with MPI_THREAD_MULTIPLE) unless it is initialised
already, and, where the launcher did not set them, fills in the variables torch's env://
rendezvous reads: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE from MPI, MASTER_ADDR and
MASTER_PORT from rank 0 (its host name and a free port, broadcast over MPI). Every rank must
import it (the broadcast is collective). Other backends (gloo) can then share the same job
(`dist.new_group(backend="gloo")`).

Collectives run in issue order on a worker thread per group, through skipring's C API:
allreduce (SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR, PREMUL_SUM), allreduce_coalesced,
broadcast, reduce, allgather, _allgather_base, reduce_scatter, _reduce_scatter_base, barrier.
Anything else (send/recv, gather, scatter, all_to_all) raises "does not support".
With TORCH_DISTRIBUTED_DEBUG=DETAIL (or set_check(True)) every collective first checks that
all ranks make the same call, and raises on every rank, naming each rank's call, if not.
"""
import atexit
import os
import sys
import socket

import torch  # noqa: F401  (loads libtorch before the extension)
import torch.distributed as dist

from . import _C

__all__ = ["ProcessGroupSkipring", "totals", "report_line", "set_algo", "set_skip", "set_inject",
           "set_check", "get_check", "world", "BACKEND"]

BACKEND = "skipring"
ProcessGroupSkipring = _C.ProcessGroupSkipring
totals = _C.totals
set_algo = _C.set_algo
set_skip = _C.set_skip
set_inject = _C.set_inject
# Cross-rank consistency check of every collective (an extra small all-gather per call): on
# with TORCH_DISTRIBUTED_DEBUG=DETAIL, as torch does for gloo and NCCL, or set_check(True) on
# every rank. Ranks that disagree (collective, dtype, size, op, root) all raise, naming each
# rank's call, instead of exchanging mismatched data.
set_check = _C.set_check
get_check = _C.get_check


def world():
    """(rank, size) in MPI_COMM_WORLD (initialises MPI if needed)."""
    return _C.world()


def report_line(rank=None):
    """The PMPI library's report line, from this process's counters."""
    t = totals()
    if rank is None:
        rank = world()[0]
    return (f"skipring: rank={rank} calls={t['calls']} fallbacks={t['fallbacks']} "
            f"skips={t['skips']} late={t['late']} bytes={t['bytes']} time_s={t['time_s']:.6f}")


def _truthy(v):
    return str(v).strip().lower() in ("1", "true", "yes", "on")


def _local_rank_size(rank, size):
    for r_var, s_var in (("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
                         ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
                         ("SLURM_LOCALID", None)):
        if r_var in os.environ:
            ls = os.environ.get(s_var) if s_var else None
            return os.environ[r_var], ls or os.environ.get("SLURM_NTASKS_PER_NODE", str(size))
    return "0", "1"


def _fill_env():
    rank, size = _C.world()
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(size))
    lr, ls = _local_rank_size(rank, size)
    os.environ.setdefault("LOCAL_RANK", lr)
    os.environ.setdefault("LOCAL_WORLD_SIZE", ls)
    # The rendezvous address: rank 0's host and a port free there (all ranks take part).
    need = "0" if ("MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ) else "1"
    need = _C.bcast_str(need, 0)
    if need == "1":
        msg = ""
        if rank == 0:
            addr = os.environ.get("MASTER_ADDR") or socket.gethostname()
            port = os.environ.get("MASTER_PORT")
            if not port:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind(("", 0))
                    port = str(s.getsockname()[1])
            msg = f"{addr}:{port}"
        msg = _C.bcast_str(msg, 0)
        addr, port = msg.rsplit(":", 1)
        os.environ["MASTER_ADDR"] = addr
        os.environ["MASTER_PORT"] = port


def _create(opts, pg_options=None):
    """torch's creator (extended API): checks torch's view of the group against MPI's."""
    wrank, wsize = _C.world()
    ranks = [int(r) for r in opts.global_ranks_in_group]
    if not ranks:  # the default group: torch's ranks must be MPI_COMM_WORLD's
        if opts.group_rank != wrank or opts.group_size != wsize:
            raise RuntimeError(
                f"skipring backend: torch.distributed says rank {opts.group_rank} of "
                f"{opts.group_size}, MPI_COMM_WORLD says rank {wrank} of {wsize}; the skipring "
                "backend takes rank and size from MPI (launch with mpirun/srun and leave RANK "
                "and WORLD_SIZE unset, or set them to the MPI values)")
    elif opts.group_rank >= len(ranks) or ranks[opts.group_rank] != wrank:
        raise RuntimeError(
            f"skipring backend: group ranks {ranks} do not place MPI rank {wrank} at group "
            f"rank {opts.group_rank}")
    return _C.ProcessGroupSkipring.create(ranks)


def _at_exit():
    if _truthy(os.environ.get("SKIPRING_REPORT", "0")):
        try:
            # One write(2) of the whole line: print() may split text and newline, and under
            # mpirun another rank's line then lands in between (seen in CI).
            sys.stdout.flush()
            os.write(sys.stdout.fileno(), (report_line() + "\n").encode())
        except Exception:  # noqa: BLE001  (never fail at exit)
            pass
    _C.finalize()


_C.ensure_mpi()
_fill_env()
if os.environ.get("TORCH_DISTRIBUTED_DEBUG", "").upper() == "DETAIL":
    set_check(True)
if not hasattr(dist.Backend, BACKEND.upper()):
    dist.Backend.register_backend(BACKEND, _create, extended_api=True)
atexit.register(_at_exit)
