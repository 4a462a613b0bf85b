"""Point-to-point and pipeline parallelism over collie (workers_pipeline.py
holds what each rank does; docs/torch.md, "Point-to-point and pipeline
parallelism").

test_pipeline_schedules_match_gloo: torch.distributed.pipelining's
schedules (GPipe, 1F1B, interleaved 1F1B, looped BFS, interleaved zero
bubble, and on torch 2.15 the V schedules ZBV zero bubble and DualPipeV)
train a tiny transformer over collie and over gloo in one job: the same
weights, bit for bit.

The others are hand-written schedules that post receives early, the way
users write them, each over collie and over gloo with a 20 s timeout, so
that a hang fails quickly.
"""
import os

import pytest

import harness
from harness import assert_ok

WORKERS = os.path.join(harness.HERE, "workers_pipeline.py")
# Starting the ranks (importing torch) on a loaded machine, plus the 20 s
# that a hung call waits before it raises.
EARLY_JOB_TIMEOUT = 90


def run(world, *args, timeout=harness.JOB_TIMEOUT):
    return harness.collect(harness.spawn_ranks(world, list(args), init="env", script=WORKERS),
                           timeout=timeout)


@pytest.mark.parametrize("world", [2, 4])
def test_pipeline_schedules_match_gloo(world):
    assert_ok(run(world, "pipeline", "all", timeout=180))


@pytest.mark.parametrize("backend", ["collie", "gloo"])
def test_irecv_before_send(backend):
    """Rank 0: q = irecv(r, 1); send(s, 1); q.wait(). Rank 1: recv(r, 0);
    send(s, 0)."""
    assert_ok(run(2, "recv_before_send", backend, timeout=EARLY_JOB_TIMEOUT))


@pytest.mark.parametrize("backend", ["collie", "gloo"])
def test_irecv_around_all_reduce(backend):
    """Rank 0: irecv from 1, all_reduce, wait. Rank 1: all_reduce, send to 0."""
    assert_ok(run(2, "recv_around_all_reduce", backend, timeout=EARLY_JOB_TIMEOUT))


@pytest.mark.parametrize("world,backend", [(4, "collie"), (4, "gloo"), (2, "collie"),
                                           (2, "gloo")])
def test_halo_irecv_before_isend(world, backend):
    """A periodic halo exchange: irecv from both neighbours, then isend to
    both, then wait; at 2 ranks both neighbours are one rank, told apart by
    tag."""
    assert_ok(run(world, "halo", backend, timeout=EARLY_JOB_TIMEOUT))


@pytest.mark.parametrize("backend", ["collie", "gloo"])
def test_tags_matched_out_of_order(backend):
    """irecv(tag 2) posted before irecv(tag 1); the sends come tag 1 first."""
    assert_ok(run(2, "tags_out_of_order", backend, timeout=EARLY_JOB_TIMEOUT))


@pytest.mark.parametrize("schedule", ["Interleaved1F1B"])
def test_sample_trains_the_same_weights_as_gloo(tmp_path, schedule):
    """samples/torch_pipeline/train.py, 2 ranks (4 stages), a few steps over
    each backend: the checkpoints are the same bits."""
    import torch

    data = "/usr/share/datasets/fashion-mnist"
    if not os.path.exists(os.path.join(data, "train-images-idx3-ubyte.gz")):
        pytest.skip(f"no Fashion-MNIST in {data} (package dataset-fashion-mnist, installed by "
                    "tools/collie.sh)")
    script = os.path.join(harness.SOURCE_DIR, "samples", "torch_pipeline", "train.py")
    final = {}
    for backend in ("collie", "gloo"):
        out = tmp_path / backend
        assert_ok(harness.collect(harness.spawn_ranks(
            2, ["--backend", backend, "--schedule", schedule, "--epochs", "1", "--max-steps", "6",
                "--depth", "4", "--test-samples", "256", "--print-freq", "1000",
                "--output-dir", str(out), "--timeout", "120"],
            init="env", script=script), timeout=180))
        final[backend] = torch.load(out / "checkpoint_00.pth")["model"]
    assert final["collie"].keys() == final["gloo"].keys()
    for name, w in final["collie"].items():
        g = final["gloo"][name]
        assert torch.equal(w, g), f"{name}: the weights differ by up to {(w - g).abs().max()}"
