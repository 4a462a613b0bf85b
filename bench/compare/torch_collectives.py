"""torch.distributed collectives with the gloo backend, timed like collie-bench.

One process per rank (the driver starts them), rendezvous through a file:
    python torch_collectives.py RANK WORLD INIT_FILE COLLECTIVES MIN_BYTES MAX_BYTES \\
        FACTOR ITERS WARMUP ITER_BYTES
COLLECTIVES is comma-separated: all_reduce (float32 sum), broadcast (from rank
0), all_gather (all_gather_into_tensor), reduce_scatter
(reduce_scatter_tensor). Sizes count as nccl-tests counts them: the whole
gathered / scattered tensor for all_gather and reduce_scatter. ITER_BYTES: 0,
or at most ITER_BYTES / bytes timed calls per size (1 to ITERS; the warm-up at
most as many). Gloo picks its interface from GLOO_SOCKET_IFNAME where the
driver sets it (bench/multihost). Rank 0 prints
    bytes time_us algbw_gbps busbw_gbps collective
per collective and size, the time averaged over the ranks.
"""
import sys
import time

import torch
import torch.distributed as dist

BUS = {"all_reduce": lambda n: 2 * (n - 1) / n, "broadcast": lambda n: 1.0,
       "all_gather": lambda n: (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n}


def caller(collective, data, out, count, world):
    """The call for one size, or None where a rank's part is empty."""
    part = count // world
    if collective == "all_reduce":
        t = data[:count]
        return (lambda: dist.all_reduce(t)) if count else None
    if collective == "broadcast":
        t = data[:count]
        return (lambda: dist.broadcast(t, src=0)) if count else None
    if collective == "all_gather":
        src, dst = data[:part], out[:part * world]
        return (lambda: dist.all_gather_into_tensor(dst, src)) if part else None
    if collective == "reduce_scatter":
        src, dst = data[:part * world], out[:part]
        return (lambda: dist.reduce_scatter_tensor(dst, src)) if part else None
    raise SystemExit(f"torch_collectives: unknown collective {collective}")


def main():
    rank, world, init_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    collectives = sys.argv[4].split(",")
    min_bytes, max_bytes = int(sys.argv[5]), int(sys.argv[6])
    factor, max_iters, max_warmup = float(sys.argv[7]), int(sys.argv[8]), int(sys.argv[9])
    iter_bytes = int(sys.argv[10])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    data = torch.ones(max_bytes // 4 + 1, dtype=torch.float32)
    out = torch.zeros_like(data)
    for collective in collectives:
        nbytes = min_bytes
        while nbytes <= max_bytes:
            call = caller(collective, data, out, nbytes // 4, world)
            if call is not None:
                iters = max_iters
                if iter_bytes > 0:
                    iters = max(1, min(max_iters, iter_bytes // nbytes))
                for _ in range(min(max_warmup, iters)):
                    call()
                dist.barrier()
                start = time.perf_counter()
                for _ in range(iters):
                    call()
                us = torch.tensor([(time.perf_counter() - start) * 1e6 / iters],
                                  dtype=torch.float64)
                dist.all_reduce(us)
                avg = us.item() / world
                algbw = nbytes / (avg * 1e3)
                if rank == 0:
                    print(f"{nbytes} {avg:.2f} {algbw:.4f} {algbw * BUS[collective](world):.4f} "
                          f"{collective}", flush=True)
            nxt = int(nbytes * factor)
            nbytes = nxt if nxt > nbytes else nbytes + 1
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
