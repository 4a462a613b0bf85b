"""The ranks of the collie_torch tests of threads sharing one group:
<venv>/bin/python workers_threads.py SCENARIO [ARGS...]

Two threads that issue calls on one group at once issue them in a different
order on each rank; collie refuses that (the C++ API's one-at-a-time rule,
runtime/process_group/serial_executor.h, rule 5) instead of mixing the ranks' data. Waiting for
another thread's asynchronous operations, and calls made one thread after
another, stay allowed.
"""
import json
import queue
import threading
import warnings

import torch
import torch.distributed as dist

import collie_torch  # noqa: F401  (torch autoloads it too)
from workers import Checks, RANK, WORLD, init, run_scenario

warnings.filterwarnings("ignore")


def scenario_two_threads():
    """Rank 0's two threads call all_reduce on the default group at once.
    Rank 1 makes no call until rank 0's threads are done, so whichever call
    of rank 0 comes first is still waiting for rank 1 when the other is
    issued: the calls meet every time, with no timing to win. Prints one
    RESULT line per rank: per thread on rank 0, whether its call returned
    and the error it raised, with the threads' ids."""
    from datetime import timedelta
    init("collie", timeout_s=60)
    store = dist.distributed_c10d._get_default_store()
    results = [dict(ok=False, error=None, type=None, tid=None) for _ in range(2)]
    if RANK == 0:
        start = threading.Barrier(2)

        def body(k):
            r = results[k]
            r["tid"] = threading.get_native_id()
            t = torch.full((64,), 1.0 if k == 0 else 1000.0)
            start.wait(timeout=60)
            try:
                dist.all_reduce(t)
                r["ok"] = True
            except Exception as e:  # noqa: BLE001
                r.update(error=str(e), type=type(e).__name__)

        threads = [threading.Thread(target=body, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        store.set("two_threads_done", "1")
        # Rank 0 hosts the store: it stays until rank 1 has seen the key
        # (its wait fails with "connection closed" if the host goes first).
        store.wait(["two_threads_seen"], timedelta(seconds=60))
    else:
        store.wait(["two_threads_done"], timedelta(seconds=60))
        store.set("two_threads_seen", "1")
    print("RESULT " + json.dumps({"rank": RANK, "threads": results}), flush=True)
    try:
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001  (a broken group may say so)
        print(f"rank {RANK}: destroy_process_group raised: {e}", flush=True)


def scenario_waiter_thread(ops="200"):
    """The patterns that stay allowed: thread A issues asynchronous
    all_reduces (and some blocking ones of its own) while thread B waits
    for A's Works (wait() and the future, which run queued operations on
    B); then A makes blocking calls and hands over to B, which makes its
    own. Every sum is right and nothing raises."""
    init("collie", timeout_s=60)
    ops = int(ops)
    c = Checks()
    handed = queue.Queue()
    errors = []

    def issuer():
        try:
            for i in range(ops):
                t = torch.full((32,), float(i))
                handed.put((i, t, dist.all_reduce(t, async_op=True)))
                if i % 20 == 19:
                    b = torch.full((8,), float(-i))
                    dist.all_reduce(b)
                    c.true(f"A's blocking all_reduce {i}", torch.equal(b, torch.full(
                        (8,), float(-i * WORLD))), str(b[:2]))
        except Exception as e:  # noqa: BLE001
            errors.append(f"issuer: {type(e).__name__}: {e}")
        finally:
            handed.put(None)

    def waiter():
        try:
            while (item := handed.get()) is not None:
                i, t, work = item
                if i % 2:
                    work.wait()
                else:
                    work.get_future().wait()
                c.true(f"async all_reduce {i} waited by B", torch.equal(
                    t, torch.full((32,), float(i * WORLD))), str(t[:2]))
        except Exception as e:  # noqa: BLE001
            errors.append(f"waiter: {type(e).__name__}: {e}")

    a, b = threading.Thread(target=issuer), threading.Thread(target=waiter)
    a.start()
    b.start()
    a.join()
    b.join()
    c.true("no thread raised", not errors, "; ".join(errors))

    # One thread after another: A's blocking calls, then B's.
    handover = threading.Event()

    def blocking(name, base, wait_for=None, then=None):
        try:
            if wait_for:
                wait_for.wait()
            for i in range(20):
                t = torch.full((16,), float(base + i))
                dist.all_reduce(t)
                c.true(f"{name}'s call {i}", torch.equal(
                    t, torch.full((16,), float((base + i) * WORLD))), str(t[:2]))
        except Exception as e:  # noqa: BLE001
            errors.append(f"{name}: {type(e).__name__}: {e}")
        finally:
            if then:
                then.set()

    a = threading.Thread(target=blocking, args=("A", 100, None, handover))
    b = threading.Thread(target=blocking, args=("B", 500, handover))
    b.start()
    a.start()
    a.join()
    b.join()
    c.true("no thread raised in the hand-over", not errors, "; ".join(errors))
    x = torch.ones(3)
    dist.all_reduce(x)
    c.same("main thread's all_reduce afterwards", x, torch.full((3,), float(WORLD)))
    c.finish(f"threads that take turns ({WORLD} ranks)")
    dist.destroy_process_group()


def scenario_callback_collectives(rounds="40"):
    """Collectives issued and waited for inside future callbacks, as DDP's
    PowerSGD hook does: a callback runs on the thread that completed the
    Work (collie's worker, or a thread that waits and runs the queue), and
    the all_reduce it waits for enters the same group again from there.
    Then DDP itself with torch's PowerSGD hook for a few steps: the ranks'
    parameters stay equal."""
    init("collie", timeout_s=60)
    c = Checks()
    for i in range(int(rounds)):
        first = torch.full((16,), float(i))
        second = torch.full((16,), float(-i))

        def then(fut, second=second):
            dist.all_reduce(second, async_op=True).wait()
            return fut.value()[0] + second

        fut = dist.all_reduce(first, async_op=True).get_future().then(then)
        got = fut.wait()
        c.same(f"round {i}: the callback's all_reduce and its result", got,
               torch.zeros(16))
        c.same(f"round {i}: the first all_reduce", first, torch.full((16,), float(i * WORLD)))

    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=2,
                                   start_powerSGD_iter=2, min_compression_rate=0.5)
    ddp.register_comm_hook(state, powersgd.powerSGD_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + RANK)
    for step in range(6):
        x, y = torch.randn(16, 32, generator=g), torch.randn(16, 8, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in ddp.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(WORLD)]
    dist.all_gather(gathered, flat)
    c.true("PowerSGD: every rank's parameters equal rank 0's",
           all(torch.equal(gathered[0], t) for t in gathered), "")
    c.finish(f"collectives inside future callbacks ({WORLD} ranks)")
    dist.destroy_process_group()


if __name__ == "__main__":
    run_scenario(globals())
