"""Hugging Face Accelerate, N CPU ranks (torchrun --nproc_per_node N). The
setting that picks the backend:

    Accelerator(cpu=..., kwargs_handlers=[InitProcessGroupKwargs(backend="collie")])

launched by `accelerate launch` (see run_frameworks.py for the launch line)
or by torchrun:

    accelerate launch --multi_gpu --num_processes 2 accelerate_train.py --backend collie
    python accelerate_train.py --backend collie [--cpu]      (under torchrun)

Rank 0 writes the final weights to $COLLIE_FW_OUT.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import torch  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from accelerate.utils import InitProcessGroupKwargs  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="collie")
    p.add_argument("--cpu", action="store_true", help="Accelerator(cpu=True)")
    p.add_argument("--preinit", action="store_true",
                   help="init_process_group(backend) before Accelerator(), which then "
                        "takes the group as it is (and is given no backend)")
    p.add_argument("--steps", type=int, default=common.STEPS)
    args = p.parse_args()
    common.seed_everything()
    if args.preinit:
        torch.distributed.init_process_group(args.backend)
        accelerator = Accelerator(cpu=args.cpu)
    else:
        accelerator = Accelerator(
            cpu=args.cpu, kwargs_handlers=[InitProcessGroupKwargs(backend=args.backend)])
    model = common.make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=common.LR)
    loader = torch.utils.data.DataLoader(common.make_data(), batch_size=common.BATCH,
                                         shuffle=False)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    pg = torch.distributed.distributed_c10d._get_default_group()
    used = pg._get_backend(torch.device("cpu")).name()
    steps, t0 = 0, None
    while steps < args.steps:
        for x, y in loader:
            if t0 is None:
                t0 = time.perf_counter()
            optimizer.zero_grad()
            accelerator.backward(common.loss_fn(model(x), y))
            optimizer.step()
            steps += 1
            if steps == args.steps:
                break
    elapsed = time.perf_counter() - t0
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        print(f"accelerate: backend {args.backend} ({used}), {accelerator.distributed_type}, "
              f"{steps} steps, {steps / elapsed:.1f} steps/s", flush=True)
        common.save_weights(accelerator.unwrap_model(model).state_dict(), extra={
            "steps": steps, "seconds": elapsed, "pg_backend": used,
            "distributed_type": str(accelerator.distributed_type),
            # What accelerate believes it runs on: "gloo" after --preinit,
            # whatever the group's backend is.
            "state_backend": accelerator.state.backend})
    accelerator.end_training()


if __name__ == "__main__":
    main()
