"""A mixture-of-experts layer, expert parallel over collie on CPU: Fashion-MNIST.

Each image is one token: an embedding (784 -> --dim), one mixture-of-experts
layer and the classifier. The layer's router picks one of --experts experts
per token (top-1, its softmax weight scaling the expert's output); expert e
lives on rank e // (experts / N) only, so a step sends every token's
activations to the rank of its expert with all_to_all_single (uneven split
sizes: however many tokens the router sent each rank) and the results back
the same way, and backward runs both in reverse. The dense parameters
(embedding, router, classifier) are data parallel: their gradients are
averaged with one all_reduce per step; an expert's gradient is whole on its
rank already (every rank's tokens reached it). Over collie:

    torch.distributed.init_process_group("collie", ...)  # was "gloo"

Run it from an environment that has torch 2.x and collie_torch:

    torchrun --nproc_per_node 2 samples/torch_moe/train.py
    collie-run --standalone --store-compat --nproc-per-node 4 \\
        python samples/torch_moe/train.py --backend collie

--backend gloo runs the same loop on torch's gloo backend. --experts must
be a multiple of the world size. The main process gathers the experts after
each epoch, evaluates the whole model and saves it.
"""
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
    p = utils.common_args(__doc__.split("\n")[0], epochs=3, lr=2e-3, output_dir="output/torch_moe")
    p.add_argument("--dim", type=int, default=128, help="the tokens' width")
    p.add_argument("--hidden", type=int, default=512, help="each expert's hidden width")
    p.add_argument("--experts", type=int, default=4, help="in all, a multiple of the world size")
    return p.parse_args()


class AllToAll(torch.autograd.Function):
    """all_to_all_single with split sizes; backward sends the gradients back
    along the same routes (the splits swapped)."""

    @staticmethod
    def forward(ctx, x, send_splits, recv_splits):
        ctx.send_splits, ctx.recv_splits = send_splits, recv_splits
        out = x.new_empty((sum(recv_splits),) + tuple(x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), recv_splits, send_splits)
        return out

    @staticmethod
    def backward(ctx, grad):
        out = grad.new_empty((sum(ctx.send_splits),) + tuple(grad.shape[1:]))
        dist.all_to_all_single(out, grad.contiguous(), ctx.send_splits, ctx.recv_splits)
        return out, None, None


def expert(dim, hidden):
    return nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, dim))


class MoE(nn.Module):
    """Top-1 routing over `experts` experts, `experts / world` of them here
    (the global indices [first, first + local))."""

    def __init__(self, dim, hidden, experts, rank, world):
        super().__init__()
        self.experts_total, self.world = experts, world
        self.local = experts // world
        self.first = rank * self.local
        self.router = nn.Linear(dim, experts)
        # Every rank draws every expert's initial weights in the same order
        # and keeps its own: the same start on any world size and backend.
        made = [expert(dim, hidden) for _ in range(experts)]
        self.experts = nn.ModuleList(made[self.first:self.first + self.local])

    def forward(self, x):
        gate = F.softmax(self.router(x), dim=-1)
        weight, choice = gate.max(dim=-1)
        owner = choice // self.local
        order = torch.argsort(owner, stable=True)
        send = torch.bincount(owner, minlength=self.world)
        if self.world > 1:
            recv = torch.empty_like(send)
            dist.all_to_all_single(recv, send)  # how many tokens each rank sends here
            send_splits, recv_splits = send.tolist(), recv.tolist()
            # The tokens, with their expert's index as one more column.
            packed = torch.cat([x[order], choice[order].unsqueeze(1).to(x.dtype)], dim=1)
            got = AllToAll.apply(packed, send_splits, recv_splits)
            tokens, which = got[:, :-1], got[:, -1].detach().long() - self.first
        else:
            tokens, which = x[order], choice[order] - self.first
        # Zeros that depend on the tokens: both all_to_alls stay in the
        # graph on every rank, so every rank runs both backward, in the same
        # order, even one whose experts got no token this step.
        out = tokens * 0.0
        for i, e in enumerate(self.experts):
            mask = which == i
            if mask.any():
                out = out.index_put((mask.nonzero(as_tuple=True)[0],), e(tokens[mask]))
        if self.world > 1:
            out = AllToAll.apply(out, recv_splits, send_splits)
        back = torch.empty_like(out)
        back[order] = out
        return x + back * weight.unsqueeze(1)


class Model(nn.Module):
    def __init__(self, args, rank, world):
        super().__init__()
        self.embed = nn.Linear(784, args.dim)
        self.moe = MoE(args.dim, args.hidden, args.experts, rank, world)
        self.head = nn.Linear(args.dim, 10)

    def forward(self, images):
        return self.head(self.moe(F.relu(self.embed(images.flatten(1)))))

    def dense_parameters(self):
        return [p for name, p in self.named_parameters() if not name.startswith("moe.experts.")]


def average_dense_gradients(model, world):
    """One all_reduce of the dense gradients, flattened; the experts' are
    already whole (each expert saw every rank's tokens), scaled to the same
    mean over the ranks' losses."""
    dense = model.dense_parameters()
    flat = torch.cat([p.grad.flatten() for p in dense])
    dist.all_reduce(flat)
    flat /= world
    at = 0
    for p in dense:
        p.grad.copy_(flat[at:at + p.numel()].view_as(p.grad))
        at += p.numel()
    for p in model.moe.experts.parameters():
        if p.grad is not None:
            p.grad /= world


def full_state(model, args):
    """The whole model's state on the main process (None elsewhere): the
    dense parameters and every rank's experts under their global index."""
    state = {k: v.detach().clone() for k, v in model.state_dict().items()
             if not k.startswith("moe.experts.")}
    mine = {f"moe.experts.{model.moe.first + int(k.split('.')[0])}.{k.split('.', 1)[1]}":
            v.detach().clone() for k, v in model.moe.experts.state_dict().items()}
    if not args.distributed:
        return {**state, **mine}
    parts = [None] * get_world_size() if is_main_process() else None
    dist.gather_object(mine, parts, dst=0)
    if not is_main_process():
        return None
    for part in parts:
        state.update(part)
    return state


def main(args):
    utils.init_distributed_mode(args, datetime.timedelta(seconds=args.timeout))
    torch.set_num_threads(args.threads)
    world = get_world_size()
    if args.experts % world != 0:
        raise SystemExit(f"--experts {args.experts} is not a multiple of the world size {world}")

    print("Creating dataset")
    train_set = utils.fashion_mnist(args.data_dir, True)
    test_set = utils.fashion_mnist(args.data_dir, False)
    sampler = (DistributedSampler(train_set, num_replicas=world, rank=get_rank(), shuffle=True,
                                  seed=args.seed) if args.distributed else None)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler,
                              shuffle=sampler is None, drop_last=True)
    test_loader = DataLoader(test_set, batch_size=256, shuffle=False)

    print("Creating model")
    torch.manual_seed(args.seed)  # the same initial weights on every rank and backend
    model = Model(args, get_rank(), world)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    plain = Model(args, 0, 1)  # the evaluation copy on the main process: every expert
    torch.manual_seed(args.seed + get_rank())

    if is_main_process():
        os.makedirs(args.output_dir, exist_ok=True)
    print("Start training")
    start_time = time.time()
    for epoch in range(args.epochs):
        if args.distributed:
            train_loader.sampler.set_epoch(epoch)
        utils.cosine_lr_schedule(optimizer, epoch, args.epochs, args.lr, args.min_lr)
        # Backward brings the experts' gradients back through the all_to_alls.
        train_stats = utils.train_steps(
            model, train_loader, optimizer, epoch, args,
            (lambda: average_dense_gradients(model, world)) if args.distributed else None)
        state = full_state(model, args)
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
