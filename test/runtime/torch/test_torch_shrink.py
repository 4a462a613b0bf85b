"""torch.distributed.shrink_group over collie: a rank is SIGKILLed in the
middle of a loop, the survivors shrink the group and carry on
(workers_shrink.py holds what each rank does). The store is a file
(init_method file://), which outlives every rank."""
import os

import pytest

import harness
from harness import assert_ok, report

WORKERS = os.path.join(harness.HERE, "workers_shrink.py")


def run(world, *args):
    return harness.collect(harness.spawn_ranks(world, list(args), init="file", script=WORKERS))


def assert_killed_and_survived(results, victims):
    for v in victims:
        assert results[v].returncode == -9, report(results)
    assert_ok([r for r in results if r.rank not in victims])


@pytest.mark.parametrize("world,victim,flags", [(3, 1, "default"), (4, 2, "abort"),
                                                (4, 0, "default")])
def test_shrink_default_group(world, victim, flags):
    """Renumbered survivors, right all_reduces on the new default group, the
    old group refused, other groups destroyed, new_group afterwards."""
    assert_killed_and_survived(run(world, "default_group", victim, flags), [victim])


def test_shrink_sub_group():
    assert_killed_and_survived(run(4, "sub_group"), [2])


def test_shrink_wrong_list_names_the_agreed_ranks():
    assert_killed_and_survived(run(4, "wrong_list"), [2, 3])


def test_shrink_twice():
    assert_killed_and_survived(run(4, "twice"), [1, 3])


@pytest.mark.parametrize("world,victim", [(3, 1), (4, 0)])
def test_ddp_survives_a_killed_rank(world, victim):
    """DDP catches the failed backward, shrinks, re-wraps and trains on; the
    survivors' weights are the same bits and match a local reference."""
    assert_killed_and_survived(run(world, "ddp", victim), [victim])
