"""Pipeline parallelism over collie on CPU: a small vision transformer on Fashion-MNIST.

The BLIP loop of samples/torch_ddp with torch.distributed.pipelining
instead of data parallelism: the model (samples/torch_fsdp's ViT: 4x4
patches, --depth blocks of --dim) is cut into stages, block by block, and
every rank runs its stages on microbatches of each batch, passing
activations forward and gradients backward to its neighbours with
point-to-point sends and receives (isend/irecv in batch_isend_irecv). The
schedule is torch's: --schedule GPipe, 1F1B (the default), Interleaved1F1B,
LoopedBFS, InterleavedZeroBubble (two stages per rank, looped: rank r
holds stages r and r + N), or ZBVZeroBubble and DualPipeV (two stages per
rank in a V: r and 2N - 1 - r; torch 2.15 and later on CPU). Over collie:

    torch.distributed.init_process_group("collie", ...)  # was "gloo"

Run it from an environment that has torch 2.x and collie_torch:

    torchrun --nproc_per_node 4 samples/torch_pipeline/train.py
    collie-run --standalone --store-compat --nproc-per-node 4 \\
        python samples/torch_pipeline/train.py --backend collie

--backend gloo runs the same loop on torch's gloo backend (the same
weights, bit for bit: a pipeline only moves bytes). Every rank reads the
same batches (the first stage needs the images, the last the labels). After
each epoch the main process gathers the stages' weights, evaluates the
whole model and saves it.
"""
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch_common"))
import utils  # noqa: E402  (BLIP's utils.py: the distributed helpers, the data)
from utils import get_rank, get_world_size, is_main_process  # noqa: E402

# How each schedule lays its stages out over the ranks.
SCHEDULES = {"GPipe": "single", "1F1B": "single", "Interleaved1F1B": "looped",
             "LoopedBFS": "looped", "InterleavedZeroBubble": "looped", "ZBVZeroBubble": "v",
             "DualPipeV": "v"}


def get_args():
    p = utils.common_args(__doc__.split("\n")[0], epochs=3, lr=2e-3,
                          output_dir="output/torch_pipeline")
    p.add_argument("--schedule", default="1F1B", choices=list(SCHEDULES))
    p.add_argument("--microbatches", type=int, default=0,
                   help="per batch (default: the number of stages, at least 4); --batch-size "
                   "must be a multiple")
    p.add_argument("--dim", type=int, default=64, help="the transformer's width")
    p.add_argument("--depth", type=int, default=8,
                   help="transformer blocks, split evenly over the stages (at least one each)")
    p.add_argument("--patch", type=int, default=4, choices=[2, 4, 7, 14],
                   help="patch side in pixels (28/patch squared tokens per image)")
    p.add_argument("--test-samples", type=int, default=0,
                   help="evaluate on the first N test images only (default: all 10000)")
    return p.parse_args()


class ViT(nn.Module):
    """28x28 images as (28/patch)^2 patches, a class token, `depth` blocks."""

    def __init__(self, dim, depth, classes=10, patch=4):
        super().__init__()
        self.patch = patch
        tokens = (28 // patch) ** 2
        self.embed = nn.Linear(patch * patch, dim)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, tokens + 1, dim) * 0.02)
        self.blocks = nn.ModuleList(utils.Block(dim) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def tokens(self, images):
        b, p = images.shape[0], self.patch
        x = images.reshape(b, 28 // p, p, 28 // p, p).permute(0, 1, 3, 2, 4).reshape(b, -1, p * p)
        return torch.cat([self.cls.expand(b, -1, -1), self.embed(x)], dim=1) + self.pos

    def forward(self, images):
        x = self.tokens(images)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x[:, 0]))


class StagePart(nn.Module):
    """Stage `index` of `count`: the patch embedding on the first, its share
    of the blocks, the final norm and head on the last; the whole model's
    modules, the same parameters, so that the checkpoint has its names."""

    def __init__(self, model, index, count):
        super().__init__()
        self.first, self.last, self.patch = index == 0, index == count - 1, model.patch
        depth = len(model.blocks)
        self.blocks = nn.ModuleList(model.blocks[index * depth // count:
                                                 (index + 1) * depth // count])
        if self.first:
            self.embed, self.cls, self.pos = model.embed, model.cls, model.pos
        if self.last:
            self.norm, self.head = model.norm, model.head
        names = {id(p): n for n, p in model.named_parameters()}
        self.names = [names[id(p)] for p in self.parameters()]

    def owned(self):
        """This stage's parameters by their names in the whole model."""
        return dict(zip(self.names, self.parameters()))

    def forward(self, x):
        if self.first:
            x = ViT.tokens(self, x)
        for block in self.blocks:
            x = block(x)
        if self.last:
            x = self.head(self.norm(x[:, 0]))
        return x


def stage_layout(schedule, world, rank):
    """The number of stages and this rank's stage indices."""
    layout = SCHEDULES[schedule]
    if layout == "single":
        return world, [rank]
    if layout == "looped":
        return 2 * world, [rank, rank + world]
    return 2 * world, [rank, 2 * world - 1 - rank]


def train_one_epoch(schedule, parts, loader, optimizer, epoch, args):
    """One epoch; the rates count the steps after the first (which infers the
    stages' shapes and warms up), the slowest rank's time."""
    first = any(p.first for p in parts)
    last = any(p.last for p in parts)
    for p in parts:
        p.train()  # (the main process's evaluation put the whole model in eval mode)
    header = f"Train Epoch: [{epoch}]"
    loss_sum, losses_seen, steps, samples = 0.0, 0, 0, 0
    start = None
    for i, (images, labels) in enumerate(loader):
        if 0 <= args.max_steps <= i:
            break
        if i == 1:
            start = time.perf_counter()
        optimizer.zero_grad()
        losses = []
        schedule.step(*((images,) if first else ()),
                      **({"target": labels, "losses": losses} if last else {}))
        optimizer.step()
        if losses:
            step_loss = torch.stack([x.detach() for x in losses]).mean().item()
            loss_sum, losses_seen = loss_sum + step_loss, losses_seen + 1
            if i % args.print_freq == 0:
                print(f"{header} [{i}/{len(loader)}] lr: {optimizer.param_groups[0]['lr']:.6f} "
                      f"loss: {step_loss:.4f}", force=True)
        if i >= 1:
            steps, samples = steps + 1, samples + len(labels)
    seconds = time.perf_counter() - start if start is not None else 0.0
    # The job steps together: its rate is the slowest rank's; the loss is the
    # last stage's.
    slowest = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    loss = torch.tensor([loss_sum, losses_seen], dtype=torch.float64)
    dist.all_reduce(loss)
    seconds = slowest.item()
    return {"loss": loss[0].item() / max(loss[1].item(), 1),
            "steps_per_s": steps / seconds if seconds > 0 else 0.0,
            "samples_per_s": samples / seconds if seconds > 0 else 0.0, "seconds": seconds}


def main(args):
    from torch.distributed import pipelining

    utils.init_distributed_mode(args, datetime.timedelta(seconds=args.timeout))
    if not args.distributed:
        sys.exit("a pipeline needs ranks: run it under torchrun or collie-run "
                 "(RANK and WORLD_SIZE)")
    torch.set_num_threads(args.threads)
    rank, world = get_rank(), get_world_size()
    count, mine = stage_layout(args.schedule, world, rank)
    if args.depth < count:
        sys.exit(f"--depth {args.depth}: {args.schedule} on {world} ranks has {count} stages, "
                 "each needs a block")
    micro = args.microbatches or max(4, count)
    if args.batch_size % micro:
        sys.exit(f"--batch-size {args.batch_size} is not a multiple of {micro} microbatches")

    print("Creating dataset")
    train_set = utils.fashion_mnist(args.data_dir, True)
    test_set = utils.fashion_mnist(args.data_dir, False)
    if args.test_samples > 0:
        test_set = torch.utils.data.Subset(test_set, range(min(args.test_samples, len(test_set))))
    # The same batches on every rank: the first stage reads the images, the
    # last the labels.
    order = torch.Generator().manual_seed(args.seed)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True,
                              generator=order, drop_last=True)
    test_loader = DataLoader(test_set, batch_size=256, shuffle=False)

    print(f"Creating model: {count} stages, {args.schedule}, {micro} microbatches per batch")
    torch.manual_seed(args.seed)  # the same initial weights on every rank and backend
    model = ViT(args.dim, args.depth, patch=args.patch)
    parts = [StagePart(model, i, count) for i in mine]
    stages = [pipelining.PipelineStage(p, i, count, torch.device("cpu"))
              for p, i in zip(parts, mine)]
    cls = getattr(pipelining, "Schedule" + args.schedule)
    layout = SCHEDULES[args.schedule]

    def loss_fn(logits, labels):
        return F.cross_entropy(logits, labels)

    schedule = cls(stages[0] if layout == "single" else stages, micro, loss_fn=loss_fn)
    params = [q for p in parts for q in p.parameters()]
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay,
                                  foreach=True)

    if is_main_process():
        os.makedirs(args.output_dir, exist_ok=True)
    print("Start training")
    start_time = time.time()
    for epoch in range(args.epochs):
        utils.cosine_lr_schedule(optimizer, epoch, args.epochs, args.lr, args.min_lr)
        train_stats = train_one_epoch(schedule, parts, train_loader, optimizer, epoch,
                                      args)
        # The main process gathers every stage's weights, evaluates the whole
        # model and saves it.
        owned = {n: p.detach().clone() for part in parts for n, p in part.owned().items()}
        gathered = [None] * world if is_main_process() else None
        dist.gather_object(owned, gathered, dst=0)
        if is_main_process():
            state = {}
            for piece in gathered:
                state.update(piece)
            model.load_state_dict(state)
            test_stats = utils.evaluate(model, test_loader)
            print(f"Accuracy of the network on the {len(test_set)} test images: "
                  f"{test_stats['acc']:.2f}%")
            log_stats = {**{f"train_{k}": v for k, v in train_stats.items()},
                         **{f"test_{k}": v for k, v in test_stats.items()},
                         "epoch": epoch, "backend": args.backend, "world_size": world,
                         "schedule": args.schedule, "stages": count, "microbatches": micro}
            torch.save({"model": state, "config": vars(args), "epoch": epoch},
                       os.path.join(args.output_dir, "checkpoint_%02d.pth" % epoch))
            with open(os.path.join(args.output_dir, "log.txt"), "a") as f:
                f.write(json.dumps(log_stats) + "\n")
        dist.barrier()

    total = str(datetime.timedelta(seconds=int(time.time() - start_time)))
    print(f"Training time {total}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(get_args())
