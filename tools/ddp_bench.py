#!/usr/bin/python3
"""PyTorch DistributedDataParallel (gloo) on the job `pstrain bench-train` runs, as a peer
measured in the same run (issue 39, point 7).

The same job as pstrain's sync workers and all-reduce ranks: the MLP 784-256-128-10 with ReLU,
Fashion-MNIST from Debian's dataset-fashion-mnist (pixels / 255), each rank the contiguous
shard pstrain gives worker `rank` (common/shard.h: the first total % N shards one sample
larger), every rank the smallest shard's number of full batches per epoch, shuffled each epoch,
the per-worker batch, softmax cross-entropy averaged over the batch and DDP's gradient mean
over the ranks (so the step is the mean over the global batch, as pstrain's 1/(b x N) loss
scale makes it), and Adam (lr 1e-3 unless told). Rank 0 evaluates the test set after each
epoch, outside the timed span, as pstrain does.

samples/s counts what pstrain counts: steps x batch x ranks over the training time (from the
first step to the last, evaluations left out). The initial weights are PyTorch's own
(identical on every rank: the seed, and DDP broadcasts rank 0's), so accuracies compare as
jobs do, not bit for bit.

Runs under Debian's /usr/bin/python3 with python3-torch (1.13); where torch does not import it
prints one line and exits 3, which `pstrain bench-train` reports as "skipped".
"""
import argparse
import gzip
import json
import os
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--max-steps", type=int, default=0, help="stop each epoch after this many steps (0: all)")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--out", required=True, help="summary JSON written by rank 0")
    p.add_argument("--port", type=int, default=0, help="rendezvous port on 127.0.0.1 (0: a free one)")
    a = p.parse_args(argv)
    if not 1 <= a.workers <= 64:
        p.error("--workers must be in 1..64")
    if not 1 <= a.batch_size <= 65536 or not 1 <= a.epochs <= 1000 or not 1 <= a.threads <= 256:
        p.error("--batch-size, --epochs or --threads out of range")
    if not 0 < a.lr < 10:
        p.error("--lr must be in (0, 10)")
    return a


def idx_file(path, offset):
    import numpy as np
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def load(data_dir, split):
    import numpy as np
    import torch
    x = idx_file(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"), 16)
    y = idx_file(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"), 8)
    x = torch.from_numpy(x.reshape(-1, 784).astype(np.float32) / np.float32(255.0))
    return x, torch.from_numpy(y.astype(np.int64))


def shard_range(total, index, count):
    """common/shard.h's pst_data_shard_range."""
    base, extra = divmod(total, count)
    begin = index * base + min(index, extra)
    return begin, begin + base + (1 if index < extra else 0)


def rank_main(rank, a, port):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=a.workers)
    x, y = load(a.data, "train")
    tx, ty = load(a.data, "t10k")
    b, e = shard_range(len(x), rank, a.workers)
    x, y = x[b:e].contiguous(), y[b:e].contiguous()
    # common/shard.h's pst_steps_per_epoch: the smallest shard's full batches.
    steps = (60000 // a.workers) // a.batch_size
    if a.max_steps > 0:
        steps = min(steps, a.max_steps)
    if steps <= 0:
        raise SystemExit(f"ddp_bench: a shard of {len(x)} samples holds no batch of {a.batch_size}")

    torch.manual_seed(a.seed)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                          nn.Linear(128, 10))
    ddp = DDP(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=a.lr)
    gen = torch.Generator()
    train_s = 0.0
    accuracy = loss_sum = 0.0
    for epoch in range(a.epochs):
        gen.manual_seed(a.seed * 1000003 + epoch * 131 + rank)
        order = torch.randperm(len(x), generator=gen)[: steps * a.batch_size]
        dist.barrier()
        t0 = time.perf_counter()
        for s in range(steps):
            idx = order[s * a.batch_size:(s + 1) * a.batch_size]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(ddp(x[idx]), y[idx])
            loss.backward()
            opt.step()
        dist.barrier()
        train_s += time.perf_counter() - t0
        if rank == 0:
            with torch.no_grad():
                out = model(tx)
                accuracy = (out.argmax(1) == ty).float().mean().item()
                loss_sum = F.cross_entropy(out, ty).item()
        dist.barrier()
    if rank == 0:
        samples = steps * a.batch_size * a.workers * a.epochs
        summary = {
            "event": "summary", "peer": "pytorch-ddp", "backend": "gloo",
            "torch_version": torch.__version__, "model": "mlp", "optimizer": "adam",
            "lr": a.lr, "workers": a.workers, "batch_size": a.batch_size, "epochs": a.epochs,
            "threads_per_worker": a.threads, "steps_per_epoch": steps, "samples": samples,
            "training_seconds": train_s,
            "samples_per_sec": samples / train_s if train_s > 0 else 0.0,
            "test_accuracy": accuracy, "test_loss": loss_sum,
        }
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(summary, f, indent=1)
            f.write("\n")
        os.replace(tmp, a.out)
        print(f"ddp_bench: {a.workers} ranks, batch {a.batch_size}: "
              f"{summary['samples_per_sec']:.0f} samples/s, test accuracy {accuracy:.4f}")
    dist.destroy_process_group()


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv):
    a = parse_args(argv)
    try:
        import torch  # noqa: F401
        import torch.distributed as dist
        import torch.multiprocessing as mp
    except ImportError as e:
        print(f"PyTorch does not import under {sys.executable} ({e}): Debian's python3-torch "
              "provides it", file=sys.stderr)
        return 3
    if not dist.is_available() or not dist.is_gloo_available():
        print("this PyTorch has no gloo backend", file=sys.stderr)
        return 3
    for f in ("train-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        if not os.path.exists(os.path.join(a.data, f)):
            print(f"ddp_bench: no {f} in {a.data} (Debian's dataset-fashion-mnist)", file=sys.stderr)
            return 2
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    port = a.port or free_port()
    mp.spawn(rank_main, args=(a, port), nprocs=a.workers, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
