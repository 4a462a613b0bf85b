"""The ranks of the collie_torch CUDA tests: <python> workers_cuda.py SCENARIO

One rank per GPU (on the one-GPU machine: world size 1). Every call is made
on collie's group (CUDA tensors: collie's NCCL backend on torch's current
stream) and on torch's own "nccl" group over the same ranks, and the results
are compared bit for bit.
"""
import os
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn

import collie_torch  # noqa: F401
from workers import (AVG, MAX, MIN, OP_NAMES, PRODUCT, RANK, SUM, WORLD, Checks, init,
                     run_scenario, values)

warnings.filterwarnings("ignore")

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
          torch.uint8, torch.int8]


def device():
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))


def scenario_ops():
    """Every op and dtype NCCL has, on CUDA tensors, against torch's nccl."""
    torch.cuda.set_device(device())
    init("collie", timeout_s=120)
    nccl = dist.new_group(backend="nccl")
    c = Checks()
    dev = device()
    case = 0
    for dtype in DTYPES:
        ops = [SUM, PRODUCT, MIN, MAX] + ([AVG] if dtype.is_floating_point else [])
        for op in ops:
            for n in (1, 1000, 1 << 20):
                case += 1
                x = values(RANK, case, n, dtype, op).to(dev)
                a, b = x.clone(), x.clone()
                dist.all_reduce(a, op=op)
                dist.all_reduce(b, op=op, group=nccl)
                c.same(f"all_reduce {dtype} {OP_NAMES[op]} n={n}", a.cpu(), b.cpu())
        case += 1
        n = 64 * WORLD
        x = values(RANK, case, n, dtype, SUM).to(dev)
        for name, fn in (
                ("broadcast", lambda t, g: dist.broadcast(t, 0, group=g)),
                ("reduce", lambda t, g: dist.reduce(t, 0, group=g))):
            a, b = x.clone(), x.clone()
            fn(a, None)
            fn(b, nccl)
            c.same(f"{name} {dtype}", a.cpu(), b.cpu())
        out_a = torch.zeros(WORLD * n, dtype=dtype, device=dev)
        out_b = out_a.clone()
        dist.all_gather_into_tensor(out_a, x)
        dist.all_gather_into_tensor(out_b, x, group=nccl)
        c.same(f"all_gather_into_tensor {dtype}", out_a.cpu(), out_b.cpu())
        la = [torch.zeros(n, dtype=dtype, device=dev) for _ in range(WORLD)]
        lb = [t.clone() for t in la]
        dist.all_gather(la, x)
        dist.all_gather(lb, x, group=nccl)
        for r in range(WORLD):
            c.same(f"all_gather {dtype} slot {r}", la[r].cpu(), lb[r].cpu())
        ra = torch.zeros(n // WORLD, dtype=dtype, device=dev)
        rb = ra.clone()
        dist.reduce_scatter_tensor(ra, x)
        dist.reduce_scatter_tensor(rb, x, group=nccl)
        c.same(f"reduce_scatter_tensor {dtype}", ra.cpu(), rb.cpu())
        ta, tb = torch.zeros_like(x), torch.zeros_like(x)
        dist.all_to_all_single(ta, x)
        dist.all_to_all_single(tb, x, group=nccl)
        c.same(f"all_to_all_single {dtype}", ta.cpu(), tb.cpu())
        if dtype.is_floating_point:
            a, b = x.clone(), x.clone()
            dist.all_reduce(a, op=dist._make_nccl_premul_sum(0.5))
            dist.all_reduce(b, op=dist._make_nccl_premul_sum(0.5), group=nccl)
            c.same(f"all_reduce premul_sum {dtype}", a.cpu(), b.cpu())
    # A non-contiguous CUDA tensor: staged, reduced, copied back.
    base = torch.arange(48, dtype=torch.float32, device=dev).reshape(6, 8) * (RANK + 1)
    col = base[:, 3]
    dist.all_reduce(col)
    c.same("all_reduce of a strided column", col.cpu(),
           torch.arange(48.).reshape(6, 8)[:, 3] * sum(r + 1 for r in range(WORLD)))
    dist.barrier()
    c.finish(f"CUDA ops against nccl ({WORLD} ranks)")
    dist.destroy_process_group()


def scenario_streams():
    """torch's Work semantics on CUDA: an async all_reduce on a side stream,
    wait() makes the current stream wait (the host does not block), the
    future completes with the outputs; the caching allocator keeps a buffer
    in use until NCCL's stream is done with it."""
    torch.cuda.set_device(device())
    init("collie", timeout_s=120)
    c = Checks()
    dev = device()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        t = torch.full((1 << 22,), float(RANK + 1), device=dev)
        w = dist.all_reduce(t, async_op=True)
        w.wait()  # side waits for the collective
        t.mul_(2)  # ordered after it on `side`
    torch.cuda.synchronize()
    total = float(sum(r + 1 for r in range(WORLD)))
    c.true("async all_reduce then an op on the same stream", torch.all(t == 2 * total).item(),
           str(t[:4]))
    t = torch.ones(1000, device=dev)
    fut = dist.all_reduce(t, async_op=True).get_future()
    got = fut.wait()[0]
    c.true("the future's value", torch.all(got == WORLD).item(), str(got[:4]))
    # A tensor freed right after an async call must not be reused while the
    # collective reads it: recordStream keeps its block.
    for _ in range(20):
        x = torch.full((1 << 20,), 1.0, device=dev)
        dist.all_reduce(x, async_op=True)
        del x
        y = torch.zeros(1 << 20, device=dev)  # would take x's block at once without it
        y.add_(1)
    torch.cuda.synchronize()
    c.finish("CUDA streams and Work")
    dist.destroy_process_group()


def scenario_ddp():
    """One DDP training step on CUDA over collie and over torch's nccl:
    the same weights."""
    torch.cuda.set_device(device())
    init("collie", timeout_s=120)
    nccl = dist.new_group(backend="nccl")
    c = Checks()
    dev = device()

    def trained(group):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).to(dev)
        ddp = nn.parallel.DistributedDataParallel(model, device_ids=[dev.index],
                                                  process_group=group)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        g = torch.Generator(device=dev).manual_seed(RANK)
        for _ in range(3):
            x = torch.randn(32, 64, device=dev, generator=g)
            y = torch.randint(0, 10, (32,), device=dev, generator=g)
            loss = nn.functional.cross_entropy(ddp(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return [p.detach().cpu() for p in model.parameters()]

    for i, (a, b) in enumerate(zip(trained(None), trained(nccl))):
        c.same(f"DDP on CUDA: parameter {i}", a, b)
    c.finish("DDP on CUDA")
    dist.destroy_process_group()


def scenario_no_shrink_once_nccl():
    """A group whose CUDA tensors have an NCCL communicator cannot shrink
    (collie's NCCL backend has no shrink): supports_shrinking turns False
    with the first CUDA operation, and a direct shrink says why."""
    torch.cuda.set_device(device())
    init("collie", timeout_s=120)
    c = Checks()
    backend = collie_torch.backend(None, "cuda")
    c.true("supports_shrinking before any CUDA operation", backend.supports_shrinking is True)
    t = torch.ones(8, device=device())
    dist.all_reduce(t)
    torch.cuda.synchronize()
    c.true("not once the NCCL communicator exists", backend.supports_shrinking is False)
    try:
        backend.shrink([WORLD - 1])
        c.true("shrink raises", False)
    except RuntimeError as e:
        c.true("shrink names NCCL", "NCCL" in str(e), str(e))
    c.finish("no shrink once NCCL is in use")
    dist.destroy_process_group()


if __name__ == "__main__":
    run_scenario(globals())
