"""The ranks of the collie_torch shrink tests: <venv>/bin/python workers_shrink.py SCENARIO [ARGS...]

A rank dies (SIGKILL, sent to itself in the middle of a loop of
collectives, so that nothing outside has to time it); the survivors catch
the error of the collective it left, call torch's
dist.shrink_group([dead]) and carry on in the group it returns. The store
is a file (init_method file://, harness.py's "file"), so it outlives every
rank. Every group has a timeout of 60 s: nothing waits longer, and the
checks bound how long detection and shrink took well below it.
"""
import gc
import os
import signal
import sys
import time
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist

import collie_torch
from workers import Checks, RANK, WORLD, error_of, run_scenario, same_bits

warnings.filterwarnings("ignore")

TIMEOUT_S = 60
# A shrink that degenerated into waiting for a report until the deadline
# would take TIMEOUT_S; a rank that calls shrink_group first also waits for
# the slowest survivor to notice the failure (seconds on a loaded machine).
SHRINK_BOUND_S = 30
FLAGS = {"default": None, "abort": None}  # filled once torch says it has shrink_group


def init():
    dist.init_process_group("collie", init_method=os.environ["COLLIE_TEST_INIT"], rank=RANK,
                            world_size=WORLD, timeout=timedelta(seconds=TIMEOUT_S))
    torch.set_num_threads(1)
    if not hasattr(dist, "shrink_group"):
        print(f"rank {RANK}: torch {torch.__version__} has no dist.shrink_group")
        sys.exit(1)
    FLAGS["default"], FLAGS["abort"] = (dist.distributed_c10d.SHRINK_DEFAULT,
                                        dist.distributed_c10d.SHRINK_ABORT)


def die():
    """SIGKILL, as a crash or the OOM killer would: no goodbye to anyone."""
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def fails(what, fn, c):
    """fn must raise a RuntimeError (torch's DistBackendError is one);
    returns its message and how long it took."""
    start = time.monotonic()
    e = error_of(fn)
    elapsed = time.monotonic() - start
    c.true(f"{what} raises a RuntimeError", isinstance(e, RuntimeError), repr(e))
    print(f"rank {RANK}: {what} raised after {elapsed:.2f} s: {e}", flush=True)
    return str(e), elapsed


def loop_until_failure(c, victims, group=None, steps=6, kill_at=2, members=None):
    """all_reduces of (old rank + 1) on `group`, checked each time; the
    victims die before step `kill_at`. Returns the message of the survivor's
    failed step and how long it took to raise. `members`: the old ranks
    of the group (default: its global ranks, or every rank)."""
    if members is None:
        members = dist.get_process_group_ranks(group) if group is not None else list(range(WORLD))
    for step in range(steps):
        if RANK in victims and step == kill_at:
            die()
        t = torch.full((1 << 14,), float(RANK + 1))
        if step < kill_at:
            dist.all_reduce(t, group=group)
            c.same(f"step {step}", t, torch.full((1 << 14,), float(sum(r + 1 for r in members))))
            continue
        return fails(f"step {step}'s all_reduce with {victims} dead",
                     lambda: dist.all_reduce(t, group=group), c)
    raise AssertionError("no step failed")


def check_new_group(c, group, survivors, label):
    """The survivors' group works and numbers them densely in the old order."""
    me = survivors.index(RANK)
    c.true(f"{label}: rank", dist.get_rank(group) == me, f"{dist.get_rank(group)}, want {me}")
    c.true(f"{label}: size", dist.get_world_size(group) == len(survivors),
           f"{dist.get_world_size(group)}, want {len(survivors)}")
    for n in (1, 1000, 1 << 16):  # the small path, and the ring's
        t = torch.full((n,), float(RANK + 1))
        dist.all_reduce(t, group=group)
        c.same(f"{label}: all_reduce of {n}", t, torch.full((n,), float(sum(r + 1 for r in survivors))))
    order = torch.zeros(len(survivors), dtype=torch.int64)
    dist.all_gather_into_tensor(order, torch.tensor([RANK]), group=group)
    c.true(f"{label}: all_gather names the old ranks in the new order",
           order.tolist() == survivors, str(order.tolist()))
    b = torch.tensor([float(RANK)])
    dist.broadcast(b, group=group, group_src=0)
    c.same(f"{label}: broadcast from new rank 0", b, torch.tensor([float(survivors[0])]))


def timed_shrink(exclude, **kwargs):
    start = time.monotonic()
    group = dist.shrink_group(exclude, **kwargs)
    elapsed = time.monotonic() - start
    print(f"rank {RANK}: shrink_group({exclude}) took {elapsed:.3f} s", flush=True)
    return group, elapsed


# ---------------------------------------------------------------------------

def scenario_default_group(victim, flags):
    """The default group loses `victim`; the survivors shrink it. torch
    replaces the default group (and destroys the others: a collie new_group
    made before is gone); the old group's backend refuses every call; a
    new_group of the new default group works."""
    init()
    victim = int(victim)
    c = Checks()
    survivors = [r for r in range(WORLD) if r != victim]
    old = dist.group.WORLD
    old_backend = collie_torch.backend()
    c.true("supports_shrinking", old_backend.supports_shrinking is True,
           repr(old_backend.supports_shrinking))
    pair = dist.new_group([0, 1])
    e, detected = loop_until_failure(c, [victim])
    c.true("the failure is seen within 20 s", detected < 20, f"{detected:.1f} s")
    # An operation issued on the broken group before the shrink: it fails
    # (SHRINK_ABORT fails it at once; SHRINK_DEFAULT lets it end, and on a
    # broken group that is a failure too).
    pending = dist.all_reduce(torch.ones(8), async_op=True)
    new, took = timed_shrink([victim], shrink_flags=FLAGS[flags])
    c.true("shrink well within the timeout", took < SHRINK_BOUND_S, f"{took:.1f} s")
    c.true("the new group is the default group", dist.group.WORLD is new and new is not old)
    c.true("world size", dist.get_world_size() == WORLD - 1, str(dist.get_world_size()))
    check_new_group(c, None, survivors, "new default group")
    fails("the operation pending at the shrink", pending.wait, c)
    msg, _ = fails("the old group's backend", lambda: old_backend.allreduce([torch.ones(4)]).wait(), c)
    c.true("the old backend's error says why", any(w in msg for w in ("revoked", "shut down", "broken")), msg)
    c.true("the old group is no longer torch's", error_of(lambda: dist.all_reduce(torch.ones(4), group=old))
           is not None)
    if RANK in (0, 1):
        c.true("a group made before the shrink is destroyed",
               error_of(lambda: dist.all_reduce(torch.ones(4), group=pair)) is not None)
    c.true("the new backend supports shrinking too", collie_torch.backend().supports_shrinking is True)
    sub = dist.new_group([0, 1])  # new ranks
    if dist.get_rank() in (0, 1):
        t = torch.full((4,), float(RANK + 1))
        dist.all_reduce(t, group=sub)
        c.same("new_group of the new default group", t,
               torch.full((4,), float(survivors[0] + 1 + survivors[1] + 1)))
    for step in range(3):  # the loop goes on
        t = torch.full((100,), float(step))
        dist.all_reduce(t)
        c.same(f"step {step} after the shrink", t, torch.full((100,), float(step * (WORLD - 1))))
    dist.barrier()
    dist.destroy_process_group()
    c.finish(f"shrink of the default group ({flags}), rank {victim} killed")


def scenario_sub_group():
    """A collie new_group of ranks 0, 1, 2 loses rank 2; ranks 0 and 1 shrink
    that group (with pg_options: a timeout of 45 s). The default group stays
    torch's default group (rank 3, not in the sub-group, never notices
    anything and leaves). The sub-group's ranks are its global ranks: torch
    2.11-2.15's shrink_group maps the survivors' global ranks through the
    group ranks it excludes, which is right only then."""
    init()
    c = Checks()
    sub = dist.new_group([0, 1, 2])
    world = dist.group.WORLD
    if RANK == 3:
        dist.destroy_process_group()
        c.finish("outside the sub-group")
        return
    e, detected = loop_until_failure(c, [2], group=sub)
    old_backend = sub._get_backend(torch.device("cpu"))
    # pg_options reach the backend: its timeout bounds the shrink and is the
    # new group's.
    options = torch._C._distributed_c10d.Backend.Options("collie", timedelta(seconds=45))
    new, took = timed_shrink([2], group=sub, pg_options=options)
    new_timeout = new._get_backend(torch.device("cpu")).timeout
    c.true("the new group's timeout is pg_options'", new_timeout == timedelta(seconds=45),
           str(new_timeout))
    c.true("shrink well within the timeout", took < SHRINK_BOUND_S, f"{took:.1f} s")
    c.true("the default group is unchanged", dist.group.WORLD is world and dist.get_world_size() == 4)
    c.true("a new group", new is not sub)
    c.true("global ranks of the new group", dist.get_process_group_ranks(new) == [0, 1],
           str(dist.get_process_group_ranks(new)))
    check_new_group(c, new, [0, 1], "shrunk sub-group")
    msg, _ = fails("the old sub-group's backend", lambda: old_backend.allreduce([torch.ones(4)]).wait(), c)
    c.true("the old backend's error says why", any(w in msg for w in ("revoked", "shut down", "broken")), msg)
    dist.destroy_process_group(new)
    c.finish("shrink of a sub-group")


def scenario_wrong_list():
    """Ranks 2 and 3 die; the survivors first ask to exclude only [3]. The
    agreement excludes [2, 3], and torch's numbering would be wrong, so the
    shrink raises a RuntimeError naming [2, 3]; asking again with that list
    succeeds."""
    init()
    c = Checks()
    loop_until_failure(c, [2, 3])
    msg, _ = fails("shrink_group([3]) with ranks 2 and 3 dead", lambda: dist.shrink_group([3]), c)
    c.true("the error names the agreed ranks", "[2, 3]" in msg and "[3]" in msg, msg)
    c.true("the default group is still the old one", dist.get_world_size() == 4)
    new, _ = timed_shrink([2, 3])
    check_new_group(c, None, [0, 1], "after asking again")
    dist.destroy_process_group()
    c.finish("shrink with the wrong list, then the right one")


def scenario_twice():
    """Two failures, one after the other: of 4 ranks, rank 3 dies and the
    others shrink; later old rank 1 dies and old ranks 0 and 2 shrink the
    shrunk default group again (the new group's backend shrinks too)."""
    init()
    c = Checks()
    loop_until_failure(c, [3])
    timed_shrink([3])
    check_new_group(c, None, [0, 1, 2], "after the first shrink")
    loop_until_failure(c, [1], members=[0, 1, 2])
    timed_shrink([1])  # new rank 1 is old rank 1
    check_new_group(c, None, [0, 2], "after the second shrink")
    dist.destroy_process_group()
    c.finish("two shrinks in a row")


# ---------------------------------------------------------------------------
# DDP: a training loop that loses a rank in a backward and carries on.

def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(16, 32, generator=g), torch.randint(0, 4, (16,), generator=g)


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def scenario_ddp(victim, steps="8", kill_at="3"):
    """DDP (SGD) over collie; the victim SIGKILLs itself in its comm hook at
    step `kill_at`, so the survivors are inside that step's gradient
    all_reduce (or, if slow, the one before: the failure notice ends it).
    Each survivor's backward raises; it shrinks the default group, wraps its
    model in a new DDP on the new group (which broadcasts new rank 0's
    weights), takes new rank 0's step, redoes it and trains to `steps`. The
    survivors end with the same bits, and each post-shrink step equals a
    local reference: plain SGD on the mean gradient of the survivors'
    batches (exact at two survivors, within float rounding at more)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    init()
    victim, steps, kill_at = int(victim), int(steps), int(kill_at)
    survivors = [r for r in range(WORLD) if r != victim]
    c = Checks()
    model = make_model()
    lr = 0.05
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    state = {"step": 0}

    def hook(_, bucket):
        if RANK == victim and state["step"] == kill_at:
            die()
        return default_hooks.allreduce_hook(None, bucket)

    ddp = DDP(model)
    ddp.register_comm_hook(None, hook)
    step, reference, recovered = 0, None, False
    while step < steps:
        state["step"] = step
        x, y = batch(RANK, step)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        e = error_of(loss.backward)
        if e is not None:
            # A survivor may still be finishing the step before: the victim
            # left it, and a peer's failure notice ends it here too.
            c.true("the failure is in the victim's step or the one before",
                   step in (kill_at - 1, kill_at) and not recovered, f"step {step}: {e}")
            if recovered:
                break
            print(f"rank {RANK}: step {step}'s backward raised {type(e).__name__}: {e}", flush=True)
            # Nothing may keep the old DDP's reducer (and its autograd
            # hooks, which would run on the old group) alive.
            del ddp, loss, e
            gc.collect()
            _, took = timed_shrink([victim])
            c.true("shrink well within the timeout", took < SHRINK_BOUND_S, f"{took:.1f} s")
            ddp = DDP(model)  # on the new default group: new rank 0's weights
            # ... and new rank 0's step, which those weights belong to.
            agreed = torch.tensor([step])
            dist.broadcast(agreed, 0)
            step = int(agreed.item())
            reference = make_model()
            reference.load_state_dict(model.state_dict())
            recovered = True
            continue  # the same step again, on the survivors
        optimizer.step()
        if recovered:
            ref_opt = torch.optim.SGD(reference.parameters(), lr=lr)
            ref_opt.zero_grad()
            for r in survivors:
                xr, yr = batch(r, step)
                (torch.nn.functional.cross_entropy(reference(xr), yr) / len(survivors)).backward()
            ref_opt.step()
            if len(survivors) == 2:
                c.same(f"step {step}: weights vs the local reference", flat(model), flat(reference))
            else:
                diff = (flat(model) - flat(reference)).abs().max().item()
                c.true(f"step {step}: weights vs the local reference", diff < 1e-6,
                       f"max |difference| {diff:.3g}")
                reference.load_state_dict(model.state_dict())  # no drift across steps
        step += 1
    c.true("recovered", recovered)
    mine = flat(model)
    everyone = [torch.empty_like(mine) for _ in survivors]
    dist.all_gather(everyone, mine)
    for r, w in zip(survivors, everyone):
        c.true(f"old rank {r}'s weights are this rank's bits", same_bits(w, mine))
    c.true("trained after the shrink", not torch.equal(mine, flat(make_model())))
    dist.destroy_process_group()
    c.finish(f"DDP over {WORLD} ranks losing rank {victim}, {steps} steps")


if __name__ == "__main__":
    run_scenario(globals())
