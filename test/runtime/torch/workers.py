"""The ranks of the collie_torch tests: <venv>/bin/python workers.py SCENARIO [ARGS...]

Each rank reads torch's environment (RANK, WORLD_SIZE; COLLIE_TEST_INIT is
the init_method, env:// when unset), runs one scenario and exits 0, or
prints what went wrong and exits 1. harness.py starts them. collie_torch is
found the way a user's program finds it: torch loads it through its
"torch.backends" entry point (COLLIE_TEST_EXPLICIT_IMPORT=1 imports it by
name instead).
"""
import os
import sys
import time
import traceback
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist

if os.environ.get("COLLIE_TEST_EXPLICIT_IMPORT") == "1":
    import collie_torch  # noqa: F401  registers the backend "collie"
else:
    # Registered by the entry point on `import torch`: no import needed.
    assert "COLLIE" in dist.Backend._plugins, "torch did not autoload collie_torch"
import collie_torch  # for _work_exception and backend()

warnings.filterwarnings("ignore")  # deprecation notices for _all_gather_base & co

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
SUM, PRODUCT, MIN, MAX, AVG = (dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN,
                               dist.ReduceOp.MAX, dist.ReduceOp.AVG)
OP_NAMES = {SUM: "sum", PRODUCT: "product", MIN: "min", MAX: "max", AVG: "avg"}


def init(backend, timeout_s=None):
    kwargs = {"timeout": timedelta(seconds=timeout_s)} if timeout_s else {}
    dist.init_process_group(backend, init_method=os.environ.get("COLLIE_TEST_INIT", "env://"),
                            rank=RANK, world_size=WORLD, **kwargs)
    torch.set_num_threads(1)


class Checks:
    """Collects failed comparisons so that one run reports all of them."""

    def __init__(self):
        self.failures, self.count = [], 0

    def same(self, name, got, want):
        """Bit for bit: same dtype, shape and bytes (NaN-safe, -0.0 != 0.0)."""
        self.count += 1
        if not same_bits(got, want):
            self.failures.append(f"{name}: got {short(got)}, want {short(want)}")

    def close(self, name, got, want, rtol):
        self.count += 1
        if got.dtype != want.dtype or not torch.allclose(got, want, rtol=rtol, atol=0):
            self.failures.append(f"{name}: got {short(got)}, want {short(want)} (rtol {rtol})")

    def true(self, name, cond, detail=""):
        self.count += 1
        if not cond:
            self.failures.append(f"{name}: {detail}")

    def finish(self, what):
        if self.failures:
            print(f"rank {RANK}: {len(self.failures)} of {self.count} {what} checks failed:")
            for f in self.failures[:40]:
                print("  " + f)
            sys.exit(1)
        print(f"rank {RANK}: {what}: {self.count} checks passed", flush=True)


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(as_bytes(a), as_bytes(b))


def as_bytes(t):
    t = t.detach().resolve_conj().resolve_neg().contiguous().reshape(-1)
    return t.view(torch.uint8)


def short(t):
    flat = t.detach().reshape(-1)
    head = flat[:6].tolist() if t.dtype != torch.bfloat16 else flat[:6].float().tolist()
    return f"{t.dtype} {tuple(t.shape)} {head}{'...' if flat.numel() > 6 else ''}"


def values(rank, case, n, dtype, op):
    """Rank `rank`'s input of one case, regenerable on every rank (so each
    rank can compute the reference locally). Integer-valued and small, so
    that every reduction order gives the same bits: sums stay exact, products
    stay small powers, averages divide a multiple of the world size."""
    g = torch.Generator().manual_seed(1000 * case + rank)
    if op == PRODUCT:
        v = torch.randint(1, 3, (n,), generator=g)
    elif op == AVG:
        v = torch.randint(-3, 4, (n,), generator=g) * WORLD
    elif dtype == torch.uint8 or dtype == torch.bool:
        v = torch.randint(0, 4, (n,), generator=g)
    else:
        v = torch.randint(-8, 9, (n,), generator=g)
    if dtype.is_complex:
        return torch.complex(v.float(), torch.flip(v, [0]).float()).to(dtype)
    return v.to(dtype)


def reference(op, inputs):
    stacked = torch.stack([x.to(torch.complex128 if x.dtype.is_complex else torch.float64)
                           for x in inputs])
    if op in (SUM, AVG):
        r = stacked.sum(0)
        if op == AVG:
            r = r / WORLD
    elif op == PRODUCT:
        r = stacked.prod(0)
    elif op == MIN:
        r = stacked.min(0).values
    else:
        r = stacked.max(0).values
    return r.to(inputs[0].dtype)


# ---------------------------------------------------------------------------
# Every operation against torch's gloo backend on the same inputs.

REDUCE_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
                 torch.int64, torch.uint8, torch.int8, torch.bool, torch.complex64]
MOVE_DTYPES = REDUCE_DTYPES + [torch.int16, torch.complex128]
# gloo (torch 2.x) refuses int16 in every collective ("Invalid scalar type");
# those calls are checked against the local reference alone.
GLOO_MISSING = {torch.int16}
SIZES = [1, 7, 1000, 40003]


def ops_for(dtype):
    if dtype.is_complex:
        return [SUM, AVG]
    ops = [SUM, PRODUCT, MIN, MAX]
    return ops + [AVG] if dtype.is_floating_point else ops


def premul_reference(factor, inputs):
    """NCCL's PREMUL_SUM: every rank's input times the factor, then summed,
    in the input's dtype (the factor is exact in binary, so every order of
    the additions gives these bits)."""
    scaled = [(x.double() * factor) for x in inputs]
    return torch.stack(scaled).sum(0).to(inputs[0].dtype)


def scenario_ops(default_backend):
    """default_backend "gloo": collie is new_group(backend="collie") inside a
    gloo default group; "collie": init_process_group("collie"), gloo a new
    group. Either way both groups span every rank and see the same inputs:
    every call is made on both and the results compared bit for bit, and
    with a reference computed locally."""
    init(default_backend)
    other = dist.new_group(backend="gloo" if default_backend == "collie" else "collie")
    collie = None if default_backend == "collie" else other
    gloo = other if default_backend == "collie" else None
    assert dist.get_backend(collie) == "collie", dist.get_backend(collie)
    c = Checks()
    case = 0

    def on_gloo(dtype, fn):
        """Runs fn on gloo when gloo has the dtype (every rank skips alike)."""
        if dtype in GLOO_MISSING:
            return False
        fn()
        return True

    # all_reduce: every dtype, op and size, against gloo and the reference.
    for dtype in REDUCE_DTYPES:
        for op in ops_for(dtype):
            for n in SIZES:
                case += 1
                inputs = [values(r, case, n, dtype, op) for r in range(WORLD)]
                want = reference(op, inputs)
                t = inputs[RANK].clone()
                dist.all_reduce(t, op=op, group=collie)
                name = f"all_reduce {dtype} {OP_NAMES[op]} n={n}"
                c.same(name + " vs reference", t, want)
                g = inputs[RANK].clone()
                dist.all_reduce(g, op=op, group=gloo)
                if dtype == torch.bool:
                    # gloo adds bool bytes (True + True leaves a byte of 2);
                    # collie keeps torch's 0/1 bytes. Same truth values.
                    g = g.view(torch.uint8) != 0
                c.same(name + " vs gloo", t, g)

    # PREMUL_SUM (FSDP's gradient divide factor): a scalar and a one-element
    # tensor factor, in all_reduce and reduce_scatter; gloo has no PREMUL_SUM.
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        for factor in (0.25, torch.tensor([0.5], dtype=dtype)):
            case += 1
            n = 3 * WORLD + 1
            inputs = [values(r, case, n * WORLD, dtype, SUM) for r in range(WORLD)]
            f = factor if isinstance(factor, float) else factor.item()
            op = dist._make_nccl_premul_sum(factor)
            t = inputs[RANK].clone()
            dist.all_reduce(t, op=op, group=collie)
            c.same(f"all_reduce premul_sum {dtype} x {f}", t, premul_reference(f, inputs))
            out = torch.zeros(n, dtype=dtype)
            before = inputs[RANK].clone()
            dist.reduce_scatter_tensor(out, inputs[RANK], op=op, group=collie)
            c.same(f"reduce_scatter_tensor premul_sum {dtype} x {f}", out,
                   premul_reference(f, inputs)[RANK * n:(RANK + 1) * n])
            c.same(f"reduce_scatter_tensor premul_sum {dtype} leaves its input", inputs[RANK],
                   before)

    # Random (not integer-valued) float32 sums: at 2 ranks every algorithm
    # adds the same two numbers, so the bits match gloo's; at more ranks the
    # order of the additions differs (gloo's ring vs collie's), so the bound
    # is a few float32 roundings of the sum.
    for n in SIZES:
        case += 1
        g = torch.Generator().manual_seed(case * 1000 + RANK)
        x = torch.randn(n, generator=g)
        a, b = x.clone(), x.clone()
        dist.all_reduce(a, group=collie)
        dist.all_reduce(b, group=gloo)
        if WORLD == 2:
            c.same(f"all_reduce float32 random sum n={n} vs gloo", a, b)
        else:
            c.true(f"all_reduce float32 random sum n={n} vs gloo",
                   torch.allclose(a, b, rtol=1e-5, atol=1e-5 * WORLD), f"max diff "
                   f"{(a - b).abs().max().item()}")

    # broadcast: every dtype, roots 0 and the last rank.
    for dtype in MOVE_DTYPES:
        for root in sorted({0, WORLD - 1}):
            for n in (1, 1000):
                case += 1
                src = values(root, case, n, dtype, SUM)
                t = values(RANK, case, n, dtype, SUM) if RANK != root else src.clone()
                dist.broadcast(t, root, group=collie)
                c.same(f"broadcast {dtype} root {root} n={n}", t, src)
                g = values(RANK, case, n, dtype, SUM)
                if on_gloo(dtype, lambda: dist.broadcast(g, root, group=gloo)):
                    c.same(f"broadcast {dtype} root {root} n={n} vs gloo", t, g)

    # all_gather (list form), all_gather_into_tensor.
    for dtype in MOVE_DTYPES:
        for n in (1, 1000):
            case += 1
            inputs = [values(r, case, n, dtype, SUM) for r in range(WORLD)]
            outs = [torch.zeros(n, dtype=dtype) for _ in range(WORLD)]
            dist.all_gather(outs, inputs[RANK], group=collie)
            for r in range(WORLD):
                c.same(f"all_gather {dtype} n={n} slot {r}", outs[r], inputs[r])
            flat = torch.zeros(WORLD * n, dtype=dtype)
            dist.all_gather_into_tensor(flat, inputs[RANK], group=collie)
            c.same(f"all_gather_into_tensor {dtype} n={n}", flat, torch.cat(inputs))
            g = [torch.zeros(n, dtype=dtype) for _ in range(WORLD)]
            gflat = torch.zeros(WORLD * n, dtype=dtype)

            def both():
                dist.all_gather(g, inputs[RANK], group=gloo)
                dist.all_gather_into_tensor(gflat, inputs[RANK], group=gloo)
            if on_gloo(dtype, both):
                for r in range(WORLD):
                    c.same(f"all_gather {dtype} n={n} slot {r} vs gloo", outs[r], g[r])
                c.same(f"all_gather_into_tensor {dtype} n={n} vs gloo", flat, gflat)
    case += 1

    def coalesced_inputs(r, dtypes):
        return [values(r, case, 3, dtypes[0], SUM), values(r, case, 5, dtypes[1], SUM),
                values(r, case, 2, dtypes[2], SUM).reshape(1, 2)]

    same = (torch.float32,) * 3
    mine = coalesced_inputs(RANK, same)
    outs = [[torch.zeros_like(x) for x in mine] for _ in range(WORLD)]
    dist.all_gather_coalesced(outs, mine, group=collie)
    g = [[torch.zeros_like(x) for x in mine] for _ in range(WORLD)]
    dist.all_gather_coalesced(g, mine, group=gloo)
    for r in range(WORLD):
        for i, want in enumerate(coalesced_inputs(r, same)):
            c.same(f"all_gather_coalesced rank {r} tensor {i}", outs[r][i], want)
            c.same(f"all_gather_coalesced rank {r} tensor {i} vs gloo", outs[r][i], g[r][i])
    # torch's Python wrapper wants one dtype; the process group takes any mix.
    mixed = (torch.float32, torch.int64, torch.bool)
    mine = coalesced_inputs(RANK, mixed)
    outs = [[torch.zeros_like(x) for x in mine] for _ in range(WORLD)]
    collie_pg = collie if collie is not None else dist.distributed_c10d._get_default_group()
    collie_pg.allgather_coalesced(outs, mine).wait()
    for r in range(WORLD):
        for i, want in enumerate(coalesced_inputs(r, mixed)):
            c.same(f"allgather_coalesced of mixed dtypes, rank {r} tensor {i}", outs[r][i], want)

    # reduce_scatter (list form) and reduce_scatter_tensor, against gloo.
    for dtype in REDUCE_DTYPES:
        for op in ops_for(dtype):
            case += 1
            n = 501
            inputs = [values(r, case, WORLD * n, dtype, op) for r in range(WORLD)]
            want = reference(op, inputs)[RANK * n:(RANK + 1) * n]
            out = torch.zeros(n, dtype=dtype)
            dist.reduce_scatter(out, list(inputs[RANK].split(n)), op=op, group=collie)
            c.same(f"reduce_scatter {dtype} {OP_NAMES[op]}", out, want)
            base = torch.zeros(n, dtype=dtype)
            dist.reduce_scatter_tensor(base, inputs[RANK].clone(), op=op, group=collie)
            c.same(f"reduce_scatter_tensor {dtype} {OP_NAMES[op]}", base, want)
            g = torch.zeros(n, dtype=dtype)
            dist.reduce_scatter_tensor(g, inputs[RANK].clone(), op=op, group=gloo)
            c.same(f"reduce_scatter_tensor {dtype} {OP_NAMES[op]} vs gloo", base, g)

    # all_reduce_coalesced: one flattened all_reduce, as gloo does.
    case += 1
    ts = [values(RANK, case, n, torch.float32, SUM) for n in (3, 1000, 1)]
    ts[1] = ts[1].reshape(10, 100)
    gs = [t.clone() for t in ts]
    dist.all_reduce_coalesced(ts, group=collie)
    dist.all_reduce_coalesced(gs, group=gloo)
    for i in range(len(ts)):
        c.same(f"all_reduce_coalesced tensor {i} vs gloo", ts[i], gs[i])

    # Empty tensors and barrier.
    e = torch.zeros(0)
    dist.all_reduce(e, group=collie)
    dist.broadcast(e, 0, group=collie)
    c.true("empty tensors", e.numel() == 0)
    dist.barrier(group=collie)
    c.finish(f"operations against gloo (default group {default_backend}, {WORLD} ranks)")
    dist.destroy_process_group()


def scenario_noncontiguous():
    """torch's semantics: a collective acts on a tensor's elements, whatever
    its strides; nothing around a view is touched."""
    init("collie")
    c = Checks()
    base = torch.arange(48, dtype=torch.float32).reshape(6, 8) * (RANK + 1)
    before = base.clone()
    col = base[:, 3]  # stride 8
    dist.all_reduce(col)
    total = sum(r + 1 for r in range(WORLD))
    c.same("all_reduce of a column", col, torch.arange(48.).reshape(6, 8)[:, 3] * total)
    rest = torch.ones(6, 8, dtype=torch.bool)
    rest[:, 3] = False
    c.same("all_reduce leaves the rest of the base alone", base[rest], before[rest])

    t = (torch.arange(24, dtype=torch.int64).reshape(4, 6) * (RANK + 1)).t()  # transposed
    dist.broadcast(t, WORLD - 1)
    c.same("broadcast of a transposed tensor", t, (torch.arange(24).reshape(4, 6) * WORLD).t())

    src = (torch.arange(30, dtype=torch.float64).reshape(5, 6) + 100 * RANK)[:, ::2]
    outs = [torch.zeros(3, 5, dtype=torch.float64).t() for _ in range(WORLD)]
    dist.all_gather(outs, src)
    for r in range(WORLD):
        c.same(f"all_gather strided in and out, slot {r}", outs[r],
               (torch.arange(30, dtype=torch.float64).reshape(5, 6) + 100 * r)[:, ::2])
    big = torch.zeros(WORLD * 4, 3)[:, 1]  # an output with stride 3
    dist.all_gather_into_tensor(big, torch.full((4,), float(RANK)))
    c.same("all_gather_into_tensor into a strided output", big,
           torch.arange(WORLD).repeat_interleave(4).float())
    out = torch.zeros(10, 2)[:, 0]
    dist.reduce_scatter(out, [torch.full((10,), float(RANK + r)) for r in range(WORLD)])
    c.same("reduce_scatter into a strided output", out,
           torch.full((10,), float(sum(q + RANK for q in range(WORLD)))))
    leaf = torch.ones(4, 4, requires_grad=True)
    with torch.no_grad():
        view = leaf[:, 1]
    dist.all_reduce(view)
    c.same("all_reduce of a view of a leaf that requires grad", leaf[:, 1].detach(),
           torch.full((4,), float(WORLD)))
    c.finish("non-contiguous tensors")
    dist.destroy_process_group()


# ---------------------------------------------------------------------------
# Work objects, futures, timeouts and what is not there yet.

def scenario_work():
    init("collie", timeout_s=60)
    c = Checks()
    t = torch.full((1000,), float(RANK + 1))
    w = dist.all_reduce(t, async_op=True)
    c.true("wait() returns True", w.wait() is True)
    c.true("is_completed after wait", w.is_completed())
    c.true("is_success after wait", w.is_success())
    # (torch's Python binding of Work.exception() cannot convert the
    # std::exception_ptr it returns; collie_torch._C._work_exception reads it.)
    c.true("exception() of a successful work is None", collie_torch._C._work_exception(w) is None)
    total = float(sum(r + 1 for r in range(WORLD)))
    c.same("result() holds the output", w.result()[0], torch.full((1000,), total))

    # Futures: the value is the list of outputs, callbacks chain on it (DDP's
    # comm hook does), and a future asked for after completion is complete.
    t = torch.ones(10)
    fut = dist.all_reduce(t, async_op=True).get_future()
    chained = fut.then(lambda f: f.value()[0] * 2)
    c.same("future value", fut.wait()[0], torch.full((10,), float(WORLD)))
    c.same("chained future", chained.wait(), torch.full((10,), 2.0 * WORLD))
    w = dist.all_reduce(torch.ones(3), async_op=True)
    w.wait()
    c.true("future of a completed work", w.get_future().done())

    # Many operations in flight, waited in reverse: issue order is kept.
    ts = [torch.full((100,), float(i + RANK)) for i in range(20)]
    works = [dist.all_reduce(x, async_op=True) for x in ts]
    for w in reversed(works):
        w.wait()
    for i, x in enumerate(ts):
        c.same(f"in-flight all_reduce {i}", x, torch.full((100,), float(WORLD * i + sum(range(WORLD)))))
    # asyncOp: blocking calls run on the calling thread, at once; an
    # asynchronous one that nobody waits for runs on the worker: the other
    # ranks' blocking call completes.
    backend = collie_torch.backend()
    before = backend.queue_stats()
    for _ in range(10):
        dist.all_reduce(torch.ones(4))
    after = backend.queue_stats()
    c.true("blocking calls run on the caller's thread",
           after["inline_runs"] - before["inline_runs"] == 10
           and after["worker_runs"] == before["worker_runs"], f"{before} -> {after}")
    if RANK == 0:
        pending = dist.all_reduce(torch.ones(4), async_op=True)
        deadline = time.monotonic() + 30
        while not pending.is_completed() and time.monotonic() < deadline:
            time.sleep(0.001)
        c.true("an operation nobody waits for completes", pending.is_completed())
    else:
        dist.all_reduce(torch.ones(4))

    # wait(timeout): a positive timeout that passes raises, naming the op;
    # the operation itself keeps running and completes once the peers call.
    # The peers call only after rank 0's wait has timed out (a store key).
    store = dist.distributed_c10d._get_default_store()
    if RANK == 0:
        late = dist.all_reduce(torch.ones(2), async_op=True)
        try:
            late.wait(timeout=timedelta(milliseconds=200))
            c.true("wait(timeout) raises when the peers are late", False, "it returned")
        except RuntimeError as e:
            c.true("wait(timeout) message", "timed out" in str(e) and "allreduce" in str(e), str(e))
        store.set("work_test/rank0_timed_out", "1")
        late.wait()
        c.true("the late operation completes", late.is_success())
    else:
        store.wait(["work_test/rank0_timed_out"], timedelta(seconds=60))
        dist.all_reduce(torch.ones(2))
    c.true("default group backend", dist.get_backend() == "collie", dist.get_backend())
    c.finish("Work and future")
    dist.destroy_process_group()


def scenario_more_ops():
    """Point-to-point, reduce, gather, scatter, all_to_all, the bitwise
    ReduceOps and int8/bool reductions (collie's own since issue 13), each
    against gloo and a local reference."""
    init("collie", timeout_s=60)
    gloo = dist.new_group(backend="gloo")
    c = Checks()
    case = 1000
    last = WORLD - 1

    # send/recv and isend/irecv: rank 0 to the last rank, tags kept apart.
    a = values(0, case, 1000, torch.float32, SUM)
    b = values(1, case, 7, torch.int64, SUM)
    if RANK == 0:
        dist.send(a, last, tag=3)
        w = dist.isend(b, last, tag=4)
        w.wait()
    elif RANK == last:
        got_a = torch.zeros(1000)
        dist.recv(got_a, 0, tag=3)
        got_b = torch.zeros(7, dtype=torch.int64)
        w = dist.irecv(got_b, 0, tag=4)
        w.wait()
        c.same("send/recv float32 x 1000", got_a, a)
        c.same("isend/irecv int64 x 7 with a tag", got_b, b)
    # recv from any source: the last rank sends to rank 0, which learns who.
    if RANK == last:
        dist.send(b, 0)
    elif RANK == 0:
        got = torch.zeros(7, dtype=torch.int64)
        sender = dist.recv(got)
        c.same("recv from any source", got, b)
        c.true("recv from any source names the sender", sender == last, f"sender {sender}")
    dist.barrier()

    def gloo_runs(fn):
        try:
            fn()
            return True
        except RuntimeError as e:
            if "Invalid scalar type" not in str(e) and "not supported" not in str(e):
                raise
            return False

    # reduce to the last rank: the root gets the reduction, the others keep
    # their tensors.
    for dtype, op in ((torch.float32, SUM), (torch.int32, MAX), (torch.float64, PRODUCT)):
        case += 1
        inputs = [values(r, case, 1001, dtype, op) for r in range(WORLD)]
        t = inputs[RANK].clone()
        dist.reduce(t, last, op=op)
        want = reference(op, inputs) if RANK == last else inputs[RANK]
        c.same(f"reduce {dtype} {OP_NAMES[op]} to rank {last}", t, want)
        g = inputs[RANK].clone()
        dist.reduce(g, last, op=op, group=gloo)
        if RANK == last:
            c.same(f"reduce {dtype} {OP_NAMES[op]} vs gloo", t, g)

    # gather to rank 0 and scatter from the last rank.
    for dtype in (torch.float32, torch.int64, torch.bool, torch.int8):
        case += 1
        inputs = [values(r, case, 333, dtype, SUM) for r in range(WORLD)]
        outs = [torch.zeros(333, dtype=dtype) for _ in range(WORLD)] if RANK == 0 else None
        dist.gather(inputs[RANK], outs, dst=0)
        if RANK == 0:
            for r in range(WORLD):
                c.same(f"gather {dtype} slot {r}", outs[r], inputs[r])
        out = torch.zeros(333, dtype=dtype)
        dist.scatter(out, inputs if RANK == last else None, src=last)
        c.same(f"scatter {dtype}", out, inputs[RANK])
        g = [torch.zeros(333, dtype=dtype) for _ in range(WORLD)] if RANK == 0 else None
        if gloo_runs(lambda: dist.gather(inputs[RANK], g, dst=0, group=gloo)) and RANK == 0:
            for r in range(WORLD):
                c.same(f"gather {dtype} slot {r} vs gloo", outs[r], g[r])

    # all_to_all_single: equal parts and uneven split sizes; all_to_all lists.
    case += 1
    n = 4
    mine = values(RANK, case, WORLD * n, torch.float32, SUM)
    out = torch.zeros(WORLD * n)
    dist.all_to_all_single(out, mine)
    want = torch.cat([values(r, case, WORLD * n, torch.float32, SUM)[RANK * n:(RANK + 1) * n]
                      for r in range(WORLD)])
    c.same("all_to_all_single equal parts", out, want)
    g = torch.zeros(WORLD * n)
    dist.all_to_all_single(g, mine, group=gloo)
    c.same("all_to_all_single vs gloo", out, g)
    # Rank s sends s + d + 1 rows of 3 to rank d.
    rows = lambda s, d: s + d + 1  # noqa: E731
    case += 1
    send = [values(RANK, case + d, rows(RANK, d) * 3, torch.int32, SUM).reshape(-1, 3)
            for d in range(WORLD)]
    inp = torch.cat(send)
    out = torch.zeros(sum(rows(s, RANK) for s in range(WORLD)), 3, dtype=torch.int32)
    dist.all_to_all_single(out, inp, [rows(s, RANK) for s in range(WORLD)],
                           [rows(RANK, d) for d in range(WORLD)])
    want = torch.cat([values(s, case + RANK, rows(s, RANK) * 3, torch.int32, SUM).reshape(-1, 3)
                      for s in range(WORLD)])
    c.same("all_to_all_single with split sizes", out, want)
    outs = [torch.zeros(rows(s, RANK), 3, dtype=torch.int32) for s in range(WORLD)]
    dist.all_to_all(outs, send)
    for s in range(WORLD):
        c.same(f"all_to_all from rank {s}", outs[s], want.split([rows(x, RANK) for x in range(WORLD)])[s])

    # Bitwise ReduceOps on integers and bool, int8 and bool reductions.
    for dtype in (torch.int32, torch.int64, torch.uint8, torch.int8):
        for op, fold in ((dist.ReduceOp.BAND, lambda x, y: x & y),
                         (dist.ReduceOp.BOR, lambda x, y: x | y),
                         (dist.ReduceOp.BXOR, lambda x, y: x ^ y)):
            case += 1
            inputs = [torch.randint(0, 100, (257,), dtype=dtype,
                                    generator=torch.Generator().manual_seed(case * 10 + r))
                      for r in range(WORLD)]
            want = inputs[0].clone()
            for x in inputs[1:]:
                want = fold(want, x)
            t = inputs[RANK].clone()
            dist.all_reduce(t, op=op)
            c.same(f"all_reduce {dtype} {op}", t, want)
            g = inputs[RANK].clone()
            if gloo_runs(lambda: dist.all_reduce(g, op=op, group=gloo)):
                c.same(f"all_reduce {dtype} {op} vs gloo", t, g)
    case += 1
    flags = [torch.tensor([r == 0, True, False, r % 2 == 1]) for r in range(WORLD)]
    t = flags[RANK].clone()
    dist.all_reduce(t, op=MAX)
    c.same("all_reduce bool max (any)", t, torch.stack(flags).any(0))
    t = flags[RANK].clone()
    dist.all_reduce(t, op=MIN)
    c.same("all_reduce bool min (all)", t, torch.stack(flags).all(0))
    ints = [values(r, case, 99, torch.int8, SUM) for r in range(WORLD)]
    t = ints[RANK].clone()
    dist.all_reduce(t)
    c.same("all_reduce int8 sum", t, reference(SUM, ints))
    c.finish(f"point-to-point, rooted collectives, all_to_all, bitwise ops ({WORLD} ranks)")
    dist.destroy_process_group()


def scenario_unsupported():
    """Bad arguments fail at the call, with a clear message, and leave the
    group usable."""
    init("collie", timeout_s=60)
    c = Checks()
    t = torch.ones(4)

    def refused(name, fn, *words):
        try:
            fn()
        except RuntimeError as e:
            msg = str(e)
            c.true(name, all(w in msg for w in words), f"message {msg!r} lacks {words}")
        else:
            c.true(name, False, "did not raise")

    refused("all_reduce int16", lambda: dist.all_reduce(torch.ones(4, dtype=torch.int16)),
            "cannot reduce", "Short")
    refused("avg of integers", lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32), op=AVG),
            "avg", "rank %d" % RANK)
    pg = dist.distributed_c10d._get_default_group()
    opts = dist.AllreduceOptions()
    opts.reduceOp = PRODUCT
    # (torch's wrapper refuses this itself; through the process group collie does)
    refused("product of complex", lambda: pg.allreduce([torch.ones(4, dtype=torch.complex64)],
                                                       opts).wait(), "ComplexFloat", "sum and avg")
    refused("sparse tensor, max", lambda: dist.all_reduce(torch.ones(4).to_sparse(), op=MAX),
            "sparse", "SUM")
    refused("broadcast root out of range", lambda: dist.broadcast(t, WORLD + 3), "root")
    refused("all_gather with a wrong slot", lambda: dist.all_gather(
        [torch.ones(4)] * (WORLD - 1) + [torch.ones(5)], t), "must match")
    refused("all_gather_into_tensor with a wrong size", lambda: dist.all_gather_into_tensor(
        torch.ones(WORLD * 4 + 1), t), "world size")
    # The group still works after all of that.
    x = torch.ones(3)
    dist.all_reduce(x)
    c.same("all_reduce after refused calls", x, torch.full((3,), float(WORLD)))
    c.finish("refusals")
    dist.destroy_process_group()


# ---------------------------------------------------------------------------
# Failures: a rank that dies, a mismatched call, a rank that never calls.

def expect_error(what, fn):
    """Runs fn, which must raise a RuntimeError; returns its message and how
    long it took. A call that returns fails the rank."""
    start = time.monotonic()
    try:
        fn()
    except RuntimeError as e:
        elapsed = time.monotonic() - start
        print(f"rank {RANK}: raised after {elapsed:.1f} s: {e}", flush=True)
        return str(e), elapsed
    print(f"rank {RANK}: {what} returned")
    sys.exit(1)


def error_of(fn):
    """The exception fn raises (None when it returns)."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return e
    return None


def scenario_kill(victim, strict):
    """The victim dies (SIGKILL) before the second all_reduce; the others'
    all_reduce must raise within seconds -- the group's timeout is 120 s --
    naming a rank. With strict=1 (two ranks: the survivor talks to the victim
    directly) it must name the victim."""
    init("collie", timeout_s=120)
    victim = int(victim)
    t = torch.ones(1 << 16)
    dist.all_reduce(t)
    if RANK == victim:
        os.kill(os.getpid(), 9)
    work = dist.all_reduce(t, async_op=True)
    future = work.get_future()
    e, elapsed = expect_error(f"all_reduce with rank {victim} dead", work.wait)
    # strict: the survivor's peer is the victim, named with its address.
    named = (f"rank {victim} (127.0.0.1:" in e) if strict == "1" else "rank" in e
    c = Checks()
    c.true("named within 20 s", named and elapsed < 20, f"{elapsed:.1f} s: {e}")
    c.true("is_completed after the failure", work.is_completed())
    c.true("not is_success", not work.is_success())
    c.true("exception() holds collie's message", collie_torch._C._work_exception(work) in e,
           repr(collie_torch._C._work_exception(work)))
    c.true("wait() raises DistBackendError", isinstance(error_of(work.wait), dist.DistBackendError),
           repr(error_of(work.wait)))
    fe, _ = expect_error("the failed work's future", future.wait)
    c.true("the future raises collie's message", e in fe, fe)
    c.finish("a killed rank")


def scenario_ddp_kill(victim, strict, steps="3"):
    """torch's DDP over collie under a launcher; the victim is SIGKILLed from
    outside in the middle of step `steps`'s backward, while the others wait
    in that step's gradient all_reduce. The victim's comm hook writes its
    pid to the FIFO named by COLLIE_TEST_KILL_FIFO (the test kills it when
    it reads the pid) before handing its bucket to collie, so every survivor
    is inside the collective when the victim dies. A survivor's backward
    must raise within seconds (the group's timeout is 300 s) naming a rank;
    with strict=1 (two ranks) the victim with its address. Survivors ignore
    the launcher's SIGTERM, which comes as soon as it sees the victim die,
    to show their own reaction; they exit 0 when it is the expected one."""
    import signal

    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    victim, kill_step = int(victim), int(steps)
    if RANK != victim:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    init("collie", timeout_s=300)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    step = 0

    def hook(state, bucket):
        if RANK == victim and step == kill_step:
            with open(os.environ["COLLIE_TEST_KILL_FIFO"], "w") as fifo:
                fifo.write(f"{os.getpid()}\n")
            # Killed here; bounded in case the test never does.
            time.sleep(120)  # not synchronisation: the victim waits to be killed
            print(f"rank {RANK}: was not killed within 120 s")
            os._exit(3)
        return default_hooks.allreduce_hook(None, bucket)

    ddp.register_comm_hook(None, hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(RANK)
    for step in range(kill_step + 1):
        x, y = torch.randn(32, 64, generator=g), torch.randint(0, 8, (32,), generator=g)
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        optimizer.zero_grad()
        if step < kill_step:
            loss.backward()
            optimizer.step()
            continue
        e, elapsed = expect_error(f"backward of step {step} with rank {victim} killed",
                                  loss.backward)
    named = (f"rank {victim} (127.0.0.1:" in e) if strict == "1" else "rank " in e
    ok = named and elapsed < 30
    print(f"rank {RANK}: survivor {'ok' if ok else 'FAILED'}: step {kill_step}'s backward raised "
          f"after {elapsed:.2f} s (bound 30 s, group timeout 300 s)", flush=True)
    sys.exit(0 if ok else 1)


def scenario_mismatch(kind):
    """Ranks make different calls; every rank raises instead of hanging --
    in the mismatched call, or (a broadcast's root, which only sends and so
    cannot see what the others called) in the next one."""
    init("collie", timeout_s=120)

    def mismatched_then_barrier():
        if kind == "count":
            dist.all_reduce(torch.ones(100 + 10 * RANK))
        elif kind == "dtype":
            dist.all_reduce(torch.ones(64, dtype=torch.float32 if RANK == 0 else torch.float64))
        elif kind == "op":
            if RANK == 0:
                dist.broadcast(torch.ones(64), 0)
            else:
                dist.all_reduce(torch.ones(64))
        else:
            raise ValueError(kind)
        dist.barrier()

    _, elapsed = expect_error("the mismatched call and the barrier after it", mismatched_then_barrier)
    sys.exit(0 if elapsed < 60 else 1)


def scenario_timeout():
    """Rank 0 calls all_reduce, the others never do (they stay alive, so no
    connection closes): init_process_group's timeout, 3 s here, bounds it."""
    init("collie", timeout_s=3)
    store = dist.distributed_c10d._get_default_store()
    if RANK == 0:
        e, elapsed = expect_error("all_reduce without its peers",
                                  lambda: dist.all_reduce(torch.ones(8)))
        store.set("timeout_test/done", "1")
        # collie's own deadline (3 s), then a 1.5 s probe of the silent
        # peer; the bound leaves room for a loaded machine.
        sys.exit(0 if "timed out" in e and 2.5 <= elapsed < 30 else 1)
    store.wait(["timeout_test/done"], timedelta(seconds=120))
    sys.exit(0)


def scenario_abort():
    """abort() ends a call blocked in a collective at once: rank 1 never
    joins rank 0's all_reduce (the group's timeout is 300 s); a second
    thread of rank 0 aborts the group once rank 0 is inside the call. The
    call raises within seconds, naming the abort, and the group refuses
    later calls at once. Rank 1 sees its peer go away in its own next call."""
    import threading

    init("collie", timeout_s=300)
    c = Checks()
    dist.all_reduce(torch.ones(8))  # connected
    store = dist.distributed_c10d._get_default_store()
    pg = dist.distributed_c10d._get_default_group()
    if RANK == 0:
        t = torch.ones(1 << 20)
        work = dist.all_reduce(t, async_op=True)  # runs on the worker; rank 1 never joins

        def abort_when_inside():
            store.wait(["abort_test/rank1_ready"], timedelta(seconds=60))
            pg.abort()
        aborter = threading.Thread(target=abort_when_inside)
        aborter.start()
        store.set("abort_test/rank0_ready", "1")
        e, elapsed = expect_error("an all_reduce of an aborted group", work.wait)
        aborter.join()
        c.true("the blocked call ends within seconds", elapsed < 20, f"{elapsed:.1f} s")
        c.true("it names the abort", "abort" in e, e)
        e, elapsed = expect_error("a call after abort()", lambda: dist.all_reduce(torch.ones(2)))
        c.true("a later call fails at once", elapsed < 5 and "abort" in e, f"{elapsed:.1f} s: {e}")
        store.set("abort_test/rank0_done", "1")
        store.wait(["abort_test/rank1_done"], timedelta(seconds=60))
    else:
        store.wait(["abort_test/rank0_ready"], timedelta(seconds=60))
        store.set("abort_test/rank1_ready", "1")
        store.wait(["abort_test/rank0_done"], timedelta(seconds=60))
        e, elapsed = expect_error("a call with the peer aborted",
                                  lambda: dist.all_reduce(torch.ones(1 << 20)))
        c.true("the peer's call fails within seconds, naming rank 0", elapsed < 20 and "rank 0" in e,
               f"{elapsed:.1f} s: {e}")
        store.set("abort_test/rank1_done", "1")
    c.finish("abort")
    os._exit(0 if not c.failures else 1)  # the aborted group is not torn down


def scenario_monitored_and_timeout():
    """monitored_barrier through the group (torch's dist.monitored_barrier()
    takes gloo groups only): all ranks pass; then rank 1 stays away and rank
    0's barrier names it within the timeout. set_timeout on a second group:
    a collective a peer never joins raises after the new, shorter timeout.
    (Either failure breaks its group, as any timeout in collie does.)"""
    init("collie", timeout_s=300)
    c = Checks()
    pg = dist.distributed_c10d._get_default_group()
    store = dist.distributed_c10d._get_default_store()
    pg.monitored_barrier(timedelta(seconds=60), True)
    c.true("a monitored barrier every rank joins", True)
    sub = dist.new_group(backend="collie")
    dist.all_reduce(torch.ones(2), group=sub)  # connected
    sub.set_timeout(timedelta(seconds=2))
    if RANK == 0:
        e, elapsed = expect_error("an all_reduce after set_timeout(2 s) that rank 1 never joins",
                                  lambda: dist.all_reduce(torch.ones(4), group=sub))
        c.true("set_timeout bounds it", "timed out" in e and elapsed < 30, f"{elapsed:.1f} s: {e}")
        e, elapsed = expect_error("a monitored barrier rank 1 misses",
                                  lambda: pg.monitored_barrier(timedelta(seconds=2), True))
        c.true("rank 0 names the missing rank", "rank 1 did not arrive" in e and elapsed < 30,
               f"{elapsed:.1f} s: {e}")
        store.set("monitored/rank0_done", "1")
    else:
        store.wait(["monitored/rank0_done"], timedelta(seconds=120))
    c.finish("monitored_barrier and set_timeout")
    os._exit(0 if not c.failures else 1)  # rank 0's groups are broken by the timeouts


def scenario_exit_with_pending():
    """A program that ends without destroy_process_group() while one of its
    asynchronous operations is still running: rank 0 issues an all_reduce
    it never waits for and exits; rank 1 joins that all_reduce only once
    rank 0 has begun to exit (an atexit handler of rank 0's sets a key).
    collie lets the operation finish before Python's finalization (where a
    worker thread that drops a tensor is killed and the process aborts), so
    both ranks exit 0."""
    import atexit

    init("collie", timeout_s=120)
    store = dist.distributed_c10d._get_default_store()
    n = 1 << 22  # 16 MiB: the all_reduce outlasts the start of rank 0's exit
    if RANK == 0:
        # Never waited for; only the operation holds the tensor, so it drops
        # the last reference to it when it ends.
        dist.all_reduce(torch.full((n,), 1.0), async_op=True)
        # Registered after collie_torch's own: runs before it.
        atexit.register(lambda: store.set("exit_test/rank0_exiting", "1"))
        print("rank 0: exiting with an all_reduce pending", flush=True)
        sys.exit(0)
    store.wait(["exit_test/rank0_exiting"], timedelta(seconds=60))
    t = torch.full((n,), float(RANK + 1))
    dist.all_reduce(t)
    ok = torch.equal(t, torch.full((n,), float(sum(range(1, WORLD + 1)))))
    print(f"rank {RANK}: {'ok' if ok else 'WRONG'}", flush=True)
    sys.exit(0 if ok else 1)


def scenario_devices(spec):
    """A backend string with one backend per device ("cpu:collie,cuda:gloo"):
    torch creates a backend for each device and _get_backend answers for
    each; CPU collectives go to the CPU's. "cpu:collie,cuda:nccl" needs a GPU
    (torch refuses to create its NCCL backend without one)."""
    init(spec)
    c = Checks()
    pg = dist.distributed_c10d._get_default_group()
    names = dict(pair.split(":") for pair in spec.split(","))
    kinds = {"collie": "BackendCollie", "gloo": "ProcessGroupGloo", "nccl": "ProcessGroupNCCL"}
    for device, name in names.items():
        b = pg._get_backend(torch.device(device))
        c.true(f"{device} is {name}'s", type(b).__name__ == kinds[name], type(b).__name__)
    c.true("get_backend", dist.get_backend() == spec, dist.get_backend())
    t = torch.full((5,), float(RANK + 1))
    dist.all_reduce(t)
    c.same("a CPU all_reduce", t, torch.full((5,), float(sum(range(1, WORLD + 1)))))
    if names["cpu"] == "collie":
        stats = pg._get_backend(torch.device("cpu")).queue_stats()
        c.true("it ran on collie", stats["inline_runs"] >= 1, str(stats))
    # The single name "collie" serves both devices with one backend.
    both = dist.new_group(backend="collie")
    c.true("collie alone serves cpu and cuda, one backend",
           both._get_backend(torch.device("cpu")) is both._get_backend(torch.device("cuda")))
    c.finish(spec)
    dist.destroy_process_group()


def scenario_split():
    """ProcessGroup.split_group (what split_group() and DeviceMesh call on a
    device-bound group) asks each backend to split: collie's new_group over
    the ranks given, named by torch; ranks outside it get None."""
    init("collie", timeout_s=120)
    c = Checks()
    pg = dist.distributed_c10d._get_default_group()
    evens = [r for r in range(WORLD) if r % 2 == 0]
    odds = [r for r in range(WORLD) if r % 2 == 1]
    mine = evens if RANK % 2 == 0 else odds
    sub = pg.split_group(mine, group_name=f"split_{'even' if RANK % 2 == 0 else 'odd'}")
    c.true("a split group", sub is not None and sub.size() == len(mine),
           f"{sub and sub.size()} vs {len(mine)}")
    c.true("its rank", sub.rank() == mine.index(RANK), f"{sub.rank()}")
    backend = sub._get_backend(torch.device("cpu"))
    c.true("collie's backend under it", type(backend).__name__ == "BackendCollie",
           type(backend).__name__)
    t = torch.full((3,), float(RANK))
    work = sub.allreduce([t])
    work.wait()
    c.same("all_reduce over the split", t, torch.full((3,), float(sum(mine))))
    only_zero = pg.split_group([0], group_name="split_zero")
    c.true("a rank outside the split gets None", (only_zero is None) == (RANK != 0),
           repr(only_zero))
    c.true("sequence numbers count collectives",
           backend._get_sequence_number_for_group() == 1,
           str(backend._get_sequence_number_for_group()))
    dist.barrier()
    c.finish("split")
    dist.destroy_process_group()


# ---------------------------------------------------------------------------
# A smoke job for launchers (torchrun, collie-run) and init methods.

def scenario_smoke(backend="collie"):
    init(backend)
    t = torch.full((1000,), float(dist.get_rank() + 1))
    dist.all_reduce(t)
    want = float(sum(range(1, dist.get_world_size() + 1)))
    sub = dist.new_group(backend="collie")
    s = torch.ones(5)
    dist.all_reduce(s, group=sub)
    ok = torch.equal(t, torch.full((1000,), want)) and torch.equal(s, torch.full((5,), float(WORLD)))
    print(f"smoke rank {dist.get_rank()} of {dist.get_world_size()} backend "
          f"{dist.get_backend()}: {'ok' if ok else 'WRONG ' + str(t[:4])}", flush=True)
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


def scenario_agent_store(backend="collie", cycles="2"):
    """Under torchrun's static rendezvous the ranks meet through the agent's
    store (TORCHELASTIC_USE_AGENT_STORE=True: torch opens a client, nobody
    hosts a store of its own). Several cycles of init_process_group,
    collectives of every shape on the default group, new_group(backend=
    "collie") over all ranks and over ranks 0 and 1, and destroy.

    The first cycle uses env://. A later cycle passes init_process_group a
    client of the same agent store under a prefix of its own: the first
    cycle's keys are still in the agent's store, and a second default group
    gets the same group name, so its keys would meet the first cycle's
    (whatever the backend)."""
    c = Checks()
    c.true("TORCHELASTIC_USE_AGENT_STORE", os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
           repr(os.environ.get("TORCHELASTIC_USE_AGENT_STORE")))
    for cycle in range(int(cycles)):
        if cycle == 0:
            init(backend, timeout_s=120)
        else:
            agent = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), WORLD,
                                  False, timedelta(seconds=120))
            dist.init_process_group(backend, store=dist.PrefixStore(f"cycle{cycle}", agent),
                                    rank=RANK, world_size=WORLD, timeout=timedelta(seconds=120))
        c.true(f"cycle {cycle}: backend", dist.get_backend() == backend, dist.get_backend())
        base = 100 * cycle
        t = torch.full((1000,), float(base + RANK))
        dist.all_reduce(t)
        c.same(f"cycle {cycle}: all_reduce", t,
               torch.full((1000,), float(sum(base + r for r in range(WORLD)))))
        b = torch.full((7,), float(base + RANK), dtype=torch.float64)
        dist.broadcast(b, WORLD - 1)
        c.same(f"cycle {cycle}: broadcast", b,
               torch.full((7,), float(base + WORLD - 1), dtype=torch.float64))
        outs = [torch.zeros(3, dtype=torch.int64) for _ in range(WORLD)]
        dist.all_gather(outs, torch.full((3,), base + RANK, dtype=torch.int64))
        for r in range(WORLD):
            c.same(f"cycle {cycle}: all_gather slot {r}", outs[r],
                   torch.full((3,), base + r, dtype=torch.int64))
        out = torch.zeros(5)
        dist.reduce_scatter(out, [torch.full((5,), float(RANK * WORLD + d))
                                  for d in range(WORLD)])
        c.same(f"cycle {cycle}: reduce_scatter", out,
               torch.full((5,), float(sum(r * WORLD + RANK for r in range(WORLD)))))
        token = torch.tensor([base + RANK])
        if RANK == 0:
            dist.send(token, 1)
        elif RANK == 1:
            dist.recv(token, 0)
            c.same(f"cycle {cycle}: send/recv", token, torch.tensor([base]))
        everyone = dist.new_group(backend="collie")
        pair = dist.new_group(ranks=[0, 1], backend="collie")
        s = torch.ones(4)
        dist.all_reduce(s, group=everyone)
        c.same(f"cycle {cycle}: new_group of every rank", s, torch.full((4,), float(WORLD)))
        if RANK in (0, 1):
            p = torch.full((4,), float(RANK + 1))
            dist.all_reduce(p, group=pair)
            c.same(f"cycle {cycle}: new_group of ranks 0 and 1", p, torch.full((4,), 3.0))
        dist.barrier()
        dist.destroy_process_group()
    c.finish(f"agent store, {cycles} init/destroy cycles")


def run_scenario(scenarios):
    """A worker file's main: `python FILE SCENARIO [ARGS...]` calls
    scenarios["scenario_" + SCENARIO](*ARGS); a scenario that raises prints
    its traceback and fails the rank."""
    name, args = sys.argv[1], sys.argv[2:]
    try:
        scenarios["scenario_" + name](*args)
    except SystemExit:
        raise
    except BaseException:
        print(f"rank {RANK}: scenario {name} raised:")
        traceback.print_exc(file=sys.stdout)
        sys.exit(1)


if __name__ == "__main__":
    run_scenario(globals())
