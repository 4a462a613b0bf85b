"""One replica group of a torchft training job over collie (test_torchft.py
starts them): a process that trains a small MLP with torchft's Manager,
torchft's DistributedDataParallel and OptimizerWrapper, the replicas'
gradients averaged over a ProcessGroupCollie (collie_torch.torchft) that
the Manager reconfigures for every quorum.

    python workers_torchft.py ROLE REPLICA_ID LIGHTHOUSE MIN_STEPS KILL_STEP REJOIN OUT

Each replica group is one process (group world size 1) hosting its own
TCPStore on port 0, as torchft's Manager expects of a group's rank 0.

- REPLICA_ID: "replica_<i>"; torchft appends a fresh uuid per process, so a
  restarted replica is a new member to the lighthouse.
- ROLE "victim": at the first step >= KILL_STEP that 3 replicas take part
  in, after the quorum and the forward pass, it writes "pid <pid>" into the
  FIFO COLLIE_TEST_EVENT_FIFO and waits to be SIGKILLed (the other replicas
  are then inside that step's gradient all_reduce, waiting for it).
- ROLE "survivor": notes the step that failed (should_commit said no) and
  writes "continued <replica> <step> <wall time>" into the FIFO when it
  first commits a step with 2 replicas after it. It stops once the step is
  >= MIN_STEPS and, with REJOIN=1, 3 steps after that were committed by 3
  replicas (the restarted victim took part: the test starts it again after
  "continued"); with REJOIN=0, 4 steps after the survivors went on.
- ROLE "rejoiner" (the victim restarted): heals from the survivors (torchft
  sends it their state) and stops after the third step that 3 replicas
  committed, which is where the survivors stop too: every replica of a
  quorum sees the same commits, so they all stop at the same step.
- OUT receives the final parameters, the step and a log of every step.

Environment: COLLIE_TORCHFT_LOOP "manager" (the Manager's allreduce of the
gradients) or "ddp" (torchft's DistributedDataParallel);
COLLIE_TORCHFT_ERRORS, ProcessGroupCollie's `errors`; COLLIE_TORCHFT_PG
"gloo" runs torchft's own ProcessGroupGloo instead, for comparison.
"""
import os
import select
import sys
import time
from datetime import timedelta

import torch
from torch import nn

from torchft.ddp import DistributedDataParallel
from torchft.manager import Manager
from torchft.optim import OptimizerWrapper
from torchft.process_group import ProcessGroupGloo

from collie_torch.torchft import ProcessGroupCollie

DEADLINE_S = float(os.environ.get("COLLIE_TORCHFT_WORKER_DEADLINE", "400"))
# "manager": the Manager's allreduce of the flattened gradients; "ddp":
# torchft's DistributedDataParallel (its comm hook calls the Manager).
LOOP = os.environ.get("COLLIE_TORCHFT_LOOP", "manager")
PG = os.environ.get("COLLIE_TORCHFT_PG", "collie")  # or "gloo": torchft's ProcessGroupGloo
REJOINED_STEPS = 3  # with REJOIN=1, the 3 train this many steps together at the end
ERRORS = os.environ.get("COLLIE_TORCHFT_ERRORS", "raise")  # ProcessGroupCollie(errors=...)


def event(line):
    path = os.environ.get("COLLIE_TEST_EVENT_FIFO")
    if not path:
        return
    # One write of less than PIPE_BUF bytes: lines of several writers never mix.
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def batch(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(8, 16, generator=g)
    y = torch.randint(0, 4, (8,), generator=g)
    return x, y


def main(role, replica_id, lighthouse, min_steps, kill_step, rejoin, out):
    start = time.monotonic()
    store = torch.distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    inner = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def state_dict():
        return {"model": model.state_dict(), "optim": inner.state_dict()}

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        inner.load_state_dict(sd["optim"])

    if PG == "collie":
        pg = ProcessGroupCollie(timeout=timedelta(seconds=30), errors=ERRORS)
    else:  # torchft's own, for comparison
        pg = ProcessGroupGloo(timeout=timedelta(seconds=30))
    manager = Manager(
        pg=pg,
        min_replica_size=2,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=replica_id,
        store_addr="127.0.0.1",
        store_port=store.port,
        rank=0,
        world_size=1,
        lighthouse_addr=lighthouse,
        port=0,
        timeout=timedelta(seconds=30),
        quorum_timeout=timedelta(seconds=120),
        connect_timeout=timedelta(seconds=30),
    )
    ddp = DistributedDataParallel(manager, model) if LOOP == "ddp" else model
    optimizer = OptimizerWrapper(manager, inner)
    params = list(model.parameters())
    loss_fn = nn.CrossEntropyLoss()

    log = []  # (step, committed, participants, wall time)
    failed_at = None  # the first step that did not commit
    continued_at = None  # the first step committed by 2 after that
    backends = set()
    together = 0  # steps committed by the 3 after the failure
    seen_three = False  # a step of the 3 (the victim dies in one)
    while True:
        if time.monotonic() - start > DEADLINE_S:
            raise RuntimeError(f"{replica_id}: past the {DEADLINE_S:.0f} s deadline at step "
                               f"{manager.current_step()}; log tail {log[-5:]}")
        step = manager.current_step()
        optimizer.zero_grad()  # the quorum (torchft reconfigures the collie group when it changed)
        participants = manager.num_participants()
        x, y = batch(step, manager.participating_rank() or 0)
        loss = loss_fn(ddp(x), y)
        if role == "victim" and step >= kill_step and participants == 3:
            event(f"pid {os.getpid()}")
            select.select([], [], [], 120)  # waits for the SIGKILL
            raise RuntimeError("the victim was not killed within 120 s")
        loss.backward()  # ddp: the gradients' all_reduce over collie (torchft's comm hook)
        if LOOP == "manager":
            # The Manager's fault-tolerant all_reduce (an average over the
            # participants) of the flattened gradients: an error is reported
            # to the Manager (should_commit then says no), never raised.
            flat = torch.cat([q.grad.reshape(-1) for q in params])
            manager.allreduce(flat).wait()
            offset = 0
            for q in params:
                q.grad.copy_(flat[offset:offset + q.numel()].view_as(q))
                offset += q.numel()
        optimizer.step()  # should_commit; the SGD step when every replica succeeded
        committed = manager.current_step() == step + 1
        log.append((step, committed, participants, time.time()))
        b = pg.backend() if PG == "collie" else pg._pg._get_backend(torch.device("cpu"))
        if b is not None:
            backends.add(type(b).__name__)
        if participants == 3:
            seen_three = True
        if not committed and failed_at is None and seen_three:
            # Only a failure in or after a step of the 3 counts: the kill
            # (which may come in the first step that the 3 take part in).
            failed_at = step
        if committed and failed_at is not None and continued_at is None and participants == 2:
            continued_at = step
            event(f"continued {replica_id} {step} {time.time():.6f}")
        if committed and participants == 3 and (role == "rejoiner" or continued_at is not None):
            together += 1  # a step the restarted replica took part in
        now = manager.current_step()
        if now < min_steps or not committed:
            continue
        if role == "rejoiner" or rejoin:
            if together >= REJOINED_STEPS:
                break
            continue
        if continued_at is not None and now >= continued_at + 4:
            break

    torch.save({"params": {k: v.clone() for k, v in model.state_dict().items()},
                "step": manager.current_step(), "log": log, "failed_at": failed_at,
                "continued_at": continued_at, "backends": sorted(backends),
                "batches_committed": manager.batches_committed()}, out)
    print(f"{replica_id}: done at step {manager.current_step()}, failed at {failed_at}, "
          f"continued at {continued_at}, backends {sorted(backends)}", flush=True)
    manager.shutdown(wait=False)
    pg.shutdown()


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], a[2], int(a[3]), int(a[4]), a[5] == "1", a[6])
