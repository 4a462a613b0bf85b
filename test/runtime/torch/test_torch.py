"""The collie_torch backend, end to end: torch's own init_process_group("collie")
in real processes over loopback (workers.py holds what each rank does,
harness.py starts them). ctest runs each test through run_pytest.py."""
import os

import pytest

import harness
from harness import assert_ok, report, run_command, run_job


# --- every operation, against gloo and a local reference -------------------

@pytest.mark.parametrize("world,default_backend", [(2, "collie"), (3, "gloo"), (4, "collie")])
def test_operations_match_gloo(world, default_backend):
    """(3, "gloo") also covers new_group(backend="collie") inside a gloo
    default group; 3 and 4 ranks, sums whose order differs from gloo's."""
    assert_ok(run_job(world, ["ops", default_backend], init="env"))


def test_noncontiguous_tensors():
    assert_ok(run_job(2, ["noncontiguous"], init="env"))


def test_work_and_future():
    assert_ok(run_job(2, ["work"], init="env"))


@pytest.mark.parametrize("world", [2, 3])
def test_point_to_point_rooted_all_to_all_and_bitwise(world):
    """send/recv (tags, any source), reduce, gather, scatter, all_to_all(_single)
    with split sizes, BAND/BOR/BXOR, int8 and bool: against gloo and a
    reference."""
    assert_ok(run_job(world, ["more_ops"], init="env"))


def test_bad_arguments_are_refused():
    """int16 reductions, avg of integers, product of complex, sparse tensors,
    bad roots and slots: RuntimeError at the call, the group usable after."""
    assert_ok(run_job(2, ["unsupported"], init="env"))


@pytest.mark.parametrize("spec", ["cpu:collie,cuda:gloo", "cpu:gloo,cuda:collie"])
def test_one_backend_per_device(spec):
    assert_ok(run_job(2, ["devices", spec], init="env"))


@pytest.mark.parametrize("world", [2, 4])
def test_split_group(world):
    assert_ok(run_job(world, ["split"], init="env"))


def test_explicit_import():
    """`import collie_torch` by name, with torch's autoloading turned off."""
    assert_ok(run_job(2, ["smoke"], init="env",
                      env={"COLLIE_TEST_EXPLICIT_IMPORT": "1", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}))


# --- failures: a killed rank, a mismatched call, a rank that never calls ----

@pytest.mark.parametrize("world,victim,strict", [(2, 1, "1"), (3, 2, "0")])
def test_killed_rank_raises_naming_it(world, victim, strict):
    results = run_job(world, ["kill", victim, strict], init="env")
    survivors = [r for r in results if r.rank != victim]
    assert results[victim].returncode == -9, report(results)
    assert_ok(survivors)


def test_monitored_barrier_and_set_timeout():
    assert_ok(run_job(2, ["monitored_and_timeout"], init="file"))


def test_exit_with_an_operation_pending():
    results = run_job(2, ["exit_with_pending"], init="file")
    assert_ok(results)
    assert "rank 1: ok" in results[1].out, report(results)


def test_abort_ends_a_blocked_call():
    assert_ok(run_job(2, ["abort"], init="file"))


@pytest.mark.parametrize("kind", ["count", "dtype", "op"])
def test_mismatched_call_raises(kind):
    assert_ok(run_job(2, ["mismatch", kind], init="env"))


def test_init_process_group_timeout_is_honoured():
    """timeout=3 s: rank 0's all_reduce, which its peer never joins, raises a
    TimeoutError-based RuntimeError after about 3 s, not 30 minutes."""
    results = run_job(2, ["timeout"], init="env")
    assert_ok(results)
    line = [s for s in results[0].out.splitlines() if "raised after" in s][0]
    elapsed = float(line.split("raised after ")[1].split(" s")[0])
    assert elapsed >= 2.5, line


# --- rendezvous: init methods and launchers ---------------------------------

@pytest.mark.parametrize("init", ["env", "tcp", "file"])
def test_init_methods(init):
    assert_ok(run_job(2, ["smoke"], init=init))


def torchrun(nproc, *worker_args, rdzv=None):
    """torchrun's argv (`python -m torch.distributed.run`). Static rendezvous
    by default: the agent hosts the store (torch 2.x's libuv TCPStore) and the
    workers use it (TORCHELASTIC_USE_AGENT_STORE=True); rdzv="c10d" uses the
    c10d rendezvous backend, whose store the workers do not share."""
    argv = [harness.PYTHON, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node",
            str(nproc)]
    if rdzv == "c10d":
        argv += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{harness.free_port()}"]
    else:
        argv += ["--master_addr", "127.0.0.1", "--master_port", str(harness.free_port())]
    return argv + ["--redirects", "1", "--tee", "1", harness.WORKERS, *map(str, worker_args)]


def collie_run(nproc, *worker_args, flags=()):
    path = os.path.join(harness.BIN_DIR, "collie-run")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no {path} (build the collie-run target)")
    return [path, "--standalone", "--store-compat", "--nproc-per-node", str(nproc), *flags,
            harness.PYTHON, harness.WORKERS, *map(str, worker_args)]


@pytest.mark.parametrize("rdzv", ["static", "c10d"])
def test_under_torchrun(rdzv):
    r = run_command(torchrun(2, "smoke", rdzv=rdzv))
    assert r.returncode == 0, repr(r)
    assert r.out.count(": ok") == 2, repr(r)


def test_torchrun_agent_store_collectives_groups_and_reinit():
    """3 ranks under torchrun, two init/destroy cycles through the agent's
    store (workers.scenario_agent_store)."""
    r = run_command(torchrun(3, "agent_store", "collie", 2))
    assert r.returncode == 0, repr(r)
    assert r.out.count("2 init/destroy cycles:") == 3, repr(r)


def test_under_collie_run():
    r = run_command(collie_run(2, "smoke"))
    assert r.returncode == 0, repr(r)
    assert r.out.count(": ok") == 2, repr(r)


# A rank SIGKILLed mid-training under a launcher: the survivors' backward
# raises naming it (checked by each survivor, which then exits 0: see
# workers.scenario_ddp_kill), and the launcher exits non-zero naming it.

@pytest.mark.parametrize("world,victim,strict", [(2, 1, "1"), (3, 0, "0")])
def test_killed_rank_under_collie_run(world, victim, strict):
    # A long grace period: the survivors ignore the SIGTERM that collie-run
    # sends at once, and report by themselves.
    r, pid = harness.run_command_killing(
        collie_run(world, "ddp_kill", victim, strict, flags=("--grace-period", "120")))
    assert pid is not None, repr(r)
    assert r.returncode != 0, repr(r)
    assert r.out.count("survivor ok") == world - 1, repr(r)
    summary = r.err + r.out
    assert f"root cause: rank {victim} (local rank {victim}, pid {pid}) ended with" in summary, \
        repr(r)
    assert "SIGKILL" in summary, repr(r)


def test_killed_rank_under_torchrun():
    r, pid = harness.run_command_killing(torchrun(2, "ddp_kill", 1, "1"))
    assert pid is not None, repr(r)
    assert r.returncode != 0, repr(r)
    assert r.out.count("survivor ok") == 1, repr(r)
    # torchrun's ChildFailedError table: the victim's rank, exit code and pid.
    summary = r.err + r.out
    assert "rank      : 1 (local_rank: 1)" in summary, repr(r)
    assert "exitcode  : -9 (pid: %d)" % pid in summary, repr(r)


# --- the samples: collie and gloo train the same model ----------------------

@pytest.mark.parametrize("sample,steps", [("torch_ddp", 40), ("torch_fsdp", 15),
                                          ("torch_moe", 15)])
def test_sample_trains_the_same_weights_as_gloo(tmp_path, sample, steps):
    """samples/<sample>/train.py, 2 ranks, 2 epochs of a few steps, over each
    backend. Two ranks sum two numbers in every algorithm (a + b == b + a in
    IEEE arithmetic), DDP divides before it sums and FSDP2 averages in the
    reduce-scatter the same way, the mixture of experts' all_to_alls move
    bytes as they are, and everything else is the same single-threaded code:
    the weights (the MoE sample's: every rank's experts, gathered) must be the
    same bits."""
    import torch

    data = os.path.join("/usr/share/datasets/fashion-mnist")
    if not os.path.exists(os.path.join(data, "train-images-idx3-ubyte.gz")):
        pytest.skip(f"no Fashion-MNIST in {data} (package dataset-fashion-mnist, installed by tools/collie.sh)")
    script = os.path.join(harness.SOURCE_DIR, "samples", sample, "train.py")
    final = {}
    for backend in ("collie", "gloo"):
        out = tmp_path / backend
        results = harness.collect(harness.spawn_ranks(
            2, ["--backend", backend, "--epochs", "2", "--max-steps", str(steps), "--print-freq",
                "1000", "--output-dir", str(out), "--timeout", "120"],
            init="env", script=script))
        assert_ok(results)
        final[backend] = torch.load(out / "checkpoint_01.pth")["model"]
    worst = 0.0
    for name, w in final["collie"].items():
        g = final["gloo"][name]
        assert w.shape == g.shape, name
        worst = max(worst, (w - g).abs().max().item())
        assert torch.equal(w, g), f"{name}: the weights differ by up to {worst}"
    print(f"largest |collie - gloo| over the parameters: {worst:g}")
