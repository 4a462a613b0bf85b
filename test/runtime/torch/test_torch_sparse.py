"""Sparse COO all_reduce over collie against torch's gloo in the same job
(workers_sparse.py holds what each rank does)."""
import os

import pytest

import harness
from harness import assert_ok

WORKERS = os.path.join(harness.HERE, "workers_sparse.py")


def run(world, *args):
    return harness.collect(harness.spawn_ranks(world, list(args), init="env", script=WORKERS))


@pytest.mark.parametrize("world", [2, 3])
def test_sparse_all_reduce_matches_gloo(world):
    assert_ok(run(world, "allreduce"))


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_sparse_embedding_trains_gloos_weights(world):
    assert_ok(run(world, "ddp"))


def test_sparse_refusals():
    assert_ok(run(2, "refused"))
