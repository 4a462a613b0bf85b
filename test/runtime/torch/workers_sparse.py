"""The ranks of the collie_torch tests of sparse all_reduce:
<venv>/bin/python workers_sparse.py SCENARIO [ARGS...]

collie sums sparse COO tensors as torch's gloo does (all_gather of every
rank's indices and values, summed locally in rank order, written into the
input with copy_; runtime/torch/backend_sparse.cc). Each scenario runs the
same calls over collie (the default group) and over gloo (a group of the
same ranks) in one job and compares the results bit for bit: both sum the
same tensors in the same order.
"""
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn

import collie_torch  # noqa: F401  (torch autoloads it too)
from workers import Checks, RANK, WORLD, init, run_scenario, same_bits

warnings.filterwarnings("ignore")

# (sizes, sparse_dim, dtype, nnz per rank): random indices with duplicates,
# so inputs are uncoalesced; an nnz of 0 is a rank without a non-zero.
# (No complex case: torch's all_reduce hands the backend view_as_real(t),
# which for a sparse tensor is a new tensor, so neither gloo nor collie can
# write the sum into a complex sparse input.)
CASES = [
    ((20,), 1, torch.float32, [5, 9, 3]),
    ((40, 6), 1, torch.float32, [12, 0, 7]),   # hybrid: values are rows of 6
    ((8, 5), 2, torch.float64, [10, 4, 6]),
    ((6, 7, 3), 2, torch.float32, [9, 9, 1]),  # sparse 2 dims, dense 1
    ((30,), 1, torch.int64, [8, 2, 0]),
    ((16, 4), 1, torch.bfloat16, [6, 6, 6]),
    ((12,), 1, torch.int32, [4, 5, 6]),
    ((25, 3), 1, torch.float32, [0, 0, 0]),   # no rank has a non-zero
    ((1000, 16), 1, torch.float32, [300, 50, 211]),
]


def sparse_input(case, rank):
    """Rank `rank`'s input of case `case` (uncoalesced, with duplicates)."""
    sizes, sparse_dim, dtype, nnzs = CASES[case]
    nnz = nnzs[rank % len(nnzs)]
    g = torch.Generator().manual_seed(7000 + 100 * case + rank)
    indices = torch.stack([torch.randint(0, sizes[d], (nnz,), generator=g)
                           for d in range(sparse_dim)]) if nnz else \
        torch.zeros((sparse_dim, 0), dtype=torch.long)
    shape = (nnz,) + tuple(sizes[sparse_dim:])
    if dtype.is_complex:
        values = torch.complex(torch.randn(shape, generator=g), torch.randn(shape, generator=g))
    elif dtype.is_floating_point:
        values = torch.randn(shape, generator=g, dtype=torch.float64)
    else:
        values = torch.randint(-50, 50, shape, generator=g)
    return torch.sparse_coo_tensor(indices, values.to(dtype), sizes)


def same_sparse(c, name, got, want):
    c.true(name + ": layout", got.layout == torch.sparse_coo and want.layout == torch.sparse_coo,
           f"{got.layout} vs {want.layout}")
    c.true(name + ": coalesced", got.is_coalesced() == want.is_coalesced(),
           f"{got.is_coalesced()} vs gloo's {want.is_coalesced()}")
    c.true(name + ": sizes", got.shape == want.shape, f"{got.shape} vs {want.shape}")
    c.same(name + ": indices", got._indices(), want._indices())
    c.same(name + ": values", got._values(), want._values())


def scenario_allreduce():
    """Every case over collie and over gloo, blocking and asynchronous (the
    Work's result and future hold the input, which holds the sum): the same
    indices and values, bit for bit; and the dense sum of all ranks'
    inputs, to a few roundings."""
    init("collie", timeout_s=120)
    gloo = dist.new_group(backend="gloo")
    c = Checks()
    for case in range(len(CASES)):
        want = sparse_input(case, RANK)
        dist.all_reduce(want, group=gloo)
        mine = sparse_input(case, RANK)
        dist.all_reduce(mine)
        same_sparse(c, f"case {case}", mine, want)
        dense = sum(sparse_input(case, r).to_dense().to(torch.complex128 if want.is_complex()
                                                        else torch.float64)
                    for r in range(WORLD))
        c.true(f"case {case}: the dense sum", torch.allclose(
            mine.to_dense().to(dense.dtype), dense, rtol=1e-2, atol=1e-2),
            "differs from the sum of the ranks' dense tensors")
        # Asynchronous, with the Work's result and future.
        mine = sparse_input(case, RANK)
        work = dist.all_reduce(mine, async_op=True)
        fut = work.get_future()
        work.wait()
        same_sparse(c, f"case {case} async", mine, want)
        same_sparse(c, f"case {case} async: result()", work.result()[0], want)
        same_sparse(c, f"case {case} async: future", fut.wait()[0], want)
    # A dense all_reduce after them: the group is as it was.
    x = torch.ones(5)
    dist.all_reduce(x)
    c.same("dense all_reduce afterwards", x, torch.full((5,), float(WORLD)))
    c.finish(f"sparse all_reduce vs gloo ({WORLD} ranks, {len(CASES)} cases)")
    dist.destroy_process_group()


class SparseNet(nn.Module):
    """An embedding bag of tokens (sparse gradients) and a dense head."""

    def __init__(self, vocab=200, dim=16, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, sparse=True)
        self.head = nn.Linear(dim, classes)

    def forward(self, tokens):
        return self.head(self.embed(tokens).mean(1))


def ddp_weights(group, steps):
    torch.manual_seed(0)
    model = SparseNet()
    ddp = nn.parallel.DistributedDataParallel(model, process_group=group)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.5)
    g = torch.Generator().manual_seed(300 + RANK)
    for _ in range(steps):
        # Each rank's batch touches its own rows of the embedding (and some
        # rows of the other's): the sparse gradients differ in nnz.
        tokens = torch.randint(0, 120 + 40 * RANK, (8, 5), generator=g)
        y = torch.randint(0, 4, (8,), generator=g)
        loss = nn.functional.cross_entropy(ddp(tokens), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert model.embed.weight.grad.layout == torch.sparse_coo, model.embed.weight.grad.layout
    return [p.detach().clone() for p in model.parameters()]


def scenario_ddp(steps="6"):
    """DDP over nn.Embedding(sparse=True) and a Linear, SGD: the same
    weights over collie as over gloo, bit for bit at 2 ranks (to rtol 1e-5
    at 3, where the Linear's dense sums round differently); and the
    embedding's gradient is sparse, so the sparse path ran."""
    init("collie", timeout_s=120)
    gloo = dist.new_group(backend="gloo")
    c = Checks()
    mine = ddp_weights(None, int(steps))
    theirs = ddp_weights(gloo, int(steps))
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if WORLD == 2:
            c.same(f"DDP parameter {i}", a, b)
        else:
            # The sparse sums are gloo's bits at any size (scenario
            # allreduce), but collie's dense all_reduce of the head's
            # gradients adds 3 ranks in another order than gloo's ring: the
            # last bit differs, and the steps carry it into the embedding.
            c.count += 1
            diff = (a - b).abs().max().item()
            print(f"rank {RANK}: DDP parameter {i}: max |collie - gloo| {diff:.3g}", flush=True)
            if not torch.allclose(a, b, rtol=1e-5, atol=1e-6):
                c.failures.append(f"DDP parameter {i}: max |difference| {diff:.3g} beyond "
                                  "rtol 1e-5, atol 1e-6")
    torch.manual_seed(0)
    start = SparseNet()
    c.true("the embedding was trained", not same_bits(mine[0], start.embed.weight.detach()),
           "its weights are the initial ones")
    c.finish(f"DDP with a sparse embedding vs gloo ({WORLD} ranks, {steps} steps)")
    dist.destroy_process_group()


def scenario_refused():
    """Ops other than SUM are refused at the call, naming the op and what
    to do; tensors of different sizes on different ranks are refused on
    every rank, naming the rank; the group works afterwards."""
    init("collie", timeout_s=60)
    c = Checks()
    t = sparse_input(0, RANK)
    pg = dist.distributed_c10d._get_default_group()

    def refused(name, fn, *words):
        try:
            fn()
        except RuntimeError as e:
            msg = str(e)
            print(f"rank {RANK}: {name}: {msg}", flush=True)
            c.true(name, all(w in msg for w in words), f"message {msg!r} lacks {words}")
        else:
            c.true(name, False, "did not raise")

    for op, name in ((dist.ReduceOp.MAX, "MAX"), (dist.ReduceOp.AVG, "AVG"),
                     (dist.ReduceOp.PRODUCT, "PRODUCT")):
        refused(f"sparse {name}", lambda: dist.all_reduce(t, op=op), name, "sparse", "SUM",
                f"rank {RANK}")
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.MIN
    refused("sparse MIN through the process group", lambda: pg.allreduce([t], opts).wait(),
            "MIN", "SUM")
    # Rank 1 passes a longer tensor: every rank refuses, naming the other.
    odd = torch.sparse_coo_tensor([[0, 1]], torch.ones(2), (20 + RANK,))
    refused("sizes differ between ranks", lambda: dist.all_reduce(odd), "every rank must",
            f"rank {1 - RANK if WORLD == 2 else 0}")
    mine = sparse_input(1, RANK)
    dist.all_reduce(mine)
    want = sum(sparse_input(1, r).to_dense().double() for r in range(WORLD))
    c.true("sparse sum afterwards", torch.allclose(mine.to_dense().double(), want, atol=1e-5),
           "wrong")
    x = torch.ones(3)
    dist.all_reduce(x)
    c.same("dense all_reduce afterwards", x, torch.full((3,), float(WORLD)))
    c.finish("sparse refusals")
    dist.destroy_process_group()


if __name__ == "__main__":
    run_scenario(globals())
