"""BLIP's distributed training loop in PyTorch, on Fashion-MNIST, over collie.

The same steps as BLIP's train_*.py and the tutorial that explains them
(init_distributed_mode, setup_for_distributed, DistributedSampler with
set_epoch, DistributedDataParallel with model_without_ddp, evaluation and
checkpoints on the main process only, a barrier after every epoch), with
the one change that puts collie underneath torch's own DDP:

    import collie_torch                                # registers "collie"
    torch.distributed.init_process_group("collie", ...)  # was "gloo"

Run it like any torch program (build/python on PYTHONPATH in a build tree):

    torchrun --nproc_per_node 4 --redirects 1 --tee 1 samples/torch_ddp/train.py
    collie-run --standalone --store-compat --nproc-per-node 4 \\
        /usr/bin/python3 samples/torch_ddp/train.py --backend collie

--backend gloo runs the very same loop on torch's gloo backend, for
comparison. The model and schedule are blip_train's (samples/blip_train):
an MLP 784-256-128-10, AdamW, cosine learning rate.
"""
import argparse
import datetime
import gzip
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # the training set's pixels on [0, 1], as blip_train


def get_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="collie", choices=["collie", "gloo"])
    p.add_argument("--dist-url", default="env://")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=0.0)
    p.add_argument("--weight-decay", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--data-dir", default=FASHION_MNIST)
    p.add_argument("--output-dir", default="output/torch_ddp")
    p.add_argument("--print-freq", type=int, default=50)
    p.add_argument("--max-steps", type=int, default=-1, help="per epoch, for quick runs")
    p.add_argument("--timeout", type=float, default=1800, help="seconds, for every collective")
    p.add_argument("--threads", type=int, default=1, help="torch's intra-op threads per rank")
    return p.parse_args()


# --- the tutorial's helpers -------------------------------------------------

def is_dist_avail_and_initialized():
    return dist.is_available() and dist.is_initialized()


def get_rank():
    return dist.get_rank() if is_dist_avail_and_initialized() else 0


def get_world_size():
    return dist.get_world_size() if is_dist_avail_and_initialized() else 1


def is_main_process():
    return get_rank() == 0


def setup_for_distributed(is_master):
    """Disables printing when not in the master process (print(..., force=True) still prints)."""
    import builtins as __builtin__
    builtin_print = __builtin__.print

    def print(*args, **kwargs):
        force = kwargs.pop("force", False)
        if is_master or force:
            builtin_print(*args, **kwargs)

    __builtin__.print = print


def init_distributed_mode(args):
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        args.rank = int(os.environ["RANK"])
        args.world_size = int(os.environ["WORLD_SIZE"])
        args.gpu = int(os.environ.get("LOCAL_RANK", "0"))
    elif "SLURM_PROCID" in os.environ:
        args.rank = int(os.environ["SLURM_PROCID"])
        args.world_size = int(os.environ["SLURM_NTASKS"])
        args.gpu = int(os.environ.get("SLURM_LOCALID", "0"))
    else:
        print("Not using distributed mode")
        args.distributed = False
        return
    args.distributed = True
    if args.backend == "collie":
        import collie_torch  # noqa: F401  registers the backend "collie"
    print(f"| distributed init (rank {args.rank}): {args.dist_url}, backend {args.backend}",
          flush=True)
    dist.init_process_group(backend=args.backend, init_method=args.dist_url,
                            world_size=args.world_size, rank=args.rank,
                            timeout=datetime.timedelta(seconds=args.timeout))
    dist.barrier()
    setup_for_distributed(args.rank == 0)


def cosine_lr_schedule(optimizer, epoch, max_epoch, init_lr, min_lr):
    lr = (init_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * epoch / max_epoch)) + min_lr
    for group in optimizer.param_groups:
        group["lr"] = lr


# --- data and model ---------------------------------------------------------

def read_idx(path):
    """An idx file (big-endian magic: 0, 0, type 8 = uint8, ndim; then dims)."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    if data[:3] != b"\0\0\x08":
        raise ValueError(f"{path}: not an idx file of uint8")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def fashion_mnist(data_dir, train):
    prefix = os.path.join(data_dir, "train" if train else "t10k")
    images = read_idx(prefix + "-images-idx3-ubyte.gz").reshape(-1, 784).float() / 255.0
    labels = read_idx(prefix + "-labels-idx1-ubyte.gz").long()
    return TensorDataset((images - MEAN) / STD, labels)


class MLP(nn.Module):
    def __init__(self, hidden=(256, 128)):
        super().__init__()
        sizes = [784, *hidden, 10]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = F.relu(layer(x))
        return self.layers[-1](x)


# --- training ---------------------------------------------------------------

def train_one_epoch(model, loader, optimizer, epoch, args):
    model.train()
    header = f"Train Epoch: [{epoch}]"
    loss_sum, steps, samples = 0.0, 0, 0
    start, cpu_start = time.perf_counter(), time.process_time()
    for i, (images, labels) in enumerate(loader):
        if 0 <= args.max_steps <= i:
            break
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()  # DDP all_reduces the gradient buckets here
        optimizer.step()
        loss_sum, steps, samples = loss_sum + loss.item(), steps + 1, samples + len(labels)
        if i % args.print_freq == 0:
            print(f"{header} [{i}/{len(loader)}] lr: {optimizer.param_groups[0]['lr']:.6f} "
                  f"loss: {loss.item():.4f}")
    seconds = time.perf_counter() - start
    # CPU time of this process (every thread: torch's, the backend's) per step.
    cpu_ms = (time.process_time() - cpu_start) * 1e3 / max(steps, 1)
    # Every rank's samples per second, summed: the job's training throughput;
    # the CPU time per step averaged over the ranks.
    stats = torch.tensor([samples / seconds, cpu_ms], dtype=torch.float64)
    if args.distributed:
        dist.all_reduce(stats)
    return {"loss": loss_sum / max(steps, 1), "samples_per_s": stats[0].item(),
            "cpu_ms_per_step": stats[1].item() / get_world_size(), "seconds": seconds}


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    correct, loss_sum, n = 0, 0.0, 0
    for images, labels in loader:
        logits = model(images)
        loss_sum += F.cross_entropy(logits, labels, reduction="sum").item()
        correct += (logits.argmax(1) == labels).sum().item()
        n += len(labels)
    return {"acc": 100.0 * correct / n, "loss": loss_sum / n}


def main(args):
    init_distributed_mode(args)
    torch.set_num_threads(args.threads)
    seed = args.seed + get_rank()
    torch.manual_seed(seed)

    print("Creating dataset")
    train_set, test_set = fashion_mnist(args.data_dir, True), fashion_mnist(args.data_dir, False)
    if args.distributed:
        num_tasks, global_rank = get_world_size(), get_rank()
        train_sampler = DistributedSampler(train_set, num_replicas=num_tasks, rank=global_rank,
                                           shuffle=True, seed=args.seed)
    else:
        train_sampler = None
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler,
                              shuffle=train_sampler is None, drop_last=True)
    test_loader = DataLoader(test_set, batch_size=256, shuffle=False)

    print("Creating model")
    torch.manual_seed(args.seed)  # the same initial weights on every rank and backend
    model = MLP()
    model_without_ddp = model
    if args.distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
        model_without_ddp = model.module
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    torch.manual_seed(seed)

    if is_main_process():
        os.makedirs(args.output_dir, exist_ok=True)
    print("Start training")
    start_time = time.time()
    for epoch in range(args.epochs):
        if args.distributed:
            train_loader.sampler.set_epoch(epoch)
        cosine_lr_schedule(optimizer, epoch, args.epochs, args.lr, args.min_lr)
        train_stats = train_one_epoch(model, train_loader, optimizer, epoch, args)
        if is_main_process():
            test_stats = evaluate(model_without_ddp, test_loader)
            print(f"Accuracy of the network on the {len(test_set)} test images: "
                  f"{test_stats['acc']:.2f}%")
            log_stats = {**{f"train_{k}": v for k, v in train_stats.items()},
                         **{f"test_{k}": v for k, v in test_stats.items()},
                         "epoch": epoch, "backend": args.backend, "world_size": get_world_size()}
            torch.save({"model": model_without_ddp.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "config": vars(args), "epoch": epoch},
                       os.path.join(args.output_dir, "checkpoint_%02d.pth" % epoch))
            with open(os.path.join(args.output_dir, "log.txt"), "a") as f:
                f.write(json.dumps(log_stats) + "\n")
        if args.distributed:
            dist.barrier()

    total = str(datetime.timedelta(seconds=int(time.time() - start_time)))
    print(f"Training time {total}")
    if args.distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(get_args())
