"""torch 2.x's parallelism APIs over collie, each against gloo in the same job
(workers_parallel.py holds what each rank does)."""
import os

import pytest

import harness
from harness import assert_ok

WORKERS = os.path.join(harness.HERE, "workers_parallel.py")


def run(world, *args, init="env"):
    return harness.collect(harness.spawn_ranks(world, list(args), init=init, script=WORKERS))


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_hooks(world):
    assert_ok(run(world, "ddp"))


@pytest.mark.parametrize("world", [2, 4])
def test_fsdp2(world):
    assert_ok(run(world, "fsdp"))


def test_fsdp2_exit_without_destroy():
    assert_ok(run(4, "fsdp_exit"))


def test_device_mesh_dtensor_tensor_parallel():
    assert_ok(run(4, "dtensor"))


@pytest.mark.parametrize("backend", ["inductor"])
def test_compile_functional_all_reduce(backend):
    assert_ok(run(2, "compile", backend))


@pytest.mark.parametrize("world", [2, 3])
def test_coalescing_manager(world):
    assert_ok(run(world, "coalescing"))


@pytest.mark.parametrize("world", [2, 4])
def test_batch_isend_irecv_ring_64_mib(world):
    assert_ok(run(world, "p2p_ring", 64))
