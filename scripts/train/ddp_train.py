#!/usr/bin/python3
"""Unmodified PyTorch DDP training on torch.distributed: skipring's backend or gloo.

    mpirun -np 4 /usr/bin/python3 scripts/train/ddp_train.py --backend skipring \
        --max-steps 40 --straggler-dist exp --straggler-ms 20

`torch.nn.parallel.DistributedDataParallel(model, process_group=...)` on the chosen backend:
gradients in DDP's buckets (--bucket-cap-mb), all-reduced asynchronously by DDP's hooks while
the backward pass runs. The models:
  --model mlp       the MLP of scripts/train/dp_train.py (digits, same initial weights)
  --model resnet18  torchvision's resnet18 (10 classes) on synthetic 3x32x32 images
                    (torchvision from Debian: python3-torchvision)

Stragglers are dp_train.py's flags (--straggler-dist/-ranks/-ms, --slow-rank/--slow-ms,
--stall-rank/--stall-every/--stall-ms), drawn the same way from (seed, rank, step); the sleep
comes after the forward pass and before backward(), so the late rank is late for every bucket.

--variants skipring,ring,gloo runs the variants in turn, interleaved, in one job (the default
group is skipring's, gloo is a dist.new_group(backend="gloo") over the same ranks; "ring" is
skipring's plain ring: skip-ahead off); each variant starts from the same weights and data.
--no-sync-every K accumulates gradients over K micro-steps with DDP's no_sync().
Variant `nocomm` is DDP whose buckets are never reduced (the compute alone; no hash check), and
--timeline all-reduces every bucket through a Python comm hook that records, per step and bucket,
when each rank's bucket was ready and when its all-reduce completed (torch_bench.py ddp-floor).

Checks: every --eval-every steps and at the end the ranks compare a SHA-256 of their
parameters (an all_gather on the variant's group); a difference exits 4 naming the hashes.
Each check also scores the test set (accuracy, loss) against the training time so far
(evaluations and checks left out): `evals`, `time_to_target_s` (--target-acc).
Rank 0 prints one `ddp-result: {json}` line per variant (time per step, losses, hashes, the
skipring counters' change). Run with Debian's /usr/bin/python3; skipring_torch must be
importable (PYTHONPATH=build/python).
"""
import argparse
import hashlib
import json
import os
import sys
import time

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dp_train  # noqa: E402  (the MLP's data, initial weights and straggler schedule)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="skipring", help="default variant (skipring or gloo)")
    p.add_argument("--variants", default="",
                   help="comma-separated: skipring, ring (skipring, skip-ahead off), gloo, "
                        "nocomm (DDP whose buckets are not reduced: every rank keeps its own "
                        "gradients; the compute-only floor of a step, no hash check)")
    p.add_argument("--model", choices=("mlp", "resnet18"), default="mlp")
    p.add_argument("--hidden", default="1024,1024")
    p.add_argument("--batch", type=int, default=8, help="samples per rank per step")
    p.add_argument("--max-steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=2, help="steps left out of the timing")
    p.add_argument("--eval-every", type=int, default=0,
                   help="hash check and test accuracy every K steps (0: at the end only)")
    p.add_argument("--target-acc", type=float, default=0.9,
                   help="time_to_target_s: training time of the first evaluation >= this")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--find-unused-parameters", action="store_true")
    p.add_argument("--no-sync-every", type=int, default=1,
                   help="K > 1: K-1 micro-steps under no_sync(), then one that all-reduces")
    dp_train.add_straggler_args(p)
    p.add_argument("--json", default="", help="rank 0 appends one JSON line per variant")
    p.add_argument("--timeline", action="store_true",
                   help="all-reduce each bucket through a Python comm hook that notes, per step "
                        "and bucket, when each rank's bucket was ready and when its all-reduce "
                        "completed (CLOCK_MONOTONIC, the same clock on every emulated host): "
                        "`timeline` in the result, for the floor of torch_bench.py ddp-floor. "
                        "The hook costs a little against DDP's built-in all-reduce")
    a = p.parse_args(argv)
    a.hidden_sizes = [int(x) for x in a.hidden.split(",") if x.strip()]
    a.straggler_rank_list = [int(x) for x in a.straggler_ranks.split(",") if x.strip()]
    a.variant_list = [v for v in (a.variants or a.backend).split(",") if v]
    for v in a.variant_list:
        if v not in ("skipring", "ring", "gloo", "nocomm"):
            p.error(f"unknown variant {v!r} (skipring, ring, gloo, nocomm)")
    if a.no_sync_every < 1 or a.max_steps < 1 or a.batch < 1:
        p.error("--no-sync-every, --max-steps and --batch must be >= 1")
    if a.stall_rank >= 0 and a.stall_every < 1:
        p.error("--stall-rank needs --stall-every K >= 1")
    return a


def build_model(a, dtrain):
    torch.manual_seed(a.seed)
    if a.model == "mlp":
        sizes = [dtrain[0].shape[1]] + a.hidden_sizes + [10]
        return dp_train.TorchMLP(sizes, a.seed, a.lr, a.momentum).model
    import torchvision
    return torchvision.models.resnet18(num_classes=10)


def make_data(a, size):
    if a.model == "mlp":
        xtr, ytr, xte, yte = dp_train.load_data(a.seed)
        return (xtr, ytr), (xte, yte)
    g = np.random.default_rng([a.seed, 0x5EED])
    n = max(256, a.batch * size * 8)
    # Synthetic but learnable: the class sets the mean colour of the image.
    y = g.integers(0, 10, n).astype(np.int64)
    x = (g.standard_normal((n, 3, 32, 32)) * 0.5 + (y[:, None, None, None] / 5.0 - 1.0))
    return (x.astype(np.float32), y), (x[:128].astype(np.float32), y[:128])


def param_hash(model):
    # Parameters only: DDP broadcasts buffers (batch-norm statistics) from rank 0 at the start of
    # each forward pass, so after a step every rank's buffers hold its own batch's statistics.
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def check_hashes(model, group, tag):
    h = param_hash(model)
    mine = torch.tensor(list(bytes.fromhex(h)), dtype=torch.uint8)
    outs = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(outs, mine, group=group)
    hs = [bytes(o.tolist()).hex() for o in outs]
    if len(set(hs)) != 1:
        print(f"ddp_train: parameters differ across ranks after {tag}: {hs}", file=sys.stderr,
              flush=True)
        os._exit(4)
    return h


def run_variant(a, variant, group, rank, size, data):
    import skipring_torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    if variant == "ring":  # skipring's plain ring: the ring algorithm, skip-ahead off
        skipring_torch.set_algo("ring")
        skipring_torch.set_skip(False)
    elif variant == "skipring":  # SKIPRING_ALGO's choice (auto unless set), skip-ahead on
        skipring_torch.set_algo("")
        skipring_torch.set_skip(True)
    (xtr, ytr), (xte, yte) = data
    model = build_model(a, (xtr, ytr))
    ddp = DDP(model, process_group=group, bucket_cap_mb=a.bucket_cap_mb,
              find_unused_parameters=a.find_unused_parameters)
    cur_step = [0]  # the step the hooks note (set by the loop below)
    if variant == "nocomm":
        # Buckets come back unreduced: the step without any all-reduce (a lower bound for every
        # variant's step: the same CPU work on the same cores, nothing to wait for). Ranks'
        # parameters drift apart, so no hash check.
        def keep_local(_state, bucket):
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut
        ddp.register_comm_hook(None, keep_local)
    elif a.timeline:
        marks = []  # (step, bucket index, bytes, ready, done) on this rank

        def timed_allreduce(_state, bucket):
            t_ready = time.monotonic()
            buf = bucket.buffer()
            buf.div_(size)  # as DDP's own all-reduce: the mean of the gradients
            fut = dist.all_reduce(buf, group=group, async_op=True).get_future()
            rec = [cur_step[0], bucket.index(), buf.numel() * buf.element_size(), t_ready]

            def done(f):
                marks.append(rec + [time.monotonic()])
                return f.value()[0]
            return fut.then(done)
        ddp.register_comm_hook(None, timed_allreduce)
    checked = variant != "nocomm"
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=a.momentum)
    lossf = torch.nn.CrossEntropyLoss()
    strag = dp_train.Stragglers(a, rank)
    per_step = size * a.batch
    steps_per_epoch = max(1, len(ytr) // per_step)
    xte_t, yte_t = torch.from_numpy(np.ascontiguousarray(xte)), torch.from_numpy(yte)

    def evaluate():
        # Every rank holds the same parameters: each scores the whole test set, no traffic.
        ddp.module.eval()
        with torch.no_grad():
            logits = ddp.module(xte_t)
            acc = float((logits.argmax(dim=1) == yte_t).float().mean())
            tloss = float(lossf(logits, yte_t))
        ddp.module.train()
        return acc, tloss

    hashes = [check_hashes(ddp.module, group, "init")]  # equal: DDP broadcast rank 0's
    acc0, tl0 = evaluate()
    evals = [{"step": 0, "time_s": 0.0, "acc": acc0, "loss": tl0}]
    train_s = 0.0  # training time: evaluations and hash checks left out
    before = skipring_torch.totals()
    losses, step_s = [], []
    dist.barrier(group=group)
    t_start = time.perf_counter()
    t_seg = t_start
    micro = 0
    for step in range(a.max_steps):
        cur_step[0] = step
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_acc = 0.0
        for m in range(a.no_sync_every):
            ep, s = divmod(micro, steps_per_epoch)
            perm = np.random.default_rng([a.seed, 0xE90C, ep]).permutation(len(ytr))
            base = s * per_step
            idx = perm[base + rank * a.batch: base + (rank + 1) * a.batch]
            micro += 1
            x, y = torch.from_numpy(xtr[idx]), torch.from_numpy(ytr[idx])
            last = m == a.no_sync_every - 1
            ctx = ddp.no_sync() if not last else _null()
            with ctx:
                loss = lossf(ddp(x), y) / a.no_sync_every
                d = strag.delay_s(step) if last else 0.0
                if d > 0:
                    time.sleep(d)  # a compute straggler: late for every bucket of backward
                loss.backward()
            loss_acc += float(loss.item())
        opt.step()
        step_s.append(time.perf_counter() - t0)
        losses.append(loss_acc)
        if (a.eval_every and (step + 1) % a.eval_every == 0) or step + 1 == a.max_steps:
            train_s += time.perf_counter() - t_seg
            if checked:
                hashes.append(check_hashes(ddp.module, group, f"step {step + 1}"))
            acc, tl = evaluate()
            evals.append({"step": step + 1, "time_s": train_s, "acc": acc, "loss": tl})
            t_seg = time.perf_counter()
    wall = time.perf_counter() - t_start
    after = skipring_torch.totals()
    # Mean training loss over all ranks (a gloo/skipring all-reduce outside the timing).
    lt = torch.tensor([float(np.mean(losses[:5])), float(np.mean(losses[-5:]))],
                      dtype=torch.float64)
    dist.all_reduce(lt, group=group)
    lt /= size
    step_t = torch.tensor(step_s[a.warmup:] if len(step_s) > a.warmup else step_s,
                          dtype=torch.float64)
    # Per step, the slowest rank's time is the step's time.
    dist.all_reduce(step_t, op=dist.ReduceOp.MAX, group=group)
    delta = {k: after[k] - before[k] for k in ("calls", "skips", "late", "bytes")}
    res = {"variant": variant, "model": a.model, "np": size, "steps": a.max_steps,
           "bucket_cap_mb": a.bucket_cap_mb, "no_sync_every": a.no_sync_every,
           "step_ms_median": 1e3 * float(step_t.median()), "step_ms_mean": 1e3 * float(step_t.mean()),
           "wall_s": wall, "loss_first5": float(lt[0]), "loss_last5": float(lt[1]),
           "final_hash": hashes[-1], "hashes": hashes, "skipring_delta_rank": delta,
           "train_s": train_s, "evals": evals, "final_acc": evals[-1]["acc"],
           "time_to_target_s": next((e["time_s"] for e in evals if e["acc"] >= a.target_acc),
                                    None), "target_acc": a.target_acc}
    if a.timeline and checked:
        # Every rank's marks to every rank.
        alls = [None] * size
        dist.all_gather_object(alls, marks, group=group)
        res["timeline"] = alls
        res["step_ms_all"] = [1e3 * float(x) for x in step_t]
    del ddp
    return res


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main(argv):
    a = parse_args(argv)
    torch.set_num_threads(1)
    import skipring_torch  # noqa: F401  (registers "skipring", fills RANK/MASTER_ADDR from MPI)
    dist.init_process_group("skipring")
    rank, size = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo") if "gloo" in a.variant_list else None
    data = make_data(a, size)
    results = []
    for v in a.variant_list:
        group = gloo if v == "gloo" else dist.group.WORLD
        res = run_variant(a, v, group, rank, size, data)
        # Every rank's counters: skips and late pieces anywhere.
        d = res["skipring_delta_rank"]
        c = torch.tensor([d["calls"], d["skips"], d["late"]], dtype=torch.int64)
        allc = [torch.empty_like(c) for _ in range(size)]
        dist.all_gather(allc, c)
        res["skipring_calls"] = [int(x[0]) for x in allc]
        res["skipring_skips"] = [int(x[1]) for x in allc]
        res["skipring_late"] = [int(x[2]) for x in allc]
        results.append(res)
        if rank == 0:
            line = json.dumps(res)
            print("ddp-result: " + line, flush=True)
            if a.json:
                with open(a.json, "a") as f:
                    f.write(line + "\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
