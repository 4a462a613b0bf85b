"""DeepSpeed, N CPU ranks (torchrun --nproc_per_node N, DS_ACCELERATOR=cpu),
ZeRO stage 0, 1, 2 or 3. The setting that picks the backend:

    deepspeed.init_distributed(dist_backend="collie")

    python -m torch.distributed.run --standalone --nproc_per_node N \
        deepspeed_train.py --backend collie --zero 1

The optimizer is torch's SGD handed to deepspeed.initialize (a client
optimizer, so no DeepSpeed op is compiled), in fp32. Rank 0 writes the final
weights (ZeRO-3's gathered) to $COLLIE_FW_OUT.
"""
import argparse
import os
import sys
import time

os.environ.setdefault("DS_ACCELERATOR", "cpu")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import torch  # noqa: E402
import deepspeed  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="collie")
    p.add_argument("--zero", type=int, default=1)
    p.add_argument("--steps", type=int, default=common.STEPS)
    p.add_argument("--comms-log", action="store_true",
                   help="DeepSpeed's comms_logger: which collectives the run made")
    p.add_argument("--local_rank", type=int, default=-1)  # deepspeed's launcher passes it
    args = p.parse_args()
    common.seed_everything()
    deepspeed.init_distributed(dist_backend=args.backend)
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    pg = torch.distributed.distributed_c10d._get_default_group()
    used = pg._get_backend(torch.device("cpu")).name()
    model = common.make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=common.LR)
    config = {
        "train_micro_batch_size_per_gpu": common.BATCH,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": args.zero},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10 ** 9,
        "wall_clock_breakdown": False,
    }
    if args.comms_log:
        config["comms_logger"] = {"enabled": True, "verbose": False, "prof_all": True}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    batches = common.rank_batches(rank, world, args.steps)
    t0 = time.perf_counter()
    for x, y in batches:
        loss = common.loss_fn(engine(x), y)
        engine.backward(loss)
        engine.step()
    elapsed = time.perf_counter() - t0
    if args.comms_log:
        deepspeed.comm.log_summary()
    torch.distributed.barrier()
    # ZeRO 1/2 keep the full fp32 module parameters on every rank (they shard
    # the optimizer state and the gradients), updated by an all_gather after
    # each step; ZeRO 3 shards the parameters too, gathered here to save them.
    if engine.zero_optimization_stage() == 3:
        with deepspeed.zero.GatheredParameters(list(engine.module.parameters())):
            state = {k: v.detach().clone() for k, v in engine.module.state_dict().items()}
    else:
        state = engine.module.state_dict()
    if rank == 0:
        stage, opt = engine.zero_optimization_stage(), type(engine.optimizer).__name__
        print(f"deepspeed: backend {args.backend} ({used}), ZeRO {stage} ({opt}), "
              f"{len(batches)} steps, {len(batches) / elapsed:.1f} steps/s", flush=True)
        common.save_weights(state, extra={"steps": len(batches), "seconds": elapsed,
                                          "pg_backend": used,
                                          "zero": stage, "optimizer": opt})
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
