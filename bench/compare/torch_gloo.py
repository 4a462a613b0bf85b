"""torch.distributed all_reduce with the gloo backend, timed like collie-bench.

One process per rank (the driver starts them), rendezvous through a file:
    /usr/bin/python3 torch_gloo.py RANK WORLD INIT_FILE MIN_BYTES MAX_BYTES FACTOR ITERS WARMUP
Rank 0 prints "bytes time_us algbw_gbps busbw_gbps" per size (float32 sum,
time averaged over the ranks).
"""
import sys
import time

import torch
import torch.distributed as dist


def main():
    rank, world, init_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    min_bytes, max_bytes = int(sys.argv[4]), int(sys.argv[5])
    factor, iters, warmup = float(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    data = torch.ones(max_bytes // 4 + 1, dtype=torch.float32)
    nbytes = min_bytes
    while nbytes <= max_bytes:
        count = nbytes // 4
        if count > 0:
            t = data[:count]
            for _ in range(warmup):
                dist.all_reduce(t)
            dist.barrier()
            start = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(t)
            us = torch.tensor([(time.perf_counter() - start) * 1e6 / iters], dtype=torch.float64)
            dist.all_reduce(us)
            avg = us.item() / world
            algbw = count * 4 / (avg * 1e3)
            if rank == 0:
                print(f"{count * 4} {avg:.2f} {algbw:.4f} {algbw * 2 * (world - 1) / world:.4f}", flush=True)
        nxt = int(nbytes * factor)
        nbytes = nxt if nxt > nbytes else nbytes + 1
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
