"""collie_torch on CUDA tensors (collie's NCCL backend under torch), against
torch's own nccl backend: one rank per visible GPU. They skip ("no GPU")
where torch sees none; tools/gpu/torch_check.sh runs them on a GPU machine."""
import glob
import os

import pytest

import harness
from harness import assert_ok


def gpus():
    # Without NVIDIA's driver torch sees no GPU; asking torch costs every
    # test an import (seconds), so ask the kernel first.
    if not os.path.exists("/proc/driver/nvidia") and not glob.glob("/dev/nvidia[0-9]*"):
        pytest.skip("no GPU: no NVIDIA driver (/proc/driver/nvidia, /dev/nvidia0)")
    import torch
    if not torch.cuda.is_available():
        pytest.skip("no GPU: torch.cuda.is_available() is False")
    import collie_torch
    if not collie_torch.CUDA.startswith("CUDA tensors"):
        pytest.fail(f"collie_torch has no CUDA path here: {collie_torch.CUDA}")
    return torch.cuda.device_count()


def run(scenario):
    world = gpus()
    script = os.path.join(harness.HERE, "workers_cuda.py")
    return harness.collect(harness.spawn_ranks(world, [scenario], init="env", script=script))


def test_cuda_ops_match_nccl():
    assert_ok(run("ops"))


def test_cuda_streams_and_work():
    assert_ok(run("streams"))


def test_cuda_ddp_step_matches_nccl():
    assert_ok(run("ddp"))


def test_no_shrink_once_nccl_is_in_use():
    assert_ok(run("no_shrink_once_nccl"))


def test_cpu_collie_cuda_nccl_on_gpu():
    gpus()
    assert_ok(harness.collect(harness.spawn_ranks(1, ["devices", "cpu:collie,cuda:nccl"],
                                                  init="env")))
