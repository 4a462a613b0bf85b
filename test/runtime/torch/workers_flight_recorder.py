"""The ranks of the flight recorder tests: <venv>/bin/python workers_flight_recorder.py SCENARIO

Every rank writes its flight recorder dump to <TORCH_FR_DUMP_TEMP_FILE><rank>
(the test gives each job a fresh folder); the test then reads the dumps with
torch 2.15's analyser (torchfrtrace) and with pickle.

  hang       rank 2 skips the 3rd all_reduce of the default group, whose
             timeout is then short: the others time out in it, each dumps
             and asks every rank to dump too (collie's dump_on_failure,
             through the store). Rank 2 meanwhile waits in a barrier of a
             second group ("side"), as a real job would wait in its next
             collective, so it is alive to dump; the others join that
             barrier once their all_reduce has failed. Under torch 2.15 an
             abort hook registered on the group runs on each rank whose
             all_reduce failed, and on rank 2 too while torch's recorder is
             attached (its dump is torch's, through the abort hooks).
  on_demand  a few calls of each kind, then collie_torch.dump_flight_recorder()
             on every rank.
"""
import os
import sys
import time
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist

import collie_torch
from workers import Checks, RANK, WORLD, error_of, run_scenario

warnings.filterwarnings("ignore")

TIMEOUT_S = 120  # every group's, but the hung call's
HANG_S = 4  # the hung all_reduce's timeout
SKIPPER = 2  # the rank that skips it
PREFIX = os.environ["TORCH_FR_DUMP_TEMP_FILE"]


def init():
    dist.init_process_group("collie", init_method=os.environ["COLLIE_TEST_INIT"], rank=RANK,
                            world_size=WORLD, timeout=timedelta(seconds=TIMEOUT_S))
    torch.set_num_threads(1)
    return dist.new_group(backend="collie", group_desc="side",
                          timeout=timedelta(seconds=TIMEOUT_S))


def wait_for_dumps(c, deadline_s=60):
    """Every rank's dump exists (the others' are written by their dump
    threads, within about a second of the request)."""
    paths = [f"{PREFIX}{r}" for r in range(WORLD)]
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline and not all(os.path.exists(p) for p in paths):
        time.sleep(0.1)  # polling the file system: nothing to wait on
    missing = [p for p in paths if not os.path.exists(p)]
    c.true("every rank's dump was written", not missing, f"missing: {missing}")


def scenario_hang():
    side = init()
    c = Checks()
    pg = dist.distributed_c10d._get_default_group()
    backend = collie_torch.backend()
    hooks = getattr(backend, "supports_abort_hooks", False)
    aborts = []
    if hooks:
        backend.register_abort_hook(4242, lambda: aborts.append(time.monotonic()))
    t = torch.ones(8)
    dist.all_reduce(t)
    dist.all_reduce(t)
    pg.set_timeout(timedelta(seconds=HANG_S))
    if RANK != SKIPPER:
        start = time.monotonic()
        e = error_of(lambda: dist.all_reduce(t))
        elapsed = time.monotonic() - start
        print(f"rank {RANK}: the 3rd all_reduce raised after {elapsed:.1f} s: {e}", flush=True)
        c.true("the all_reduce rank 2 skipped raises", isinstance(e, RuntimeError), repr(e))
    dist.barrier(group=side)
    wait_for_dumps(c)
    if hooks:
        torch_recorder = os.environ.get("TORCH_FR_BUFFER_SIZE") != "0"
        want = RANK != SKIPPER or torch_recorder
        c.true("the abort hook ran" if want else "the abort hook did not run",
               bool(aborts) == want, f"{len(aborts)} runs")
    dist.barrier(group=side)
    c.finish("flight recorder, hang")
    sys.stdout.flush()
    os._exit(0 if not c.failures else 1)  # the default group is broken


def scenario_on_demand():
    side = init()
    c = Checks()
    t = torch.ones(8)
    dist.all_reduce(t)
    dist.broadcast(t, src=0)
    dist.all_reduce(t, group=side)
    dist.all_reduce(t, async_op=True).wait()
    out = [torch.zeros(8) for _ in range(WORLD)]
    dist.all_gather(out, t)
    nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    recv = torch.zeros(8)
    for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, t, nxt),
                                     dist.P2POp(dist.irecv, recv, prv)]):
        w.wait()
    dist.barrier()
    path = collie_torch.dump_flight_recorder()
    c.true("the dump is at <TORCH_FR_DUMP_TEMP_FILE><rank>", path == f"{PREFIX}{RANK}", path)
    c.true("the dump exists", os.path.exists(path), path)
    dist.barrier(group=side)
    dist.destroy_process_group()
    c.finish("flight recorder, on demand")


if __name__ == "__main__":
    run_scenario(globals())
