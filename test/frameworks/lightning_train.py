"""PyTorch Lightning, N CPU ranks, one setting:

    Trainer(accelerator="cpu", devices=N,
            strategy=DDPStrategy(process_group_backend="collie"))

    python lightning_train.py --backend collie|gloo [--nproc N] [--strategy ddp|fsdp2]

--strategy fsdp2 is ModelParallelStrategy(data_parallel_size=N,
tensor_parallel_size=1, process_group_backend=...), whose configure_model
applies FSDP2's fully_shard over the data parallel mesh: Lightning's FSDP on
CPU (its FSDPStrategy refuses every accelerator but CUDA). Lightning
launches the other ranks itself (it re-runs this script with its
environment variables); rank 0 writes the final weights to $COLLIE_FW_OUT.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import torch  # noqa: E402
import lightning as L  # noqa: E402
from lightning.pytorch.strategies import DDPStrategy, ModelParallelStrategy  # noqa: E402


class Module(L.LightningModule):
    def __init__(self, fsdp2=False):
        super().__init__()
        self.net = common.make_model()
        self.fsdp2 = fsdp2
        self.t0 = None

    def configure_model(self):
        if self.fsdp2:
            from torch.distributed.fsdp import fully_shard
            fully_shard(self.net, mesh=self.device_mesh["data_parallel"])

    def training_step(self, batch, _):
        if self.t0 is None:
            self.t0 = time.perf_counter()
        x, y = batch
        return common.loss_fn(self.net(x), y)

    def train_dataloader(self):
        # Lightning's own sampler shuffles training data; this one is
        # DistributedSampler's order without shuffling, the batches every
        # script here trains on (common.rank_batches).
        data = common.make_data()
        sampler = torch.utils.data.DistributedSampler(data, shuffle=False)
        return torch.utils.data.DataLoader(data, batch_size=common.BATCH, sampler=sampler)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=common.LR)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="collie")
    p.add_argument("--steps", type=int, default=common.STEPS)
    p.add_argument("--nproc", type=int, default=2, help="ranks (Trainer's devices)")
    p.add_argument("--strategy", choices=("ddp", "fsdp2"), default="ddp")
    args = p.parse_args()
    common.seed_everything()
    model = Module(fsdp2=args.strategy == "fsdp2")
    if args.strategy == "fsdp2":
        strategy = ModelParallelStrategy(data_parallel_size=args.nproc, tensor_parallel_size=1,
                                         process_group_backend=args.backend)
    else:
        strategy = DDPStrategy(process_group_backend=args.backend)
    trainer = L.Trainer(accelerator="cpu", devices=args.nproc, strategy=strategy,
                        max_steps=args.steps, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        use_distributed_sampler=False, deterministic=True)
    trainer.fit(model)
    elapsed = time.perf_counter() - model.t0
    pg = torch.distributed.distributed_c10d._get_default_group()
    backend = pg._get_backend(torch.device("cpu")).name()
    state = model.net.state_dict()
    if args.strategy == "fsdp2":
        # FSDP2's parameters are DTensors sharded over the ranks: gathered on
        # every rank (a collective), kept on rank 0.
        state = {k: v.full_tensor() for k, v in state.items()}
    if trainer.global_rank == 0:
        print(f"lightning: backend {args.backend} ({backend}), {trainer.global_step} steps, "
              f"{trainer.global_step / elapsed:.1f} steps/s", flush=True)
        common.save_weights(state, extra={
            "steps": trainer.global_step, "seconds": elapsed, "pg_backend": backend})
    # Lightning's Trainer leaves the group alive at exit. A gloo group that
    # is not destroyed can abort the process at exit ("terminate called
    # without an active exception", pytorch/pytorch#190489): destroy it, as a
    # train.py does after its last epoch.
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
