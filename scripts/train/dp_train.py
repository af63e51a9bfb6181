#!/usr/bin/python3
"""Data-parallel training through MPI_Allreduce (mpi4py), with injected compute stragglers.

Every rank holds the same model (same seed), trains on its own shard of scikit-learn's bundled
digits set (1797 8x8 images, no download) and averages its gradients with the other ranks'
every step through `comm.Allreduce` (mpi4py's binding of MPI_Allreduce): unmodified, so
`LD_PRELOAD=libskipring_pmpi.so` gives it skipring's all-reduce, and without the preload it is
the MPI library's own.

  --framework numpy  an MLP written with numpy (float32), SGD with momentum
  --framework torch  the same MLP (same initial weights) as a torch.nn.Sequential; its gradients are flattened into
                     one float32 vector and all-reduced through mpi4py (Debian's PyTorch 1.13
                     has no MPI backend in torch.distributed)

Stragglers (the rank computes slowly, then arrives late at the all-reduce: the sleep comes
after the backward pass and before the all-reduce, which itself is not slowed):
  --straggler-dist exp|pareto|lognormal|const  --straggler-ranks 1,2  --straggler-ms MEAN
      a sleep per step on the listed ranks drawn from the distribution (pareto: shape
      --pareto-shape, scaled to the mean; lognormal: median MEAN, --lognormal-sigma)
  --slow-rank R --slow-ms D        one persistently slow rank: D ms every step
  --stall-rank R --stall-every K --stall-ms D   rank R stalls D ms every K-th step
Draws depend only on (--seed, rank, step): the same seed gives the same schedule in every
variant (skipring, plain ring, MPI's all-reduce) and both frameworks.

Bucketing (--bucket-mib B): the gradient vector goes in several all-reduces of about B MiB
each, last layer first, as PyTorch's DDP does with its buckets; --late-at first|spread puts a
straggler's sleep before the first bucket or spreads it evenly before every bucket (a slow
GPU is late for each bucket of its backward pass).

Checks: after every epoch the ranks compare a SHA-256 of their parameters (MPI_Allgather, not an
all-reduce); any difference aborts the job with a message. Rank 0 prints one line
`train-result: {json}` at the end (and writes it to --json): per-epoch times, test accuracy and
loss, the parameter hash, and per-step all-reduce times of every rank.
"""
import argparse
import hashlib
import json
import os
import sys
import time

# One BLAS thread per rank: the ranks share the cores (set before numpy is imported).
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402


def add_straggler_args(p):
    """The straggler flags (Stragglers reads them); ddp_train.py takes the same."""
    p.add_argument("--straggler-dist", choices=("none", "exp", "pareto", "lognormal", "const"),
                   default="none")
    p.add_argument("--straggler-ranks", default="1")
    p.add_argument("--straggler-ms", type=float, default=5.0)
    p.add_argument("--pareto-shape", type=float, default=1.5)
    p.add_argument("--lognormal-sigma", type=float, default=1.0)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=0.0)
    p.add_argument("--stall-rank", type=int, default=-1)
    p.add_argument("--stall-every", type=int, default=0)
    p.add_argument("--stall-ms", type=float, default=0.0)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--framework", choices=("numpy", "torch"), default="numpy")
    p.add_argument("--hidden", default="1024,1024",
                   help="hidden layer widths, comma separated (default 1024,1024: 4.5 MiB "
                   "of float32 gradients)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--max-steps", type=int, default=0,
                   help="stop after this many steps in all (0: run every epoch)")
    p.add_argument("--batch", type=int, default=8, help="samples per rank per step")
    p.add_argument("--eval-every", type=int, default=0,
                   help="evaluate (test accuracy, loss, parameter hash check) every this many "
                   "steps (0: every epoch) and after the last step")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--target-acc", type=float, default=0.95,
                   help="test accuracy whose first crossing is reported as time to target")
    p.add_argument("--bucket-mib", type=float, default=0.0,
                   help="all-reduce the gradients in buckets of about this many MiB (0: one "
                   "all-reduce per step)")
    p.add_argument("--late-at", choices=("first", "spread"), default="first")
    add_straggler_args(p)
    p.add_argument("--warmup-allreduces", type=int, default=1,
                   help="all-reduces of the gradients' size (bucket by bucket, on a scratch "
                        "buffer of zeros) before the timer starts, as every MPI benchmark warms "
                        "up: they open the connections (every variant) and run skipring's "
                        "one-time cost-model probe (the first auto all-reduce of a communicator). "
                        "Their time is reported as warmup_s (0: none, the epoch includes it)")
    p.add_argument("--json", default="", help="rank 0 writes the result here")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    try:
        a.hidden_sizes = [int(x) for x in a.hidden.split(",") if x.strip()]
        a.straggler_rank_list = [int(x) for x in a.straggler_ranks.split(",") if x.strip()]
    except ValueError as e:
        p.error(f"--hidden and --straggler-ranks take comma-separated integers: {e}")
    if not a.hidden_sizes or min(a.hidden_sizes) < 1:
        p.error("--hidden needs at least one width >= 1")
    for name in ("epochs", "batch"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be >= 1")
    for name in ("straggler_ms", "slow_ms", "stall_ms", "bucket_mib", "max_steps", "eval_every"):
        if getattr(a, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be >= 0")
    if a.pareto_shape <= 1:
        p.error("--pareto-shape must be > 1 (the mean is infinite otherwise)")
    if a.stall_rank >= 0 and a.stall_every < 1:
        p.error("--stall-rank needs --stall-every K >= 1")
    return a


class Stragglers:
    """The per-step sleep of one rank: a pure function of (seed, rank, step)."""

    def __init__(self, a, rank):
        self.a = a
        self.rank = rank

    def delay_s(self, step):
        a = self.a
        ms = 0.0
        if a.straggler_dist != "none" and self.rank in a.straggler_rank_list:
            rng = np.random.default_rng([a.seed, 0x57A6, self.rank, step])
            m = a.straggler_ms
            if a.straggler_dist == "exp":
                ms += rng.exponential(m)
            elif a.straggler_dist == "pareto":
                # Lomax (Pareto II) + 1 is Pareto I with x_m = 1, mean shape/(shape-1).
                k = a.pareto_shape
                ms += m * (rng.pareto(k) + 1.0) * (k - 1.0) / k
            elif a.straggler_dist == "lognormal":
                ms += m * rng.lognormal(0.0, a.lognormal_sigma)
            else:
                ms += m
        if self.rank == a.slow_rank:
            ms += a.slow_ms
        if self.rank == a.stall_rank and (step + 1) % a.stall_every == 0:
            ms += a.stall_ms
        return ms / 1e3


def load_data(seed):
    from sklearn.datasets import load_digits
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    perm = np.random.default_rng([seed, 0xDA7A]).permutation(len(y))
    n_test = 360
    te, tr = perm[:n_test], perm[n_test:]
    return x[tr], y[tr], x[te], y[te]


class NumpyMLP:
    def __init__(self, sizes, seed):
        rng = np.random.default_rng([seed, 0x11])
        self.params = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            w = (rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(np.float32)
            self.params += [w, np.zeros(fan_out, np.float32)]
        self.n = sum(p.size for p in self.params)
        self.grad = np.zeros(self.n + 1, np.float32)  # + the batch loss
        self.vel = [np.zeros_like(p) for p in self.params]
        self.views = []
        o = 0
        for p in self.params:
            self.views.append(self.grad[o:o + p.size].reshape(p.shape))
            o += p.size

    def forward(self, x):
        acts = [x]
        h = x
        layers = len(self.params) // 2
        for i in range(layers):
            h = h @ self.params[2 * i] + self.params[2 * i + 1]
            if i < layers - 1:
                h = np.maximum(h, 0)
            acts.append(h)
        return acts

    @staticmethod
    def softmax_xent(logits, y):
        z = logits - logits.max(axis=1, keepdims=True)
        e = np.exp(z)
        p = e / e.sum(axis=1, keepdims=True)
        loss = -np.log(p[np.arange(len(y)), y] + 1e-12).mean()
        return p, float(loss)

    def compute_grad(self, x, y):
        """Fills self.grad with this rank's mean gradient and the batch loss."""
        acts = self.forward(x)
        p, loss = self.softmax_xent(acts[-1], y)
        d = p
        d[np.arange(len(y)), y] -= 1.0
        d /= len(y)
        layers = len(self.params) // 2
        for i in reversed(range(layers)):
            self.views[2 * i][...] = acts[i].T @ d
            self.views[2 * i + 1][...] = d.sum(axis=0)
            if i > 0:
                d = (d @ self.params[2 * i].T) * (acts[i] > 0)
        self.grad[-1] = loss

    def step(self, lr, mom, scale):
        for p, g, v in zip(self.params, self.views, self.vel):
            v *= mom
            v += g * np.float32(scale)
            p -= np.float32(lr) * v

    def evaluate(self, x, y):
        p, loss = self.softmax_xent(self.forward(x)[-1], y)
        return float((p.argmax(axis=1) == y).mean()), loss

    def param_bytes(self):
        return b"".join(p.tobytes() for p in self.params)


class TorchMLP:
    def __init__(self, sizes, seed, lr, mom):
        import torch
        self.torch = torch
        torch.set_num_threads(1)
        torch.manual_seed(seed)
        mods = []
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            mods.append(torch.nn.Linear(fan_in, fan_out))
            if i < len(sizes) - 2:
                mods.append(torch.nn.ReLU())
        self.model = torch.nn.Sequential(*mods)
        # The numpy MLP's initial weights (He normal, same seed): both frameworks start alike.
        init = NumpyMLP(sizes, seed).params
        with torch.no_grad():
            for lin, w, b in zip([m for m in mods if isinstance(m, torch.nn.Linear)],
                                 init[0::2], init[1::2]):
                lin.weight.copy_(torch.from_numpy(np.ascontiguousarray(w.T)))
                lin.bias.copy_(torch.from_numpy(b))
        self.params = list(self.model.parameters())
        self.n = sum(p.numel() for p in self.params)
        self.flat = torch.zeros(self.n + 1, dtype=torch.float32)
        self.grad = self.flat.numpy()  # shares memory with self.flat
        self.opt = torch.optim.SGD(self.params, lr=lr, momentum=mom)
        self.lossf = torch.nn.CrossEntropyLoss()

    def compute_grad(self, x, y):
        torch = self.torch
        self.opt.zero_grad(set_to_none=False)
        loss = self.lossf(self.model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        o = 0
        for p in self.params:  # flatten: one contiguous float32 vector for MPI
            k = p.numel()
            self.flat[o:o + k].copy_(p.grad.reshape(-1))
            o += k
        self.grad[-1] = float(loss.item())

    def step(self, lr, mom, scale):
        o = 0
        for p in self.params:
            k = p.numel()
            p.grad.copy_(self.flat[o:o + k].view_as(p.grad))
            p.grad.mul_(scale)
            o += k
        self.opt.step()

    def evaluate(self, x, y):
        torch = self.torch
        with torch.no_grad():
            logits = self.model(torch.from_numpy(x))
            loss = float(self.lossf(logits, torch.from_numpy(y)).item())
            acc = float((logits.argmax(dim=1).numpy() == y).mean())
        return acc, loss

    def param_bytes(self):
        return b"".join(p.detach().numpy().tobytes() for p in self.params)


def buckets_of(n_total, bucket_elems):
    """[lo, hi) ranges covering 0..n_total, last elements first (DDP's reverse order)."""
    if bucket_elems <= 0 or bucket_elems >= n_total:
        return [(0, n_total)]
    out = []
    hi = n_total
    while hi > 0:
        lo = max(0, hi - bucket_elems)
        out.append((lo, hi))
        hi = lo
    return out


def pct(v, q):
    return float(np.percentile(np.asarray(v), q)) if len(v) else 0.0


def main(argv):
    a = parse_args(argv)
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()

    xtr, ytr, xte, yte = load_data(a.seed)
    sizes = [xtr.shape[1]] + a.hidden_sizes + [10]
    if a.framework == "torch":
        try:
            model = TorchMLP(sizes, a.seed, a.lr, a.momentum)
        except ImportError as e:
            if rank == 0:
                print(f"dp_train: --framework torch needs PyTorch for this python "
                      f"({sys.executable}): {e}", file=sys.stderr)
            comm.Abort(3)
    else:
        model = NumpyMLP(sizes, a.seed)
    grad = model.grad
    n_grad = grad.size
    bucket_elems = int(a.bucket_mib * 1024 * 1024 / 4) if a.bucket_mib > 0 else 0
    buckets = buckets_of(n_grad, bucket_elems)
    strag = Stragglers(a, rank)
    steps_per_epoch = len(ytr) // (size * a.batch)
    if steps_per_epoch < 1:
        if rank == 0:
            print(f"dp_train: {len(ytr)} training samples are too few for {size} ranks x "
                  f"batch {a.batch}", file=sys.stderr)
        comm.Abort(2)

    my_hashes = []

    def check_hash(tag):
        h = hashlib.sha256(model.param_bytes()).hexdigest()[:16]
        my_hashes.append(h)
        hs = comm.allgather(h)
        if len(set(hs)) != 1:
            print(f"dp_train: parameters differ across ranks after {tag}: {hs}", file=sys.stderr,
                  flush=True)
            comm.Abort(4)
        return h

    # Evaluation: each rank scores its share of the test set, the counts meet by allgather
    # (not an all-reduce: the report counts only the training's all-reduces).
    te_lo = rank * len(yte) // size
    te_hi = (rank + 1) * len(yte) // size

    def evaluate():
        acc, loss = model.evaluate(xte[te_lo:te_hi], yte[te_lo:te_hi])
        parts = comm.allgather((acc * (te_hi - te_lo), loss * (te_hi - te_lo)))
        return sum(c for c, _ in parts) / len(yte), sum(v for _, v in parts) / len(yte)

    total_steps = a.epochs * steps_per_epoch
    if a.max_steps:
        total_steps = min(total_steps, a.max_steps)
    eval_every = a.eval_every or steps_per_epoch
    acc0, loss0 = evaluate()
    evals = [{"step": 0, "epoch": 0.0, "time_s": 0.0, "acc": acc0, "loss": loss0,
              "train_loss": None, "hash": check_hash("init")}]
    ar_s, step_s, compute_s, sleep_s, losses = [], [], [], [], []
    scratch = np.zeros_like(grad)
    comm.Barrier()
    tw = time.perf_counter()
    for _ in range(a.warmup_allreduces):
        for lo, hi in buckets:
            comm.Allreduce(MPI.IN_PLACE, scratch[lo:hi], op=MPI.SUM)
    warmup_s = max(comm.allgather(time.perf_counter() - tw))
    del scratch
    comm.Barrier()
    t_start = time.perf_counter()
    train_time = 0.0  # excludes evaluations and hash checks
    t_seg = time.perf_counter()
    perm = None
    for step in range(total_steps):
        ep, s = divmod(step, steps_per_epoch)
        if s == 0:
            perm = np.random.default_rng([a.seed, 0xE90C, ep]).permutation(len(ytr))
        t0 = time.perf_counter()
        base = s * size * a.batch
        idx = perm[base + rank * a.batch: base + (rank + 1) * a.batch]
        model.compute_grad(xtr[idx], ytr[idx])
        t1 = time.perf_counter()
        d = strag.delay_s(step)
        t_ar = 0.0
        for bi, (lo, hi) in enumerate(buckets):
            if d > 0 and (a.late_at == "spread" or bi == 0):
                time.sleep(d / len(buckets) if a.late_at == "spread" else d)
            tb = time.perf_counter()
            comm.Allreduce(MPI.IN_PLACE, grad[lo:hi], op=MPI.SUM)
            t_ar += time.perf_counter() - tb
        model.step(a.lr, a.momentum, 1.0 / size)
        t3 = time.perf_counter()
        losses.append(float(grad[-1]) / size)
        ar_s.append(t_ar)
        compute_s.append(t1 - t0)
        sleep_s.append(d)
        step_s.append(t3 - t0)
        if (step + 1) % eval_every == 0 or step + 1 == total_steps:
            train_time += time.perf_counter() - t_seg
            acc, loss = evaluate()
            tl = float(np.mean(losses[-eval_every:]))
            evals.append({"step": step + 1, "epoch": (step + 1) / steps_per_epoch,
                          "time_s": train_time, "acc": acc, "loss": loss, "train_loss": tl,
                          "hash": check_hash(f"step {step + 1}")})
            if rank == 0 and not a.quiet:
                print(f"dp_train: step {step + 1} epoch {(step + 1) / steps_per_epoch:.2f} acc "
                      f"{acc:.4f} loss {loss:.4f} train_loss {tl:.4f} time {train_time:.2f}s",
                      flush=True)
            t_seg = time.perf_counter()
    wall = time.perf_counter() - t_start
    all_ar = comm.gather(ar_s, root=0)
    all_step = comm.gather(step_s, root=0)
    all_compute = comm.gather(compute_s, root=0)
    all_sleep = comm.gather(sleep_s, root=0)
    all_hashes = comm.gather(my_hashes, root=0)
    if rank == 0:
        # Per step, the slowest rank's all-reduce time (what the step waited for) is what the
        # ranks without a sleep see; straggler ranks see less (they arrive last).
        ar_max = np.max(np.asarray(all_ar), axis=0)
        tta = next((e["time_s"] for e in evals if e["acc"] >= a.target_acc), None)
        res = {
            "framework": a.framework, "np": size, "seed": a.seed, "steps": total_steps,
            "steps_per_epoch": steps_per_epoch,
            "grad_bytes": int(n_grad * 4), "buckets": len(buckets),
            "wall_s": wall, "train_s": train_time, "warmup_s": warmup_s,
            # An epoch's training time: steps_per_epoch steps at the mean step time.
            "epoch_s": train_time / total_steps * steps_per_epoch,
            "ar_ms_p50": 1e3 * pct(ar_max, 50), "ar_ms_p99": 1e3 * pct(ar_max, 99),
            "ar_share": float(np.sum(np.asarray(all_ar)) / np.sum(np.asarray(all_step))),
            "compute_ms_p50": 1e3 * pct(np.asarray(all_compute).ravel(), 50),
            "sleep_s_total": [float(np.sum(v)) for v in all_sleep],
            "schedule_hash": hashlib.sha256(np.asarray(all_sleep).tobytes()).hexdigest()[:16],
            "time_to_target_s": tta, "target_acc": a.target_acc,
            "final_acc": evals[-1]["acc"], "final_loss": evals[-1]["loss"],
            "final_hash": evals[-1]["hash"], "evals": evals, "rank_hashes": all_hashes,
            "ar_s": all_ar, "sleep_s": all_sleep,
        }
        line = json.dumps(res)
        if a.json:
            with open(a.json, "w") as f:
                f.write(line + "\n")
        short = {k: v for k, v in res.items() if k not in ("ar_s", "evals", "rank_hashes")}
        print("train-result: " + json.dumps(short), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
