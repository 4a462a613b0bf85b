"""torch.distributed collectives with the gloo backend, timed like collie-bench.

One process per rank (the driver starts them), rendezvous through a file:
    python torch_collectives.py RANK WORLD INIT_FILE COLLECTIVES MIN_BYTES MAX_BYTES \\
        FACTOR ITERS WARMUP ITER_BYTES
COLLECTIVES is comma-separated: all_reduce (float32 sum), broadcast (from rank
0), reduce (to rank 0), all_gather (all_gather_into_tensor), reduce_scatter
(reduce_scatter_tensor), gather (to rank 0), scatter (from rank 0),
all_to_all (all_to_all_single, equal splits), all_to_all_uneven
(all_to_all_single with router_splits' counts, bench/compare/peer_sweep.h's),
pingpong (send/recv between ranks 0 and 1, one-way time: half a round trip)
and stream (rank 0 sends ITERS messages back to back to rank 1, which
acknowledges the last: time per message). Sizes count as nccl-tests counts
them: the whole gathered / scattered / exchanged tensor for all_gather,
reduce_scatter, gather, scatter and the all_to_alls; the message for pingpong
and stream (a whole number of floats). ITER_BYTES: 0, or at most ITER_BYTES /
bytes timed calls per size (1 to ITERS; the warm-up at most as many). Gloo
picks its interface from GLOO_SOCKET_IFNAME where the driver sets it
(bench/multihost). Rank 0 prints
    bytes time_us algbw_gbps busbw_gbps collective
per collective and size, the time averaged over the ranks (pingpong and
stream: rank 0's).
"""
import sys
import time

import torch
import torch.distributed as dist

P2P = ("pingpong", "stream")


def bus_factor(collective, n):
    """peer_sweep.h's bus_factor."""
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("broadcast", "reduce") + P2P:
        return 1.0
    return (n - 1) / n


def router_splits(total, world, frm):
    """peer_sweep.h's router_splits: the elements rank frm sends to each rank
    in the uneven all_to_all (weights 2^((p + frm) mod world mod 8), rounded
    down, the rest kept by frm)."""
    weights = [1 << ((p + frm) % world % 8) for p in range(world)]
    counts = [total * w // sum(weights) for w in weights]
    counts[frm] += total - sum(counts)
    return counts


def point_to_point(collective, data, out, count, rank):
    """(call, finish) between ranks 0 and 1; the others idle."""
    if rank > 1 or count == 0:
        return (lambda: None), None
    src, dst, peer = data[:count], out[:count], 1 - rank
    flag = torch.zeros(1)
    if collective == "pingpong":
        if rank == 0:
            return (lambda: (dist.send(src, peer), dist.recv(dst, peer))), None
        return (lambda: (dist.recv(dst, peer), dist.send(dst, peer))), None
    finish = (lambda: dist.send(flag, peer)) if rank == 1 else (lambda: dist.recv(flag, peer))
    if rank == 0:
        return (lambda: dist.send(src, peer)), finish
    return (lambda: dist.recv(dst, peer)), finish


def caller(collective, data, out, count, world):
    """The call for one size, or None where a rank's part is empty."""
    part = count // world
    rank = dist.get_rank()
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
    if collective == "reduce":
        t = data[:count]
        return (lambda: dist.reduce(t, dst=0)) if count else None
    if collective in ("gather", "scatter"):
        if not part:
            return None
        mine = out[:part] if collective == "scatter" else data[:part]
        parts = None
        if rank == 0:
            whole = out if collective == "gather" else data
            parts = list(whole[:part * world].split(part))
        if collective == "gather":
            return lambda: dist.gather(mine, parts, dst=0)
        return lambda: dist.scatter(mine, parts, src=0)
    if collective == "all_to_all":
        src, dst = data[:part * world], out[:part * world]
        return (lambda: dist.all_to_all_single(dst, src)) if part else None
    if collective == "all_to_all_uneven":
        if not part:
            return None
        total = part * world
        sends = router_splits(total, world, rank)
        recvs = [router_splits(total, world, p)[rank] for p in range(world)]
        src, dst = data[:total], out[:sum(recvs)]
        return lambda: dist.all_to_all_single(dst, src, recvs, sends)
    raise SystemExit(f"torch_collectives: unknown collective {collective}")


def parse_args(argv):
    """(rank, world, init_file, collectives, min, max, factor, iters, warmup,
    iter_bytes) from the command line above."""
    if len(argv) != 11:
        raise SystemExit(f"usage: {argv[0]} RANK WORLD INIT_FILE COLLECTIVES MIN_BYTES MAX_BYTES "
                         "FACTOR ITERS WARMUP ITER_BYTES")
    return (int(argv[1]), int(argv[2]), argv[3], argv[4].split(","), int(argv[5]), int(argv[6]),
            float(argv[7]), int(argv[8]), int(argv[9]), int(argv[10]))


def main():
    rank, world, init_file, *settings = parse_args(sys.argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    measure(rank, world, *settings, caller=caller)
    dist.destroy_process_group()


def measure(rank, world, collectives, min_bytes, max_bytes, factor, max_iters, max_warmup,
            iter_bytes, caller):
    """Times every collective and size; rank 0 prints the rows. caller(collective,
    data, out, count, world) gives the call of one size, or None to skip it
    (deepspeed_collectives.py passes its own)."""
    data = torch.ones(max_bytes // 4 + 1, dtype=torch.float32)
    out = torch.zeros(data.numel() + world, dtype=torch.float32)
    for collective in collectives:
        nbytes = min_bytes
        while nbytes <= max_bytes:
            finish = None
            if collective in P2P:
                call, finish = point_to_point(collective, data, out, nbytes // 4, rank)
                call = call if nbytes >= 4 else None
            else:
                call = caller(collective, data, out, nbytes // 4, world)
            if call is not None and collective not in P2P:
                try:  # torch 1.13's gloo has no all_gather_into_tensor, say
                    call()
                except RuntimeError as e:
                    print(f"torch_collectives: skipping {collective}: {e}", file=sys.stderr)
                    break
            if call is not None:
                iters = max_iters
                if iter_bytes > 0:
                    iters = max(1, min(max_iters, iter_bytes // nbytes))
                for _ in range(min(max_warmup, iters)):
                    call()
                if finish:
                    finish()
                dist.barrier()
                start = time.perf_counter()
                for _ in range(iters):
                    call()
                if finish:
                    finish()
                mine = (time.perf_counter() - start) * 1e6 / iters
                if collective == "pingpong":
                    mine /= 2
                us = torch.tensor([mine], dtype=torch.float64)
                dist.all_reduce(us)
                avg = mine if collective in P2P else us.item() / world
                algbw = nbytes / (avg * 1e3)
                if rank == 0:
                    print(f"{nbytes} {avg:.2f} {algbw:.4f} "
                          f"{algbw * bus_factor(collective, world):.4f} {collective}", flush=True)
            nxt = int(nbytes * factor)
            nbytes = nxt if nxt > nbytes else nbytes + 1


if __name__ == "__main__":
    main()
