"""The helpers BLIP's utils.py gives its train_*.py, for collie's PyTorch
samples (samples/torch_ddp, samples/torch_fsdp, samples/torch_moe): the distributed setup the
tutorial explains, the learning-rate schedule, the evaluation, and
Fashion-MNIST (Debian's dataset-fashion-mnist) read from its idx files."""
import argparse
import builtins
import gzip
import math
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import TensorDataset

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # the training set's pixels on [0, 1], as blip_train


def common_args(description, epochs, lr, output_dir):
    """The options both samples take (BLIP's train.py names); each adds its own."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--backend", default="collie", choices=["collie", "gloo"])
    p.add_argument("--dist-url", default="env://")
    p.add_argument("--epochs", type=int, default=epochs)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--min-lr", type=float, default=0.0)
    p.add_argument("--weight-decay", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--data-dir", default=FASHION_MNIST)
    p.add_argument("--output-dir", default=output_dir)
    p.add_argument("--print-freq", type=int, default=50)
    p.add_argument("--max-steps", type=int, default=-1, help="per epoch, for quick runs")
    p.add_argument("--timeout", type=float, default=1800, help="seconds, for every collective")
    p.add_argument("--threads", type=int, default=1, help="torch's intra-op threads per rank")
    return p


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
    builtin_print = builtins.print

    def print(*args, **kwargs):
        force = kwargs.pop("force", False)
        if is_master or force:
            builtin_print(*args, **kwargs)

    builtins.print = print


def init_distributed_mode(args, timeout):
    """torchrun's (or collie-run's) RANK/WORLD_SIZE/LOCAL_RANK, else SLURM's;
    sets args.rank, args.world_size, args.gpu and args.distributed, and
    joins the process group of args.backend through args.dist_url. With
    collie_torch pip-installed, torch finds the backend "collie" by itself."""
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
    print(f"| distributed init (rank {args.rank}): {args.dist_url}, backend {args.backend}",
          flush=True)
    dist.init_process_group(backend=args.backend, init_method=args.dist_url,
                            world_size=args.world_size, rank=args.rank, timeout=timeout)
    dist.barrier()
    setup_for_distributed(args.rank == 0)


def cosine_lr_schedule(optimizer, epoch, max_epoch, init_lr, min_lr):
    lr = (init_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * epoch / max_epoch)) + min_lr
    for group in optimizer.param_groups:
        group["lr"] = lr


@torch.no_grad()
def evaluate(model, loader):
    """Accuracy (percent) and mean cross-entropy of `model` over `loader`."""
    model.eval()
    correct, loss_sum, n = 0, 0.0, 0
    for images, labels in loader:
        logits = model(images)
        loss_sum += F.cross_entropy(logits, labels, reduction="sum").item()
        correct += (logits.argmax(1) == labels).sum().item()
        n += len(labels)
    return {"acc": 100.0 * correct / n, "loss": loss_sum / n}


def train_steps(model, loader, optimizer, epoch, args, after_backward=None):
    """One epoch of cross-entropy training (the FSDP2 and mixture-of-experts
    samples'); after_backward() runs between backward and the optimizer's
    step. Returns the mean loss and the job's rates: steps/s (the ranks step
    together: the slowest sets it) and samples/s (summed over the ranks)."""
    import time
    model.train()
    header = f"Train Epoch: [{epoch}]"
    loss_sum, steps, samples = 0.0, 0, 0
    start = time.perf_counter()
    for i, (images, labels) in enumerate(loader):
        if 0 <= args.max_steps <= i:
            break
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        if after_backward is not None:
            after_backward()
        optimizer.step()
        loss_sum, steps, samples = loss_sum + loss.item(), steps + 1, samples + len(labels)
        if i % args.print_freq == 0:
            print(f"{header} [{i}/{len(loader)}] lr: {optimizer.param_groups[0]['lr']:.6f} "
                  f"loss: {loss.item():.4f}")
    seconds = time.perf_counter() - start
    stats = torch.tensor([steps / seconds, samples / seconds], dtype=torch.float64)
    if args.distributed:
        dist.all_reduce(stats)
    return {"loss": loss_sum / max(steps, 1), "steps_per_s": stats[0].item() / get_world_size(),
            "samples_per_s": stats[1].item(), "seconds": seconds}


def write_epoch(args, epoch, train_stats, test_stats, checkpoint, test_images):
    """The main process's end of an epoch, as BLIP's train.py: the accuracy
    printed, `checkpoint` saved as checkpoint_<epoch>.pth and the epoch's
    line (train_*, test_*) appended to log.txt in args.output_dir."""
    import json
    print(f"Accuracy of the network on the {test_images} test images: {test_stats['acc']:.2f}%")
    log_stats = {**{f"train_{k}": v for k, v in train_stats.items()},
                 **{f"test_{k}": v for k, v in test_stats.items()},
                 "epoch": epoch, "backend": args.backend, "world_size": get_world_size()}
    torch.save(checkpoint, os.path.join(args.output_dir, "checkpoint_%02d.pth" % epoch))
    with open(os.path.join(args.output_dir, "log.txt"), "a") as f:
        f.write(json.dumps(log_stats) + "\n")


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
    """Images as normalised float32 rows of 784 pixels, and int64 labels."""
    prefix = os.path.join(data_dir, "train" if train else "t10k")
    images = read_idx(prefix + "-images-idx3-ubyte.gz").reshape(-1, 784).float() / 255.0
    labels = read_idx(prefix + "-labels-idx1-ubyte.gz").long()
    return TensorDataset((images - MEAN) / STD, labels)


# The transformer block of the ViT samples (torch_fsdp, torch_pipeline).
class Block(nn.Module):
    """Pre-norm self-attention and MLP."""

    def __init__(self, dim, heads=4):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))
