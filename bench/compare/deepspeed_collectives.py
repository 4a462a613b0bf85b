"""DeepSpeed's CPU shared-memory all_reduce (deepspeed/csrc/cpu/comm/shm.cpp,
the `deepspeed_shm_comm` op that DeepSpeed JIT-builds on first use), timed
like torch_collectives.py, whose command line and output it shares:
    python deepspeed_collectives.py RANK WORLD INIT_FILE all_reduce MIN_BYTES MAX_BYTES \\
        FACTOR ITERS WARMUP ITER_BYTES
all_reduce is deepspeed.comm.inference_all_reduce on a float32 tensor (sum),
what DeepSpeed's CPU inference (AutoTP) calls; the shm op serves it when
every rank is on this host (LOCAL_SIZE = WORLD, set here). It exits with an
error, rather than timing torch's gloo under DeepSpeed's name, when the op did
not build or load, or this CPU lacks its kernel's ISA (AVX2 for float32).
Run it with the Python of a venv that has deepspeed (run_compare.sh's
DEEPSPEED_PYTHON).
"""
import os
import sys
import zlib

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_collectives  # noqa: E402


def main():
    rank, world, init_file, collectives, *settings = torch_collectives.parse_args(sys.argv)
    if collectives != ["all_reduce"]:
        raise SystemExit("deepspeed_collectives: only all_reduce (DeepSpeed's shm op has no other)")
    # The shm op's switches: every rank local, and a name for its segments
    # that no other job on this host shares.
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      LOCAL_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(zlib.crc32(init_file.encode()) % 60000 + 1024))
    torch.set_num_threads(1)
    import deepspeed
    import deepspeed.comm as ds
    deepspeed.init_distributed(dist_backend="gloo", init_method="file://" + init_file,
                               rank=rank, world_size=world, verbose=False)
    backend = ds.comm.cdb
    op = getattr(backend, "shm_comm_op", None)
    if op is None or not hasattr(torch.ops.deepspeed, "inference_all_reduce_"):
        raise SystemExit("deepspeed_collectives: DeepSpeed's shm op did not build or load "
                         "(deepspeed.comm fell back to torch.distributed)")
    if getattr(backend, "shm_vector_kernel_level", 0) < 1:
        raise SystemExit("deepspeed_collectives: this CPU lacks AVX2, which the shm op's float32 "
                         "kernel needs")

    def caller(collective, data, out, count, world):
        t = data[:count]
        return (lambda: ds.inference_all_reduce(t)) if count else None

    try:
        torch_collectives.measure(rank, world, collectives, *settings, caller=caller)
        torch.distributed.destroy_process_group()
    finally:
        # The op leaves its segment (about 64 MiB a rank) in /dev/shm.
        segment = (f"/dev/shm/deepspeed_allreduce_buffer_{os.getuid()}_"
                   f"{os.environ['MASTER_ADDR']}_{os.environ['MASTER_PORT']}_{rank}")
        if os.path.exists(segment):
            os.unlink(segment)


if __name__ == "__main__":
    main()
