"""The ranks of the collie_torch tests of torch 2.x's parallelism APIs:
<venv>/bin/python workers_parallel.py SCENARIO [ARGS...]

Each scenario runs the same computation over collie and over torch's gloo
(one job, two groups over the same ranks, the same inputs) and compares the
results: bit for bit where both reduce in the same order (two ranks add the
same two numbers whatever the algorithm), to a few roundings otherwise.
"""
import os
import sys
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

import collie_torch  # noqa: F401  (torch autoloads it too)
from workers import Checks, RANK, WORLD, init, run_scenario

warnings.filterwarnings("ignore")


def close_or_same(c, name, got, want, atol=1e-6):
    """Bits at two ranks, else within a few roundings of the sums (`atol`:
    sums of 16-bit floats in another order differ in their last bit)."""
    if WORLD == 2:
        c.same(name, got, want)
    else:
        c.count += 1
        if not torch.allclose(got, want, rtol=1e-4, atol=atol):
            c.failures.append(f"{name}: max |difference| {(got - want).abs().max().item():.3g} "
                              f"beyond rtol 1e-4, atol {atol}")


# ---------------------------------------------------------------------------
# DDP: torch's DistributedDataParallel with its communication hooks.

def ddp_weights(group, hook, steps=4):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 4))
    ddp = nn.parallel.DistributedDataParallel(model, process_group=group, bucket_cap_mb=0.01)
    if hook == "fp16":
        ddp.register_comm_hook(group, default_hooks.fp16_compress_hook)
    elif hook == "bf16":
        ddp.register_comm_hook(group, default_hooks.bf16_compress_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(100 + RANK)
    for _ in range(steps):
        x, y = torch.randn(16, 32, generator=g), torch.randint(0, 4, (16,), generator=g)
        loss = nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def scenario_ddp():
    """DDP with the default all_reduce, and the fp16 and bf16 compression
    hooks (DDP's buckets go through getFuture() and then() chains), over
    collie and over gloo: the same weights."""
    init("collie", timeout_s=120)
    gloo = dist.new_group(backend="gloo")
    c = Checks()
    for hook in ("default", "fp16", "bf16"):
        mine = ddp_weights(None, hook)
        theirs = ddp_weights(gloo, hook)
        for i, (a, b) in enumerate(zip(mine, theirs)):
            # fp16 and bf16 sums of 3 numbers in another order than gloo's
            # differ in their last bit (bf16: 2^-8 of the gradient).
            close_or_same(c, f"DDP {hook} hook: parameter {i}", a, b,
                          atol=1e-6 if hook == "default" else 2e-4)
    c.finish(f"DDP hooks ({WORLD} ranks)")
    dist.destroy_process_group()


# ---------------------------------------------------------------------------
# FSDP2: fully_shard on a CPU mesh.

class Block(nn.Module):
    """A small transformer block: attention and MLP, with layer norms."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class Net(nn.Module):
    def __init__(self, dim=32, depth=2, vocab=50):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def fsdp_train(mesh, steps, seed=0):
    """fully_shard every block and the root, then `steps` SGD steps on
    this rank's own batch. Returns the full (unsharded) parameters."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(seed)
    model = Net()
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    # SGD, not Adam: Adam divides by the gradients' size, which turns the
    # last-bit differences of another summation order (3+ ranks) in
    # gradients that are all rounding noise (attention's key bias) into
    # updates as large as the learning rate.
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(200 + RANK)
    for _ in range(steps):
        tokens = torch.randint(0, 50, (4, 12), generator=g)
        logits = model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, 50), tokens[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {n: p.full_tensor().detach().clone() for n, p in model.named_parameters()}


def scenario_fsdp():
    """FSDP2 over collie trains the same weights as over gloo."""
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

    init("collie", timeout_s=180)
    c = Checks()
    mesh = init_device_mesh("cpu", (WORLD,))
    c.true("the mesh's group is collie's", dist.get_backend(mesh.get_group()) == "collie",
           dist.get_backend(mesh.get_group()))
    gloo_mesh = DeviceMesh.from_group(dist.new_group(backend="gloo"), "cpu")
    mine = fsdp_train(mesh, steps=4)
    theirs = fsdp_train(gloo_mesh, steps=4)
    for name in mine:
        close_or_same(c, f"FSDP2 {name}", mine[name], theirs[name])
    c.finish(f"FSDP2 fully_shard ({WORLD} ranks)")
    dist.destroy_process_group()


def scenario_fsdp_exit():
    """FSDP2 training that ends without destroy_process_group(): FSDP's last
    asynchronous operations may still be on collie's worker thread when the
    program exits, holding tensors that Python knows; collie finishes them
    before Python's finalization (after it, a thread that releases such a
    tensor is killed and the process aborts). Every rank must exit 0."""
    from torch.distributed.device_mesh import init_device_mesh

    init("collie", timeout_s=120)
    mesh = init_device_mesh("cpu", (WORLD,))
    fsdp_train(mesh, steps=2)
    print(f"rank {RANK}: exiting without destroy_process_group", flush=True)
    sys.exit(0)


# ---------------------------------------------------------------------------
# DeviceMesh, DTensor and tensor parallelism.

def scenario_dtensor():
    """A 2-D mesh (dp x tp) over 4 ranks: its groups are collie's; DTensor
    redistributes between shardings; parallelize_module's colwise/rowwise
    tensor parallelism computes what the unsharded module computes."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    init("collie", timeout_s=180)
    c = Checks()
    mesh = init_device_mesh("cpu", (2, WORLD // 2), mesh_dim_names=("dp", "tp"))
    for dim in ("dp", "tp"):
        group = mesh.get_group(dim)
        c.true(f"the {dim} group is collie's", dist.get_backend(group) == "collie",
               dist.get_backend(group))

    torch.manual_seed(0)
    full = torch.randn(8, 12)
    d = distribute_tensor(full, mesh, [Shard(0), Shard(1)])
    c.same("distribute_tensor then full_tensor", d.full_tensor(), full)
    r = d.redistribute(mesh, [Replicate(), Shard(0)])
    c.same("redistribute Shard(0),Shard(1) -> Replicate,Shard(0)", r.full_tensor(), full)
    rep = r.redistribute(mesh, [Replicate(), Replicate()])
    c.same("redistribute -> Replicate everywhere", rep.to_local(), full)
    # Partial -> Replicate is an all_reduce over the mesh dimension.
    s = (d * 2).sum()
    c.close("a sum over a sharded DTensor", s.full_tensor(), (full * 2).sum(), rtol=1e-5)

    torch.manual_seed(1)
    mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
    reference = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
    reference.load_state_dict(mlp.state_dict())
    tp = parallelize_module(mlp, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(7))  # the same on every rank
    c.close("tensor-parallel MLP forward", tp(x), reference(x), rtol=1e-5)
    tp(x).sum().backward()
    reference(x).sum().backward()
    c.close("tensor-parallel MLP weight gradient", tp[0].weight.grad.full_tensor(),
            reference[0].weight.grad, rtol=1e-5)
    c.finish(f"DeviceMesh 2-D, DTensor, tensor parallel ({WORLD} ranks)")
    dist.destroy_process_group()


# ---------------------------------------------------------------------------
# torch.compile and the functional collectives.

def scenario_compile(backend):
    """torch.compile of a function that calls funcol.all_reduce on a collie
    group: the compiled graph issues c10d's functional collective, which
    runs on collie."""
    import torch.distributed._functional_collectives as funcol

    init("collie", timeout_s=300)
    c = Checks()
    group = dist.distributed_c10d._get_default_group()

    def step(x):
        y = funcol.all_reduce(x * 2, "sum", group)
        return torch.relu(y) + 1

    compiled = torch.compile(step, backend=backend, fullgraph=True)
    before = collie_torch.backend().queue_stats()
    for i in range(3):
        x = torch.arange(8, dtype=torch.float32) * (RANK + 1) - 3 + i
        want = torch.relu(sum(torch.arange(8, dtype=torch.float32) * (r + 1) - 3 + i
                              for r in range(WORLD)) * 2) + 1
        c.same(f"compiled step {i}", compiled(x), want)
    after = collie_torch.backend().queue_stats()
    ran = (after["inline_runs"] + after["worker_runs"]) - (before["inline_runs"] +
                                                           before["worker_runs"])
    c.true("the all_reduces ran on collie", ran >= 3, f"{before} -> {after}")
    c.finish(f"torch.compile({backend}) of funcol.all_reduce")
    dist.destroy_process_group()


# ---------------------------------------------------------------------------
# _coalescing_manager and batch_isend_irecv.

def scenario_coalescing():
    """_coalescing_manager with a device: its all_reduce, all_gather_into_tensor
    and reduce_scatter_tensor fast paths (allreduce_coalesced and the two
    *_coalesced collectives), and ops without a fast path (broadcast) kept
    between startCoalescing and endCoalescing; async and blocking."""
    from torch.distributed.distributed_c10d import _coalescing_manager

    init("collie", timeout_s=120)
    gloo = dist.new_group(backend="gloo")
    c = Checks()
    cpu = torch.device("cpu")
    for async_ops in (True, False):
        mine = [torch.full((n,), float(RANK + n)) for n in (3, 1000, 7)]
        theirs = [t.clone() for t in mine]
        with _coalescing_manager(device=cpu, async_ops=async_ops) as cm:
            for t in mine:
                dist.all_reduce(t)
        if async_ops:
            cm.wait()
        for t in theirs:
            dist.all_reduce(t, group=gloo)
        for i, (a, b) in enumerate(zip(mine, theirs)):
            c.same(f"coalesced all_reduce {i} (async {async_ops})", a, b)

        ins = [torch.full((n,), float(10 * RANK + n)) for n in (2, 5)]
        outs = [torch.zeros(WORLD * n) for n in (2, 5)]
        with _coalescing_manager(device=cpu, async_ops=async_ops) as cm:
            for o, i in zip(outs, ins):
                dist.all_gather_into_tensor(o, i)
        if async_ops:
            cm.wait()
        for k, n in enumerate((2, 5)):
            want = torch.cat([torch.full((n,), float(10 * r + n)) for r in range(WORLD)])
            c.same(f"coalesced all_gather_into_tensor {k} (async {async_ops})", outs[k], want)

        ins = [torch.arange(WORLD * n, dtype=torch.float32) + RANK for n in (3, 4)]
        outs = [torch.zeros(n) for n in (3, 4)]
        with _coalescing_manager(device=cpu, async_ops=async_ops) as cm:
            for o, i in zip(outs, ins):
                dist.reduce_scatter_tensor(o, i)
        if async_ops:
            cm.wait()
        for k, n in enumerate((3, 4)):
            full = sum(torch.arange(WORLD * n, dtype=torch.float32) + r for r in range(WORLD))
            c.same(f"coalesced reduce_scatter_tensor {k} (async {async_ops})", outs[k],
                   full[RANK * n:(RANK + 1) * n])

    # No fast path: the backend keeps the broadcasts and runs them at the end.
    ts = [torch.full((4,), float(RANK + k)) for k in range(3)]
    with _coalescing_manager(device=cpu, async_ops=True) as cm:
        for k, t in enumerate(ts):
            dist.broadcast(t, src=k % WORLD)
    cm.wait()
    for k, t in enumerate(ts):
        c.same(f"coalesced broadcast {k}", t, torch.full((4,), float(k % WORLD + k)))
    c.finish(f"_coalescing_manager ({WORLD} ranks)")
    dist.destroy_process_group()


def scenario_p2p_ring(mib):
    """batch_isend_irecv of a ring: every rank sends `mib` MiB to the next
    and receives as much from the previous, all at once (torch coalesces
    them through startCoalescing/endCoalescing, since collie supports
    coalescing). Messages that large only complete when received, so
    posting them one after another would deadlock."""
    init("collie", timeout_s=300)
    c = Checks()
    n = int(mib) * (1 << 20) // 4
    nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    for rnd in range(2):
        send = torch.arange(n, dtype=torch.float32) + 1000 * RANK + rnd
        recv = torch.zeros(n, dtype=torch.float32)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, nxt),
                                       dist.P2POp(dist.irecv, recv, prv)])
        for r in reqs:
            r.wait()
        c.same(f"ring round {rnd}: {mib} MiB from rank {prv}", recv,
               torch.arange(n, dtype=torch.float32) + 1000 * prv + rnd)
    c.finish(f"batch_isend_irecv ring of {mib} MiB ({WORLD} ranks)")
    dist.destroy_process_group()


if __name__ == "__main__":
    run_scenario(globals())
