"""The ranks of the collie_torch tests of point-to-point and pipeline
parallelism: <venv>/bin/python workers_pipeline.py SCENARIO [ARGS...]

pipeline [SCHEDULE,...|all]: torch.distributed.pipelining trains a tiny transformer
over collie (the default group) and over torch's gloo (new_group), one after
the other in the same processes, from the same weights on the same batches,
and every rank compares its stages' final weights. A pipeline only moves
activations and gradients from rank to rank (no reduction anywhere) and
every rank runs the same single-threaded code on the same bytes, so the
weights must be the same bits.

The other scenarios are hand-written schedules that post their receives
early, exactly as users write them, each over one backend (collie or gloo)
with a short timeout so that a hang fails in seconds rather than minutes.
"""
import math
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import collie_torch  # noqa: F401  (torch autoloads it too)
from workers import Checks, RANK, WORLD, init, run_scenario

# ---------------------------------------------------------------------------
# A tiny transformer, cut into pipeline stages.

VOCAB, DIM, HEADS, SEQ = 32, 16, 2, 8
STEPS, SEQS_PER_MICROBATCH = 3, 2


class Block(nn.Module):
    """Pre-norm self-attention and MLP."""

    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.attn = nn.MultiheadAttention(DIM, HEADS, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(DIM, 2 * DIM), nn.GELU(), nn.Linear(2 * DIM, DIM))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class Stage(nn.Module):
    """One pipeline stage: the embedding on the first, one block on each,
    the final norm and the head on the last."""

    def __init__(self, index, count):
        super().__init__()
        self.first, self.last = index == 0, index == count - 1
        if self.first:
            self.embed = nn.Embedding(VOCAB, DIM)
            self.pos = nn.Parameter(torch.randn(1, SEQ, DIM) * 0.02)
        self.block = Block()
        if self.last:
            self.norm = nn.LayerNorm(DIM)
            self.head = nn.Linear(DIM, VOCAB)

    def forward(self, x):
        if self.first:
            x = self.embed(x) + self.pos
        x = self.block(x)
        if self.last:
            x = self.head(self.norm(x))
        return x


def loss_fn(logits, target):
    return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))


# The schedules, and which stages each rank holds: one stage per rank, two
# stages looped (rank r: r and r + N) or two in a V (rank r: r and 2N - 1 - r).
SCHEDULES = {
    "GPipe": "single", "1F1B": "single", "Interleaved1F1B": "looped", "LoopedBFS": "looped",
    "InterleavedZeroBubble": "looped", "ZBVZeroBubble": "v", "DualPipeV": "v",
}


def stage_indices(layout):
    if layout == "single":
        return WORLD, [RANK]
    if layout == "looped":
        return 2 * WORLD, [RANK, RANK + WORLD]
    return 2 * WORLD, [RANK, 2 * WORLD - 1 - RANK]


def train(schedule_name, group):
    """STEPS steps of the schedule over `group`; this rank's stages'
    weights (initial and final) and the last stage's losses."""
    from torch.distributed import pipelining

    layout = SCHEDULES[schedule_name]
    count, mine = stage_indices(layout)
    torch.manual_seed(0)  # every rank builds every stage: the same weights everywhere
    stages_all = [Stage(i, count) for i in range(count)]
    modules = [stages_all[i] for i in mine]
    initial = {f"stage {i} {n}": p.detach().clone()
               for i, m in zip(mine, modules) for n, p in m.named_parameters()}
    stages = [pipelining.PipelineStage(m, i, count, torch.device("cpu"), group=group)
              for i, m in zip(mine, modules)]
    n_micro = 2 * WORLD  # the V and 1F1B schedules need at least one per stage
    cls = getattr(pipelining, "Schedule" + schedule_name)
    schedule = cls(stages[0] if layout == "single" else stages, n_micro, loss_fn=loss_fn)
    params = [p for m in modules for p in m.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-2)
    data = torch.Generator().manual_seed(1234)  # the same batches on every rank
    all_losses = []
    holds_first, holds_last = 0 in mine, count - 1 in mine
    for _ in range(STEPS):
        tokens = torch.randint(0, VOCAB, (n_micro * SEQS_PER_MICROBATCH, SEQ), generator=data)
        target = (tokens * 7 + 3) % VOCAB  # a learnable map
        opt.zero_grad()
        losses = []
        args = (tokens,) if holds_first else ()
        kwargs = {"target": target, "losses": losses} if holds_last else {}
        schedule.step(*args, **kwargs)
        opt.step()
        all_losses += [loss.detach().clone() for loss in losses]
    final = {f"stage {i} {n}": p.detach().clone()
             for i, m in zip(mine, modules) for n, p in m.named_parameters()}
    return initial, final, all_losses


def v_schedules_work():
    """torch 2.11's V schedules (ZBVZeroBubble, DualPipeV) open with a
    send from stage N-1 to stage N, which sit on the same rank: a send to
    the rank itself, which neither gloo nor collie makes (gloo: "Pair is
    not connected"). torch 2.15 passes that stage's shapes without one."""
    from torch.distributed.pipelining.stage import PipelineStage
    return not hasattr(PipelineStage, "_get_init_p2p_neighbors_ops")


def scenario_pipeline(names="all"):
    """Every schedule in `names` (comma-separated, or all), trained over
    collie and then over gloo: the same losses and weights, bit for bit."""
    init("collie", timeout_s=90)
    gloo = dist.new_group(backend="gloo")
    c = Checks()
    names = list(SCHEDULES) if names == "all" else names.split(",")
    if not v_schedules_work():
        left_out = [n for n in names if SCHEDULES[n] == "v"]
        names = [n for n in names if SCHEDULES[n] != "v"]
        if left_out:
            print(f"rank {RANK}: left out {', '.join(left_out)}: torch {torch.__version__}'s V "
                  "schedules send from a rank to itself, which gloo cannot either")
    for name in names:
        print(f"rank {RANK}: {name}", flush=True)
        start = time.perf_counter()
        initial, mine, my_losses = train(name, None)
        middle = time.perf_counter()
        _, theirs, their_losses = train(name, gloo)
        print(f"rank {RANK}: {name}: {middle - start:.2f} s over collie, "
              f"{time.perf_counter() - middle:.2f} s over gloo", flush=True)
        for key, w in mine.items():
            c.same(f"{name}: {key} after {STEPS} steps", w, theirs[key])
            c.true(f"{name}: {key} trained", not torch.equal(w, initial[key]),
                   "the weights did not change: the stage never stepped")
        c.true(f"{name}: the number of losses", len(my_losses) == len(their_losses),
               f"{len(my_losses)} over collie, {len(their_losses)} over gloo")
        for k, (a, b) in enumerate(zip(my_losses, their_losses)):
            c.same(f"{name}: loss of microbatch {k}", a, b)
            c.true(f"{name}: loss {k} finite", math.isfinite(a.item()), str(a.item()))
    c.finish(f"pipeline schedules {', '.join(names)}, {WORLD} ranks, collie vs gloo")
    dist.destroy_process_group()


# ---------------------------------------------------------------------------
# Hand-written schedules that post receives early. Each runs over one
# backend with a short timeout: a hang fails in seconds.

EARLY_TIMEOUT_S = 20


def scenario_recv_before_send(backend):
    """Rank 0: q = irecv(r, 1); send(s, 1); q.wait(). Rank 1: recv(r, 0);
    send(s, 0). Rank 0's receive is posted before its send, and rank 1's
    send comes only after its receive: the send must not wait behind it."""
    init(backend, timeout_s=EARLY_TIMEOUT_S)
    c = Checks()
    for n in (16, 1 << 18):  # 64 bytes and 1 MiB
        s = torch.arange(n, dtype=torch.float32) + 100 * RANK
        r = torch.zeros(n)
        if RANK == 0:
            q = dist.irecv(r, 1)
            dist.send(s, 1)
            q.wait()
        else:
            dist.recv(r, 0)
            dist.send(s, 0)
        c.same(f"{n * 4} bytes from rank {1 - RANK}", r,
               torch.arange(n, dtype=torch.float32) + 100 * (1 - RANK))
    c.finish(f"irecv posted before send ({backend})")
    dist.destroy_process_group()


def scenario_recv_around_all_reduce(backend):
    """Rank 0: q = irecv(r, 1); all_reduce(t); q.wait(). Rank 1:
    all_reduce(t); send(s, 0). The posted receive must not hold up the
    collective behind it."""
    init(backend, timeout_s=EARLY_TIMEOUT_S)
    c = Checks()
    for n in (16, 1 << 18):
        t = torch.full((n,), float(RANK + 1))
        s = torch.arange(n, dtype=torch.float32) + 7
        r = torch.zeros(n)
        if RANK == 0:
            q = dist.irecv(r, 1)
            dist.all_reduce(t)
            q.wait()
            c.same(f"{n * 4} bytes received around the all_reduce", r,
                   torch.arange(n, dtype=torch.float32) + 7)
        else:
            dist.all_reduce(t)
            dist.send(s, 0)
        c.same(f"all_reduce of {n * 4} bytes", t, torch.full((n,), 3.0))
    c.finish(f"irecv posted before an all_reduce ({backend})")
    dist.destroy_process_group()


def scenario_halo(backend):
    """A periodic 1-D halo exchange: every rank posts its receives from both
    neighbours, then sends to both, then waits; three rounds, small and
    large halos. Tags tell the leftward from the rightward halo (at two
    ranks both neighbours are the same rank)."""
    init(backend, timeout_s=EARLY_TIMEOUT_S)
    c = Checks()
    left, right = (RANK - 1) % WORLD, (RANK + 1) % WORLD
    RIGHTWARD, LEFTWARD = 1, 2
    for n in (16, 1 << 18):
        for rnd in range(3):
            def halo(rank, direction):
                return torch.arange(n, dtype=torch.float32) + 1000 * rank + 10 * rnd + direction
            from_left, from_right = torch.zeros(n), torch.zeros(n)
            reqs = [dist.irecv(from_left, left, tag=RIGHTWARD),
                    dist.irecv(from_right, right, tag=LEFTWARD)]
            reqs += [dist.isend(halo(RANK, RIGHTWARD), right, tag=RIGHTWARD),
                     dist.isend(halo(RANK, LEFTWARD), left, tag=LEFTWARD)]
            for q in reqs:
                q.wait()
            c.same(f"round {rnd}, {n * 4} bytes from the left (rank {left})", from_left,
                   halo(left, RIGHTWARD))
            c.same(f"round {rnd}, {n * 4} bytes from the right (rank {right})", from_right,
                   halo(right, LEFTWARD))
    c.finish(f"halo exchange, irecv before isend, {WORLD} ranks ({backend})")
    dist.destroy_process_group()


def scenario_tags_out_of_order(backend):
    """Rank 0 posts irecv(tag 2) then irecv(tag 1); rank 1 sends tag 1 then
    tag 2 with blocking sends: receives match by peer and tag, not by the
    order they were posted in."""
    init(backend, timeout_s=EARLY_TIMEOUT_S)
    c = Checks()
    if RANK == 0:
        two, one = torch.zeros(4), torch.zeros(4)
        q2 = dist.irecv(two, 1, tag=2)
        q1 = dist.irecv(one, 1, tag=1)
        q1.wait()
        q2.wait()
        c.same("the message of tag 1", one, torch.full((4,), 1.0))
        c.same("the message of tag 2", two, torch.full((4,), 2.0))
    else:
        dist.send(torch.full((4,), 1.0), 0, tag=1)
        dist.send(torch.full((4,), 2.0), 0, tag=2)
    c.finish(f"receives matched by tag, posted out of order ({backend})")
    dist.destroy_process_group()


if __name__ == "__main__":
    run_scenario(globals())
