#!/usr/bin/python3
"""mpirun test of the skipring torch.distributed backend (python/skipring_torch).

Usage: mpirun -np N /usr/bin/python3 torch_backend_test.py MODE
  collectives  every collective against a reference computed on the host, for every dtype
               and op it takes (sizes 0, 1, 7, 1000, 70000 elements); allreduce_coalesced,
               barrier; every root of broadcast and reduce
  async        many outstanding works (200 async all-reduces of mixed sizes, then broadcasts
               and all-reduces chained on one tensor, which only give the right answer in
               issue order); waits in reverse order; futures with .then
  errors       bad calls (unsupported dtype or op, mismatched sizes, wrong list lengths,
               non-contiguous, root outside the group, unsupported collective) raise a
               RuntimeError naming the problem, on the calling thread, before any
               communication; with the consistency check on (set_check), ranks that disagree
               (sizes, dtypes, roots) all raise, naming each rank's call; the group still
               works afterwards
  subgroup     dist.new_group(ranks) with the skipring backend, results against the host
  mismatch     sizes that differ across ranks with the consistency check off (rank r all-reduces
               1000 * (r + 1) floats): at least one rank raises a RuntimeError naming the failed
               all-reduce, none hangs (SKIPRING_TIMEOUT bounds the others) or crashes, and a new
               skipring group works afterwards (the default one is unusable from then on)
  thread-serialized  MPI initialised by mpi4py at MPI_THREAD_SERIALIZED first: the module
               serialises its MPI calls; the async test
  thread-funneled    MPI initialised by mpi4py at MPI_THREAD_FUNNELED first: importing
               skipring_torch raises, naming the level and what it needs

Every rank computes every rank's inputs (a pure function of rank, case and element index), so
references need no communication. Inputs are small integers or dyadic fractions, so results are
exact whatever the summation order. Exits 77 with the reason when torch or the extension is
missing. Prints "torch_backend_test MODE: K checks passed" on rank 0.
"""
import os
import sys
import traceback

SKIP = 77

try:
    import torch
    import torch.distributed as dist
except ImportError as e:
    print(f"SKIPPED: {sys.executable} cannot import torch ({e}); Debian: python3-torch")
    sys.exit(SKIP)
MODE = sys.argv[1] if len(sys.argv) > 1 else "collectives"
if MODE.startswith("thread-"):
    # MPI initialised by mpi4py first, at a lower thread level than skipring_torch asks for.
    try:
        import mpi4py
    except ImportError as e:
        print(f"SKIPPED: {sys.executable} has no mpi4py ({e}); Debian: python3-mpi4py")
        sys.exit(SKIP)
    mpi4py.rc.thread_level = MODE[len("thread-"):]
    from mpi4py import MPI  # noqa: F401,E402
try:
    import skipring_torch
except RuntimeError as e:
    if MODE == "thread-funneled" and "MPI_THREAD_FUNNELED" in str(e) and "MPI_THREAD_MULTIPLE" in str(e):
        print(f"torch_backend_test thread-funneled: import raised as it should: {e}", flush=True)
        sys.exit(0)
    raise
except ImportError as e:
    print(f"SKIPPED: skipring_torch is not importable ({e}); build with libtorch-dev and "
          f"pybind11-dev, and put build/python on PYTHONPATH")
    sys.exit(SKIP)

torch.set_num_threads(1)

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
COMPLEX = [torch.complex64, torch.complex128]
SIZES = [0, 1, 7, 1000, 70000]
R = dist.ReduceOp

checks = 0


def fail(msg):
    print(f"rank {dist.get_rank()}: FAIL: {msg}", file=sys.stderr, flush=True)
    raise AssertionError(msg)


def expect_equal(got, want, what):
    global checks
    checks += 1
    if got.dtype != want.dtype or got.shape != want.shape:
        fail(f"{what}: got {got.dtype}{tuple(got.shape)}, want {want.dtype}{tuple(want.shape)}")
    if got.dtype.is_complex:
        same = torch.equal(torch.view_as_real(got), torch.view_as_real(want))
    elif got.dtype.is_floating_point:
        # Bitwise (NaN-free inputs): compare the bits.
        same = torch.equal(got.view(torch.int16 if got.element_size() == 2 else
                                    torch.int32 if got.element_size() == 4 else torch.int64),
                           want.view(torch.int16 if want.element_size() == 2 else
                                     torch.int32 if want.element_size() == 4 else torch.int64))
    else:
        same = torch.equal(got, want)
    if not same:
        bad = (got != want).nonzero()
        i = int(bad[0][0]) if len(bad) else -1
        fail(f"{what}: {len(bad)} of {got.numel()} elements differ; first at {i}: "
             f"got {got.reshape(-1)[i].item()}, want {want.reshape(-1)[i].item()}")


def gen(rank, n, dtype, op, case):
    """Rank `rank`'s input: exact under any summation order for `op`."""
    g = torch.Generator().manual_seed(1000003 * case + 7919 * rank + 17)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype.is_complex:
        re = torch.randint(-8, 9, (n,), generator=g).double() / 4
        im = torch.randint(-8, 9, (n,), generator=g).double() / 4
        return torch.complex(re, im).to(dtype)
    if op in (R.BAND, R.BOR, R.BXOR):
        hi = 127 if dtype == torch.int8 else 255
        return torch.randint(0, hi + 1, (n,), generator=g).to(dtype)
    if op == R.PRODUCT:
        vals = torch.tensor([1, 2, 1, 1] if dtype == torch.uint8 else [-2, -1, 1, 2])
        return vals[torch.randint(0, 4, (n,), generator=g)].to(dtype)
    if dtype == torch.uint8:
        return torch.randint(0, 17, (n,), generator=g).to(dtype)
    if dtype.is_floating_point:
        return (torch.randint(-16, 17, (n,), generator=g).double() / 4).to(dtype)
    return torch.randint(-8, 9, (n,), generator=g).to(dtype)


def reduce_ref(inputs, op, dtype, size):
    """Host reference of reducing `inputs` (one per rank) with `op`, in `dtype`."""
    if dtype == torch.bool:
        st = torch.stack(inputs)
        if op in (R.SUM, R.MAX, R.BOR):
            return st.any(0)
        if op in (R.PRODUCT, R.MIN, R.BAND):
            return st.all(0)
        if op == R.BXOR:
            return (st.sum(0) % 2).bool()
    if dtype.is_complex:
        out = torch.stack(inputs).sum(0)
        return out / size if op == R.AVG else out
    wide = torch.float64 if (dtype.is_floating_point) else torch.int64
    st = torch.stack([t.to(wide) for t in inputs])
    if op in (R.SUM, R.AVG):
        out = st.sum(0).to(dtype)
        return out.div(size) if op == R.AVG else out
    if op == R.PRODUCT:
        return st.prod(0).to(dtype)
    if op == R.MIN:
        return st.min(0).values.to(dtype)
    if op == R.MAX:
        return st.max(0).values.to(dtype)
    acc = inputs[0].clone()
    for t in inputs[1:]:
        acc = acc & t if op == R.BAND else acc | t if op == R.BOR else acc ^ t
    return acc


def ops_for(dtype):
    if dtype == torch.bool:
        return [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR]
    if dtype.is_complex:
        return [R.SUM, R.AVG]
    if dtype.is_floating_point:
        return [R.SUM, R.AVG, R.PRODUCT, R.MIN, R.MAX]
    return [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR]


def opname(op):
    return str(op).split(".")[-1]


def test_collectives(group=None, members=None):
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    case = 0
    n_allreduce = 0
    before = skipring_torch.totals()
    dtypes = FLOATS + INTS + [torch.bool] + COMPLEX
    for dtype in dtypes:
        for op in ops_for(dtype):
            for n in SIZES:
                case += 1
                ins = [gen(r, n, dtype, op, case) for r in range(size)]
                want = reduce_ref(ins, op, dtype, size)
                t = ins[rank].clone()
                dist.all_reduce(t, op=op, group=group)
                n_allreduce += 1
                expect_equal(t, want, f"all_reduce {dtype} {opname(op)} n={n}")
            # reduce to every root (one size); non-roots keep their input
            n = 1000
            for root in range(size):
                case += 1
                ins = [gen(r, n, dtype, op, case) for r in range(size)]
                t = ins[rank].clone()
                groot = root if members is None else members[root]
                dist.reduce(t, dst=groot, op=op, group=group)
                want = reduce_ref(ins, op, dtype, size) if rank == root else ins[rank]
                expect_equal(t, want, f"reduce {dtype} {opname(op)} root={root}")
            # reduce-scatter, list and base forms
            if dtype.is_complex:
                continue
            for n in (0, 1, 7, 3000):
                case += 1
                ins = [gen(r, n * size, dtype, op, case) for r in range(size)]
                full = reduce_ref(ins, op, dtype, size)
                want = full[rank * n:(rank + 1) * n]
                out = torch.empty(n, dtype=dtype)
                dist.reduce_scatter(out, list(ins[rank].clone().chunk(size) if n else
                                              [torch.empty(0, dtype=dtype)] * size),
                                    op=op, group=group)
                expect_equal(out, want, f"reduce_scatter {dtype} {opname(op)} n={n}")
                out2 = torch.empty(n, dtype=dtype)
                dist._reduce_scatter_base(out2, ins[rank].clone(), op=op, group=group)
                expect_equal(out2, want, f"_reduce_scatter_base {dtype} {opname(op)} n={n}")
        # allgather (list, base), broadcast from every root: per dtype
        for n in SIZES:
            case += 1
            ins = [gen(r, n, dtype, R.SUM, case) for r in range(size)]
            outs = [torch.empty(n, dtype=dtype) for _ in range(size)]
            dist.all_gather(outs, ins[rank].clone(), group=group)
            for r in range(size):
                expect_equal(outs[r], ins[r], f"all_gather {dtype} n={n} from {r}")
            flat = torch.empty(n * size, dtype=dtype)
            dist._all_gather_base(flat, ins[rank].clone(), group=group)
            expect_equal(flat, torch.cat(ins), f"_all_gather_base {dtype} n={n}")
            for root in range(size):
                t = ins[rank].clone()
                groot = root if members is None else members[root]
                dist.broadcast(t, src=groot, group=group)
                expect_equal(t, ins[root], f"broadcast {dtype} n={n} root={root}")
    # all_reduce_coalesced: several tensors of one dtype, one call
    for dtype in (torch.float32, torch.int64):
        case += 1
        shapes = [(3, 5), (17,), (2, 2, 2), (1000,)]
        ins = [[gen(r, int(torch.tensor(s).prod()), dtype, R.SUM, case * 10 + i).reshape(s)
                for i, s in enumerate(shapes)] for r in range(size)]
        mine = [t.clone() for t in ins[rank]]
        dist.all_reduce_coalesced(mine, op=R.SUM, group=group)
        for i in range(len(shapes)):
            expect_equal(mine[i], reduce_ref([ins[r][i] for r in range(size)], R.SUM, dtype,
                                             size), f"all_reduce_coalesced {dtype} #{i}")
    # PREMUL_SUM (torch 1.13: dist._make_nccl_premul_sum)
    if hasattr(dist, "_make_nccl_premul_sum"):
        case += 1
        ins = [gen(r, 1000, torch.float32, R.SUM, case) for r in range(size)]
        t = ins[rank].clone()
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5), group=group)
        expect_equal(t, torch.stack([x.double() * 0.5 for x in ins]).sum(0).float(),
                     "all_reduce PREMUL_SUM(0.5)")
    dist.barrier(group=group)
    # skipring ran the all-reduces itself (none handed to PMPI_Allreduce).
    after = skipring_torch.totals()
    global checks
    checks += 1
    if after["calls"] - before["calls"] < n_allreduce or after["fallbacks"] != before["fallbacks"]:
        fail(f"skipring's counters: {after['calls'] - before['calls']} all-reduces run by "
             f"skipring for {n_allreduce} dist.all_reduce calls, "
             f"{after['fallbacks'] - before['fallbacks']} fallbacks")


def test_async():
    rank, size = dist.get_rank(), dist.get_world_size()
    works, tensors, wants = [], [], []
    for k in range(200):
        n = [1, 100, 5000, 40000][k % 4]
        ins = [gen(r, n, torch.float32, R.SUM, 50000 + k) for r in range(size)]
        t = ins[rank].clone()
        works.append(dist.all_reduce(t, async_op=True))
        tensors.append(t)
        wants.append(reduce_ref(ins, R.SUM, torch.float32, size))
    for k in reversed(range(200)):
        works[k].wait()
        expect_equal(tensors[k], wants[k], f"async all_reduce #{k}")
    global checks
    checks += 1
    if not all(w.is_completed() for w in works):
        fail("a waited work is not completed")
    # Issue order on one tensor: bcast from rank 0, then all-reduce (sum), then bcast from the
    # last rank, then all-reduce again: any reordering gives another value.
    t = torch.full((4096,), float(rank + 1))
    ws = [dist.broadcast(t, src=0, async_op=True), dist.all_reduce(t, async_op=True),
          dist.broadcast(t, src=size - 1, async_op=True), dist.all_reduce(t, async_op=True)]
    ws[-1].wait()
    expect_equal(t, torch.full((4096,), float(size * size)), "chained async order")
    for w in ws:
        w.wait()
    # Futures: .then runs after completion, with the result.
    t = torch.ones(1000)
    fut = dist.all_reduce(t, async_op=True).get_future()
    fut2 = fut.then(lambda f: f.value()[0] * 2)
    expect_equal(fut2.wait(), torch.full((1000,), 2.0 * size), "future.then")
    # A long queue mixed with other collectives, waited all at once by a barrier-free loop
    outs = [[torch.empty(10) for _ in range(size)] for _ in range(50)]
    ws = [dist.all_gather(outs[k], torch.full((10,), float(rank * 100 + k)), async_op=True)
          for k in range(50)]
    for k, w in enumerate(ws):
        w.wait()
        for r in range(size):
            expect_equal(outs[k][r], torch.full((10,), float(r * 100 + k)), f"async gather {k}")
    dist.barrier()


def expect_raises(fn, needle, what):
    global checks
    checks += 1
    try:
        w = fn()
        if w is not None and hasattr(w, "wait"):
            w.wait()
    except RuntimeError as e:
        if needle not in str(e):
            fail(f"{what}: the error does not name the problem ({needle!r}): {e}")
        return
    fail(f"{what}: no error raised")


def test_errors():
    rank, size = dist.get_rank(), dist.get_world_size()
    f = torch.ones(8)
    expect_raises(lambda: dist.all_reduce(f, op=R.BAND), "ReduceOp.BAND is not supported on torch.float32",
                  "BAND on float32")
    expect_raises(lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32), op=R.AVG),
                  "AVG needs a floating-point tensor", "AVG on int32")
    expect_raises(lambda: dist.all_reduce(torch.ones(4, dtype=torch.complex64), op=R.MAX),
                  "on complex tensors", "MAX on complex64 (torch's own check)")
    expect_raises(lambda: dist.all_reduce(torch.ones(4, 4).t()), "must be contiguous",
                  "non-contiguous")
    expect_raises(lambda: dist.all_gather([torch.empty(8) for _ in range(size)],
                                          torch.ones(9)), "mismatched sizes",
                  "all_gather size mismatch")
    # torch checks the dtypes of all_gather's list itself; the process group is called
    # directly here (what DDP's C++ side does) to reach the backend's own check.
    pg = dist.distributed_c10d._get_default_group()
    expect_raises(lambda: pg.allgather([[torch.empty(8, dtype=torch.float64)
                                         for _ in range(size)]], [torch.ones(8)]),
                  "mismatched dtypes", "allgather dtype mismatch (process group)")
    expect_raises(lambda: pg.allreduce([torch.ones(2), torch.ones(2)]),
                  "exactly one tensor per process", "allreduce of two tensors")
    expect_raises(lambda: dist.all_gather([torch.empty(8) for _ in range(size + 1)],
                                          torch.ones(8)), "the group has",
                  "all_gather list length")
    expect_raises(lambda: dist._all_gather_base(torch.empty(8 * size + 1), torch.ones(8)),
                  "mismatched sizes", "_all_gather_base sizes")
    expect_raises(lambda: dist.reduce_scatter(torch.empty(4), [torch.ones(5)] * size),
                  "mismatched sizes", "reduce_scatter sizes")
    expect_raises(lambda: dist._reduce_scatter_base(torch.empty(4), torch.ones(4 * size - 1)),
                  "mismatched sizes", "_reduce_scatter_base sizes")
    expect_raises(lambda: pg.allreduce_coalesced([torch.ones(2), torch.ones(2, dtype=torch.int32)]),
                  "same dtype", "all_reduce_coalesced dtypes")
    expect_raises(lambda: dist.broadcast(torch.ones(2), src=size), "outside the group",
                  "broadcast root")
    if size > 1:
        expect_raises(lambda: dist.send(torch.ones(2), dst=(rank + 1) % size),
                      "does not support send", "send")
    expect_raises(lambda: dist.all_to_all_single(torch.empty(size), torch.ones(size)),
                  "does not support", "all_to_all")
    # Ranks that disagree, with the consistency check on: every rank raises, naming each
    # rank's call, and no data moves (without the check skipring's core gets mismatched
    # messages: see docs/training.md).
    skipring_torch.set_check(True)
    n = 1000 if rank == 0 else 2000
    expect_raises(lambda: dist.all_reduce(torch.ones(n)), "the ranks called different "
                  "collectives: rank 0: ALLREDUCE torch.float32 x 1000 SUM; rank 1: ALLREDUCE "
                  "torch.float32 x 2000 SUM", "all_reduce count mismatch across ranks")
    expect_raises(lambda: dist.all_reduce(torch.ones(8, dtype=torch.float32 if rank == 0 else
                                                     torch.float64)),
                  "rank 1: ALLREDUCE torch.float64 x 8 SUM", "all_reduce dtype mismatch across ranks")
    expect_raises(lambda: dist.broadcast(torch.ones(8), src=rank % 2 if size > 1 else 0)
                  if size > 1 else (_ for _ in ()).throw(RuntimeError("root 1")),
                  "root 1", "broadcast root mismatch across ranks")
    t = torch.ones(100)
    dist.all_reduce(t)
    expect_equal(t, torch.full((100,), float(size)), "all_reduce with the check on")
    skipring_torch.set_check(False)
    # The group still works after all that.
    t = torch.ones(100)
    dist.all_reduce(t)
    expect_equal(t, torch.full((100,), float(size)), "all_reduce after the errors")


def test_mismatch():
    import time
    global checks
    rank, size = dist.get_rank(), dist.get_world_size()
    started = time.monotonic()
    raised = ""
    try:
        dist.all_reduce(torch.ones(1000 * (rank + 1)))
    except RuntimeError as e:
        raised = str(e)
    took = time.monotonic() - started
    checks += 1
    if took > 20:
        fail(f"mismatched all_reduce returned after {took:.1f} s")
    if raised and "skipring backend: allreduce failed" not in raised:
        fail(f"the error does not name the failed all-reduce: {raised}")
    if rank == 0 and raised:
        print(f"rank 0 raised: {raised}", flush=True)
    g = dist.new_group(ranks=list(range(size)), backend="skipring")
    flag = torch.tensor([1.0 if raised else 0.0])
    dist.all_reduce(flag, group=g)
    checks += 1
    if flag.item() < 1:
        fail("no rank raised for sizes that differ across ranks")
    t = torch.ones(100)
    dist.all_reduce(t, group=g)
    expect_equal(t, torch.full((100,), float(size)), "all_reduce on a new group afterwards")


def test_subgroup():
    size = dist.get_world_size()
    members = list(range(0, size, 2)) if size > 2 else [0, size - 1]
    g = dist.new_group(ranks=members, backend="skipring")
    if dist.get_rank() in members:
        test_collectives(group=g, members=members)
    dist.barrier()


def test_serialized():
    # MPI_THREAD_SERIALIZED: the module serialises its own MPI calls; the async test as is.
    from mpi4py import MPI
    global checks
    checks += 1
    if MPI.Query_thread() != MPI.THREAD_SERIALIZED:
        fail(f"thread level {MPI.Query_thread()}, expected MPI_THREAD_SERIALIZED")
    test_async()


def main():
    mode = MODE
    if mode == "thread-funneled":
        fail("import skipring_torch did not raise under MPI_THREAD_FUNNELED")
    dist.init_process_group("skipring")
    if dist.get_backend() != "skipring":
        fail(f"default backend is {dist.get_backend()}")
    try:
        {"collectives": test_collectives, "async": test_async, "errors": test_errors,
         "subgroup": test_subgroup, "mismatch": test_mismatch, "thread-serialized": test_serialized}[mode]()
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)  # the other ranks would wait in their next collective: mpirun ends them
    if dist.get_rank() == 0:
        print(f"torch_backend_test {mode}: {checks} checks passed at np {dist.get_world_size()}",
              flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
