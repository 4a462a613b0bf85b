"""One rank of the recovery benchmark's whole-job alternative: torch DDP over
gloo under torchrun, the main job's MLP (784-256-128-10, SGD) on synthetic
batches, rank 0 checkpointing after every step (the best case for a
restart: no step is lost). A job started where a checkpoint exists reloads
it, and every rank prints its first step's time:
    ready rank=R pid=P resumed=0|1
    step=K                              every 20 steps, rank 0
    first_step_ns=T step=K              the first step after resuming
T is CLOCK_MONOTONIC (the driver's time.monotonic_ns()).

    torchrun --standalone --nproc-per-node 4 torch_restart_worker.py CHECKPOINT STEPS
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel


def main():
    checkpoint, steps = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    step = 0
    resumed = os.path.exists(checkpoint)
    if resumed:
        state = torch.load(checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    ddp = DistributedDataParallel(model)
    g = torch.Generator().manual_seed(rank)
    x = torch.rand(64, 784, generator=g)
    labels = torch.randint(0, 10, (64,), generator=g)
    print(f"ready rank={rank} pid={os.getpid()} resumed={int(resumed)}", flush=True)
    announce = resumed
    while step < steps:
        optimizer.zero_grad()
        F.cross_entropy(ddp(x), labels).backward()
        optimizer.step()
        step += 1
        if rank == 0:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "step": step}, checkpoint + ".tmp")
            os.replace(checkpoint + ".tmp", checkpoint)
            if step % 20 == 0:
                print(f"step={step}", flush=True)
        if announce:
            print(f"first_step_ns={time.monotonic_ns()} step={step}", flush=True)
            announce = False
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
