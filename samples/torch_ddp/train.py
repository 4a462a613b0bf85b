"""BLIP's distributed training loop in PyTorch, on Fashion-MNIST, over collie.

The same steps as BLIP's train_*.py and the tutorial that explains them
(init_distributed_mode, setup_for_distributed, DistributedSampler with
set_epoch, DistributedDataParallel with model_without_ddp, evaluation and
checkpoints on the main process only, a barrier after every epoch), with
the one change that puts collie underneath torch's own DDP:

    torch.distributed.init_process_group("collie", ...)  # was "gloo"

(collie_torch, pip-installed, is found by torch itself.) Run it like any
torch program, from an environment that has torch 2.x and collie_torch:

    torchrun --nproc_per_node 4 samples/torch_ddp/train.py
    collie-run --standalone --store-compat --nproc-per-node 4 \\
        python samples/torch_ddp/train.py --backend collie

--backend gloo runs the very same loop on torch's gloo backend, for
comparison; --comm-hook fp16 or bf16 compresses the gradients with DDP's
compression hooks; --trace FILE writes the job's timeline (every collective
collie ran, each step and its forward, backward and optimizer step) as one
Chrome trace / Perfetto file. The model and schedule are blip_train's
(samples/blip_train): an MLP 784-256-128-10, AdamW, cosine learning rate.
"""
import contextlib
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch_common"))
import utils  # noqa: E402  (BLIP's utils.py: the distributed helpers, the data)
from utils import get_rank, get_world_size, is_main_process  # noqa: E402


def get_args():
    p = utils.common_args(__doc__.split("\n")[0], epochs=10, lr=1e-3, output_dir="output/torch_ddp")
    p.add_argument("--comm-hook", default="none", choices=["none", "fp16", "bf16"],
                   help="DDP's gradient compression hook")
    p.add_argument("--trace", default="", metavar="FILE",
                   help="write the job's timeline to FILE (collie_torch.timeline; rank 0 writes it)")
    return p.parse_args()


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

class _NoTimeline:
    """Stands in for collie_torch.timeline without --trace."""

    @staticmethod
    def step_span(*args, **kwargs):
        return contextlib.nullcontext()


timeline = _NoTimeline


def train_one_epoch(model, loader, optimizer, epoch, args):
    model.train()
    header = f"Train Epoch: [{epoch}]"
    loss_sum, steps, samples = 0.0, 0, 0
    start, cpu_start = time.perf_counter(), time.process_time()
    for i, (images, labels) in enumerate(loader):
        if 0 <= args.max_steps <= i:
            break
        with timeline.step_span(f"step {i}", epoch=epoch, step=i):
            with timeline.step_span("forward", cat="train", epoch=epoch, step=i):
                loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            with timeline.step_span("backward", cat="train", epoch=epoch, step=i):
                loss.backward()  # DDP all_reduces the gradient buckets here
            with timeline.step_span("optimizer", cat="train", epoch=epoch, step=i):
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


def main(args):
    utils.init_distributed_mode(args, datetime.timedelta(seconds=args.timeout))
    if args.trace:
        global timeline
        import collie_torch.timeline as timeline
        timeline.start(args.trace)
    torch.set_num_threads(args.threads)
    seed = args.seed + get_rank()
    torch.manual_seed(seed)

    print("Creating dataset")
    train_set = utils.fashion_mnist(args.data_dir, True)
    test_set = utils.fashion_mnist(args.data_dir, False)
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
        if args.comm_hook != "none":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            hook = {"fp16": default_hooks.fp16_compress_hook,
                    "bf16": default_hooks.bf16_compress_hook}[args.comm_hook]
            model.register_comm_hook(None, hook)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    torch.manual_seed(seed)

    if is_main_process():
        os.makedirs(args.output_dir, exist_ok=True)
    print("Start training")
    start_time = time.time()
    for epoch in range(args.epochs):
        if args.distributed:
            train_loader.sampler.set_epoch(epoch)
        utils.cosine_lr_schedule(optimizer, epoch, args.epochs, args.lr, args.min_lr)
        train_stats = train_one_epoch(model, train_loader, optimizer, epoch, args)
        if is_main_process():
            test_stats = utils.evaluate(model_without_ddp, test_loader)
            utils.write_epoch(args, epoch, train_stats, test_stats,
                              {"model": model_without_ddp.state_dict(),
                               "optimizer": optimizer.state_dict(), "config": vars(args),
                               "epoch": epoch}, len(test_set))
        if args.distributed:
            dist.barrier()

    total = str(datetime.timedelta(seconds=int(time.time() - start_time)))
    print(f"Training time {total}")
    if args.trace:
        wrote = timeline.finish()
        if wrote:
            print(f"timeline written to {os.path.abspath(wrote)}")
    if args.distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(get_args())
