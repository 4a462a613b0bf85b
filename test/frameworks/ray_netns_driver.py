"""The Ray Train job of ray_netns_test.py: a driver that joins a running Ray
cluster (ray.init(address=...), not a local one) and runs a TorchTrainer
across its nodes, one rank per `collie_slot` resource, the backend picked
with TorchConfig(backend=...):

    python ray_netns_driver.py --address IP:PORT --node-ip IP --backend collie
        --workers 6 --out-dir DIR [--steps N | --run-seconds S --ready-dir DIR]

--steps N: N optimizer steps (common.rank_batches), then every rank writes
its final weights and where it ran to DIR/rank<r>.pt; with --gloo-too the
ranks then train the same model again on a gloo group
(torch.distributed.new_group(backend="gloo")) and write those weights too.
--run-seconds S: the failure case: the ranks train on (the batches cycled)
until S seconds have passed; after its third step each rank writes
"<rank> <pid> <node ip>" to --ready-dir/rank<r>, so that the test can kill
one of them mid-job.

The driver prints "ray_netns: fit ok" or "ray_netns: fit raised at <unix
time>: <the error>" and exits 0 or 3 (anything else: the driver itself
broke).
"""
import argparse
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402
import ray.train  # noqa: E402
import ray.train.torch  # noqa: E402
from ray.train import FailureConfig, RunConfig, ScalingConfig  # noqa: E402
from ray.train.torch import TorchConfig, TorchTrainer  # noqa: E402


def train_loop(config):
    sys.path.insert(0, config["here"])
    import common
    import torch

    common.seed_everything()
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    node_ip = ray.util.get_node_ip_address()
    pg = torch.distributed.distributed_c10d._get_default_group()
    used = pg._get_backend(torch.device("cpu")).name()
    model = ray.train.torch.prepare_model(common.make_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=common.LR)
    run_seconds = config["run_seconds"]
    steps = config["steps"] if not run_seconds else 16
    batches = common.rank_batches(rank, world, steps)
    t0 = time.perf_counter()
    done = 0
    while True:
        x, y = batches[done % len(batches)]
        optimizer.zero_grad()
        common.loss_fn(model(x), y).backward()
        optimizer.step()
        done += 1
        if run_seconds:
            if done == 3:
                path = os.path.join(config["ready_dir"], f"rank{rank}")
                with open(path + ".tmp", "w") as f:
                    f.write(f"{rank} {os.getpid()} {node_ip}\n")
                os.replace(path + ".tmp", path)
            if time.perf_counter() - t0 > run_seconds:
                break
        elif done == steps:
            break
    elapsed = time.perf_counter() - t0
    gloo_weights = None
    if config["gloo_too"]:
        # The same training on a gloo group of the same ranks, in the same
        # workers (a second job would start 6 more Python processes).
        gloo = torch.distributed.new_group(backend="gloo")
        twin = torch.nn.parallel.DistributedDataParallel(common.make_model(),
                                                         process_group=gloo)
        opt = torch.optim.SGD(twin.parameters(), lr=common.LR)
        for x, y in batches[:done]:
            opt.zero_grad()
            common.loss_fn(twin(x), y).backward()
            opt.step()
        gloo_weights = {k.removeprefix("module."): v.detach().clone()
                        for k, v in twin.state_dict().items()}
    if rank == 0:
        print(f"ray_netns: backend {config['backend']} ({used}), world {world}, {done} steps, "
              f"{done / elapsed:.1f} steps/s", flush=True)
    if config["out_dir"]:
        weights = {k.removeprefix("module."): v.detach().clone()
                   for k, v in model.state_dict().items()}
        path = os.path.join(config["out_dir"], f"rank{rank}.pt")
        torch.save({"weights": weights, "gloo_weights": gloo_weights, "info": {
            "rank": rank, "world": world, "steps": done, "seconds": elapsed, "pg_backend": used,
            "node_ip": node_ip, "local_rank": ctx.get_local_rank(), "pid": os.getpid()}},
            path + ".tmp")
        os.replace(path + ".tmp", path)
    ray.train.report({"steps": done, "pg_backend": used})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--address", required=True)
    p.add_argument("--node-ip", required=True)
    p.add_argument("--backend", default="collie")
    p.add_argument("--workers", type=int, default=6)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--run-seconds", type=float, default=0)
    p.add_argument("--ready-dir", default="")
    p.add_argument("--out-dir", default="")
    p.add_argument("--storage", required=True)
    p.add_argument("--gloo-too", action="store_true",
                   help="after training, train the same model again over a gloo group of the "
                        "same ranks (its weights go in rank<r>.pt too)")
    p.add_argument("--collie-log-level", default="DEBUG")
    p.add_argument("--fr-prefix", default="",
                   help="TORCH_FR_DUMP_TEMP_FILE for the ranks (a failed collective's dumps)")
    args = p.parse_args()
    env = {"RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1",
           "COLLIE_LOG_LEVEL": args.collie_log_level}
    if args.fr_prefix:
        env["TORCH_FR_DUMP_TEMP_FILE"] = args.fr_prefix
    ray.init(address=args.address, _node_ip_address=args.node_ip, log_to_driver=True,
             runtime_env={"env_vars": env})
    try:
        trainer = TorchTrainer(
            train_loop,
            train_loop_config={"here": HERE, "backend": args.backend, "steps": args.steps,
                               "run_seconds": args.run_seconds, "ready_dir": args.ready_dir,
                               "out_dir": args.out_dir, "gloo_too": args.gloo_too},
            torch_config=TorchConfig(backend=args.backend),
            # One rank per collie_slot: each node declares 2, so 6 ranks are
            # 2 per node whatever Ray's placement strategy.
            scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=False,
                                         resources_per_worker={"CPU": 1, "collie_slot": 1}),
            run_config=RunConfig(storage_path=args.storage, name=f"collie-{args.backend}",
                                 failure_config=FailureConfig(max_failures=0)))
        try:
            result = trainer.fit()
        except Exception as e:  # Ray Train's TrainingFailedError and kin
            print(f"ray_netns: fit raised at {time.time():.3f}: {type(e).__name__}: {e}",
                  flush=True)
            traceback.print_exc()
            sys.stdout.flush()
            return 3
        print(f"ray_netns: fit ok: {result.metrics}", flush=True)
        if getattr(result, "error", None):
            print(f"ray_netns: fit raised at {time.time():.3f}: {result.error!r}", flush=True)
            return 3
        return 0
    finally:
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
