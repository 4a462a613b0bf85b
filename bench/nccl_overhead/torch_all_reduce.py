"""torch's own dist.all_reduce over NCCL, per call, beside nccl_overhead.

World size 1 on the first GPU (one process), the same sizes and call counts
as nccl_overhead's defaults: for each size, `iters` calls after `warmup`,
timed on the host from the first call to the end of a
torch.cuda.synchronize(); three runs, the median printed, and each run.

    python3 torch_all_reduce.py [-b 4] [-e 268435456] [-f 4] [-n 100] [-w 20]
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-b", type=int, default=4, help="smallest size in bytes")
    p.add_argument("-e", type=int, default=256 << 20, help="largest size in bytes")
    p.add_argument("-f", type=int, default=4, help="size factor")
    p.add_argument("-n", type=int, default=100, help="calls per run")
    p.add_argument("-w", type=int, default=20, help="warm-up calls")
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: torch.cuda.is_available() is False")
        return 77
    torch.cuda.set_device(0)
    store = dist.TCPStore("127.0.0.1", 0, 1, True)  # port 0: the kernel picks one
    dist.init_process_group("nccl", store=store, rank=0, world_size=1)
    print(f"# torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
          f"dist.all_reduce float32 sum, {a.n} calls (+{a.w} warm-up), median of 3 runs")
    print(f"{'bytes':>12} {'torch_us':>10}   runs")
    n = a.b
    while n <= a.e:
        t = torch.ones(max(1, n // 4), device="cuda")
        runs = []
        for _ in range(3):
            for _ in range(a.w):
                dist.all_reduce(t)
            torch.cuda.synchronize()
            s = time.perf_counter()
            for _ in range(a.n):
                dist.all_reduce(t)
            torch.cuda.synchronize()
            runs.append((time.perf_counter() - s) * 1e6 / a.n)
        print(f"{n:>12} {statistics.median(runs):>10.2f}   "
              + " ".join(f"{r:.2f}" for r in runs), flush=True)
        n *= a.f
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
