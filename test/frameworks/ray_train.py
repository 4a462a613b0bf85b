"""Ray Train, N CPU workers (2 by default) on a local Ray cluster (ray.init()
in this process). The setting that picks the backend:

    TorchTrainer(..., torch_config=TorchConfig(backend="collie"),
                 scaling_config=ScalingConfig(num_workers=N, use_gpu=False))

    python ray_train.py --backend collie|gloo [--nproc N]

Ray starts the workers; world rank 0 writes the final weights to
$COLLIE_FW_OUT.
"""
import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import common  # noqa: E402
import ray  # noqa: E402
import ray.train  # noqa: E402
import ray.train.torch  # noqa: E402
from ray.train import RunConfig, ScalingConfig  # noqa: E402
from ray.train.torch import TorchConfig, TorchTrainer  # noqa: E402


def train_loop(config):
    sys.path.insert(0, config["here"])
    import common
    import torch

    common.seed_everything()
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    pg = torch.distributed.distributed_c10d._get_default_group()
    used = pg._get_backend(torch.device("cpu")).name()
    model = ray.train.torch.prepare_model(common.make_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=common.LR)
    batches = common.rank_batches(rank, world, config["steps"])
    t0 = time.perf_counter()
    for x, y in batches:
        optimizer.zero_grad()
        common.loss_fn(model(x), y).backward()
        optimizer.step()
    elapsed = time.perf_counter() - t0
    if rank == 0:
        print(f"ray: backend {config['backend']} ({used}), {len(batches)} steps, "
              f"{len(batches) / elapsed:.1f} steps/s", flush=True)
        common.save_weights(model.state_dict(), path=config["out"], extra={
            "steps": len(batches), "seconds": elapsed, "pg_backend": used})
    ray.train.report({"steps": len(batches), "pg_backend": used})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="collie")
    p.add_argument("--steps", type=int, default=common.STEPS)
    p.add_argument("--nproc", type=int, default=2, help="Ray Train workers (ranks)")
    args = p.parse_args()
    common.seed_everything()
    with tempfile.TemporaryDirectory(prefix="collie-ray-") as tmp:
        # The cluster's sessions and logs go in tmp too (not /tmp/ray), so
        # that a run leaves nothing behind.
        # A CPU for each worker (ScalingConfig asks for one each), however
        # many the machine has: the workers wait on collectives, not compute.
        ray.init(num_cpus=max(4, args.nproc), include_dashboard=False, log_to_driver=True,
                 _temp_dir=os.path.join(tmp, "ray"),
                 runtime_env={"env_vars": {"RAY_USAGE_STATS_ENABLED": "0"}})
        try:
            trainer = TorchTrainer(
                train_loop,
                train_loop_config={"here": HERE, "backend": args.backend, "steps": args.steps,
                                   "out": os.environ.get("COLLIE_FW_OUT", "")},
                torch_config=TorchConfig(backend=args.backend),
                scaling_config=ScalingConfig(num_workers=args.nproc, use_gpu=False),
                run_config=RunConfig(storage_path=os.path.join(tmp, "results"), name="collie"))
            result = trainer.fit()
            print(f"ray: result {result.metrics}", flush=True)
        finally:
            ray.shutdown()


if __name__ == "__main__":
    main()
