"""FSDP2 over collie on CPU: Fashion-MNIST with a sharded model.

The BLIP loop of samples/torch_ddp with torch 2.x's fully sharded data
parallelism instead of DDP: every block of the model and the model itself
are wrapped with torch.distributed.fsdp.fully_shard on a 1-D CPU
DeviceMesh, so each rank keeps 1/N of every parameter, gradient and
optimizer state; forward and backward all-gather a block's parameters just
before it runs and reduce-scatter its gradients right after. The model is
--model mlp (the default: blip_train's MLP made wide enough to be worth
sharding, 784-1024-1024-1024-10, 2.9 M parameters in 4 blocks) or --model
vit (a small vision transformer: 4x4 patches, --depth blocks of --dim).
Over collie:

    torch.distributed.init_process_group("collie", ...)  # was "gloo"

Run it from an environment that has torch 2.x and collie_torch:

    torchrun --nproc_per_node 4 samples/torch_fsdp/train.py
    collie-run --standalone --store-compat --nproc-per-node 4 \\
        python samples/torch_fsdp/train.py --backend collie

--backend gloo runs the same loop on torch's gloo backend. Evaluation and
the checkpoint (a full state dict, gathered from the shards) are on the main
process only; every rank takes part in gathering it.
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch_common"))
import utils  # noqa: E402  (BLIP's utils.py: the distributed helpers, the data)
from utils import get_rank, get_world_size, is_main_process  # noqa: E402


def get_args():
    p = utils.common_args(__doc__.split("\n")[0], epochs=3, lr=2e-3, output_dir="output/torch_fsdp")
    p.add_argument("--model", default="mlp", choices=["mlp", "vit"])
    p.add_argument("--dim", type=int, default=64, help="the transformer's width (--model vit)")
    p.add_argument("--depth", type=int, default=4, help="transformer blocks (--model vit)")
    p.add_argument("--patch", type=int, default=4, choices=[2, 4, 7, 14],
                   help="patch side in pixels (28/patch squared tokens per image)")
    return p.parse_args()


class MLP(nn.Module):
    """Linear + ReLU blocks, then the classifier: each block is sharded."""

    def __init__(self, sizes=(784, 1024, 1024, 1024), classes=10):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(a, b), nn.ReLU())
                                    for a, b in zip(sizes, sizes[1:]))
        self.head = nn.Linear(sizes[-1], classes)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class ViT(nn.Module):
    """28x28 images as 49 patches of 4x4 pixels, a class token, `depth` blocks."""

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

    def forward(self, images):
        b, p = images.shape[0], self.patch
        x = images.reshape(b, 28 // p, p, 28 // p, p).permute(0, 1, 3, 2, 4).reshape(b, -1, p * p)
        x = torch.cat([self.cls.expand(b, -1, -1), self.embed(x)], dim=1) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x[:, 0]))


def main(args):
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    utils.init_distributed_mode(args, datetime.timedelta(seconds=args.timeout))
    torch.set_num_threads(args.threads)
    seed = args.seed + get_rank()

    print("Creating dataset")
    train_set = utils.fashion_mnist(args.data_dir, True)
    test_set = utils.fashion_mnist(args.data_dir, False)
    sampler = (DistributedSampler(train_set, num_replicas=get_world_size(), rank=get_rank(),
                                  shuffle=True, seed=args.seed) if args.distributed else None)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler,
                              shuffle=sampler is None, drop_last=True)
    test_loader = DataLoader(test_set, batch_size=256, shuffle=False)

    print("Creating model")
    torch.manual_seed(args.seed)  # the same initial weights on every rank and backend
    def make_model():
        if args.model == "mlp":
            return MLP()
        return ViT(args.dim, args.depth, patch=args.patch)

    model = make_model()
    if args.distributed:
        mesh = init_device_mesh("cpu", (get_world_size(),))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    # foreach: one multi-tensor kernel per step instead of one call per
    # parameter, each of which DTensor dispatches in Python.
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay,
                                  foreach=True)
    # The evaluation copy on the main process: a plain module loaded from the
    # gathered full state dict.
    plain = make_model()
    torch.manual_seed(seed)

    if is_main_process():
        os.makedirs(args.output_dir, exist_ok=True)
    print("Start training")
    start_time = time.time()
    for epoch in range(args.epochs):
        if args.distributed:
            train_loader.sampler.set_epoch(epoch)
        utils.cosine_lr_schedule(optimizer, epoch, args.epochs, args.lr, args.min_lr)
        # FSDP reduce-scatters each block's gradients during backward.
        train_stats = utils.train_steps(model, train_loader, optimizer, epoch, args)
        # Every rank takes part in gathering the full state dict; only the
        # main process keeps it (cpu_offload), evaluates and saves.
        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
                                                                      cpu_offload=True))
        if is_main_process():
            plain.load_state_dict(state)
            test_stats = utils.evaluate(plain, test_loader)
            utils.write_epoch(args, epoch, train_stats, test_stats,
                              {"model": state, "config": vars(args), "epoch": epoch}, len(test_set))
        if args.distributed:
            dist.barrier()

    total = str(datetime.timedelta(seconds=int(time.time() - start_time)))
    print(f"Training time {total}")
    if args.distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(get_args())
