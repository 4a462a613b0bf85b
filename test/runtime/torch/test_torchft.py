"""torchft (PyPI torchft 0.2) over collie: collie_torch.torchft's
ProcessGroupCollie in place of torchft's ProcessGroupGloo.

- torchft's own process-group tests (torchft/process_group_test.py in its
  wheel), run with collie: the single-rank API test, the configure timeout,
  reconfiguration, functional collectives through a registered group, and
  torchft's MultiPgBaseTest (3 ranks as threads of this process, one
  ProcessGroupCollie each) over every collective, plus its resiliency test
  (a rank shuts its group down, the others' next collective fails, bounded
  by a 1 s timeout). torchft skips alltoall_base, reduce_scatter and
  reduce_scatter_tensor_coalesced for gloo; none is skipped here, and
  torchft's reduce_scatter check, which runs on CUDA only (gloo has none),
  gets a CPU copy.
- A torchft training job (workers_torchft.py): the `torchft_lighthouse`
  server, 3 replica groups (one process each) with torchft's Manager, DDP
  and OptimizerWrapper over ProcessGroupCollie; one replica is SIGKILLed in
  the middle of a step, the two others carry on, and (rejoin) the killed
  one is started again, heals from them and trains on with them.

torchft is an optional dependency: without it (or `parameterized`, which
torchft's tests import) these tests skip, except under CI=true, where they
fail (tools/collie.sh installs it there).
"""
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from datetime import timedelta

import pytest

import torch
import torch.distributed as dist
from torch import nn
from torch._C._distributed_c10d import ReduceOp, ReduceScatterOptions
from torch.distributed import TCPStore
from torch.distributed import _functional_collectives as funcol

import harness

try:
    import torchft  # noqa: F401
    import torchft.process_group_test as ft_tests  # needs parameterized
    from parameterized import parameterized

    from collie_torch.torchft import ProcessGroupCollie
    MISSING = None
except ImportError as e:
    MISSING = (f"torchft is not importable in {sys.executable} ({e}); "
               f"{sys.executable} -m pip install torchft==0.2.0 parameterized")


def require_torchft():
    """Every test needs torchft: a skip naming what to install, or under
    CI=true (where tools/collie.sh installs it) a failure."""
    if MISSING is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{MISSING} (CI=true: tools/collie.sh installs it, so it may not skip)",
                    pytrace=False)
    pytest.skip(MISSING)


@pytest.fixture(autouse=True)
def _torchft_is_there():
    require_torchft()


WORKERS = os.path.join(harness.HERE, "workers_torchft.py")


def new_store():
    return TCPStore(host_name="localhost", port=0, is_master=True, wait_for_workers=False)


# --- torchft's ProcessGroupTest, with collie ---------------------------------


def test_collie_apis():
    """torchft's test_gloo_apis (cpu): every collective of its _test_pg on a
    1-rank group, then a torch DDP over the group; reconfigured, again."""
    store = new_store()
    pg = ProcessGroupCollie()
    pg.configure(f"localhost:{store.port}/prefix", "0", 0, 1)
    assert pg.size() == 1
    assert pg.getBackendName() == "torchft-collie"
    assert type(pg.backend()).__name__ == "BackendCollie"
    works = ft_tests._test_pg(pg, torch.tensor([2]))
    # torchft's gloo wrapper refuses the two reduce_scatters; collie has them.
    assert sorted(works) == sorted([
        "allreduce", "allreduce_coalesced", "allgather", "allgather_into_tensor_coalesced",
        "alltoall_base", "barrier", "broadcast", "broadcast_one", "reduce_scatter",
        "reduce_scatter_tensor_coalesced"])
    m = nn.parallel.DistributedDataParallel(nn.Linear(3, 4), process_group=pg)
    m(torch.rand(2, 3)).sum().backward()

    # torchft's test_nccl_apis reconfigures: a new group on a new prefix; the
    # old one is aborted and refuses calls.
    old = pg.backend()
    pg.configure(f"localhost:{store.port}/prefix2", "0", 0, 1)
    assert pg.backend() is not old
    ft_tests._test_pg(pg, torch.tensor([2]))
    with pytest.raises(RuntimeError):
        old.allreduce([torch.zeros(3)]).wait()
    pg.shutdown()


def test_collie_timeout():
    """torchft's test_gloo_timeout: configure for 2 ranks with a 10 ms
    timeout and nobody else joining raises (gloo: "timeout after 10ms";
    collie names the limit and the rank that never joined)."""
    store = new_store()
    pg = ProcessGroupCollie(timeout=timedelta(seconds=0.01))
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"waited .*\(limit 10\.0ms\) for rank\(s\) 1 to join"):
        pg.configure(f"localhost:{store.port}/prefix", "0", 0, 2)
    assert time.monotonic() - start < 10


def test_set_timeout_reaches_the_live_group():
    store = new_store()
    pg = ProcessGroupCollie(timeout=timedelta(seconds=60))
    pg.configure(f"localhost:{store.port}/prefix", "0", 0, 1)
    pg.set_timeout(timedelta(seconds=7))
    assert pg.backend().timeout == timedelta(seconds=7)
    pg.shutdown()
    assert pg.backend() is None


def test_errors_report_keeps_the_error_for_errored():
    """errors="report" (for torchft's DDP): a failed collective's wait()
    returns False instead of raising, errored() holds the error, the future
    completes with it; the next configure clears it. (errors="raise",
    wait() raising, is what TestCollieMultiPg's resiliency cases see.)"""
    store = new_store()
    pgs = [ProcessGroupCollie(timeout=timedelta(seconds=30), errors=e) for e in ("report", "raise")]
    outcome = {}

    def rank(r):
        pg = pgs[r]
        pg.configure(f"localhost:{store.port}/a", "0", r, 2)
        t = torch.ones(4)
        pg.allreduce([t], ReduceOp.SUM).wait()
        assert torch.equal(t, torch.full((4,), 2.0))
        barrier.wait(timeout=60)  # both have finished the first all_reduce
        if r == 1:
            pg.shutdown()  # rank 0's next all_reduce fails, naming rank 1
            return
        work = pg.allreduce([t], ReduceOp.SUM)
        outcome["wait"] = work.wait()
        outcome["errored"] = pg.errored()
        with pytest.raises(Exception) as e:
            work.get_future().wait()
        outcome["future"] = str(e.value)

    barrier = threading.Barrier(2)
    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert outcome["wait"] is False
    assert "rank 1" in str(outcome["errored"]), outcome
    assert "rank 1" in outcome["future"]
    pgs[0].configure(f"localhost:{store.port}/b", "0", 0, 1)
    assert pgs[0].errored() is None
    pgs[0].allreduce([torch.ones(1)], ReduceOp.SUM).wait()
    with pytest.raises(ValueError):
        ProcessGroupCollie(errors="ignore")


def test_functional_collectives():
    """torchft's test_functional_collectives: the group registered with
    torch (register()), resolved by name, and a functional all_reduce."""
    ft_tests.dummy_init_pg()
    store = new_store()
    pg = ProcessGroupCollie().register("test_func_col_collie")
    pg.configure(f"localhost:{store.port}/prefix", "0", 0, 1)
    assert pg.group_name == str(dist.get_pg_count() - 1)
    from torch._C._distributed_c10d import _resolve_process_group
    assert _resolve_process_group(pg.group_name) is pg
    try:
        t = torch.ones(10)
        funcol.all_reduce(t, "sum", pg).wait()
        assert torch.equal(t, torch.ones(10))
    finally:
        pg.unregister()


# --- torchft's MultiPgBaseTest (ranks as threads), with collie --------------


if MISSING is not None:
    class TestCollieMultiPg(unittest.TestCase):
        """Stands for the class below when torchft is missing (its base
        class is torchft's), so that its test id still runs and skips."""

        def test_torchft_is_missing(self):
            require_torchft()

else:
    def run_reduce_scatter_test_cpu(pg, rank, tensor):
        """torchft's run_reduce_scatter_test returns early on a CPU tensor (gloo
        has no reduce_scatter); the same check on the CPU."""
        world_sz = pg.size()
        if world_sz < 2:
            return
        local_data = [torch.arange(r * world_sz + 1, r * world_sz + world_sz + 1,
                                   dtype=torch.float32) for r in range(world_sz)]
        out = torch.zeros(world_sz, dtype=torch.float32)
        opts = ReduceScatterOptions()
        opts.reduceOp = ReduceOp.SUM
        pg.reduce_scatter([out], [local_data], opts).wait()
        expected = torch.arange(rank * world_sz + 1, rank * world_sz + world_sz + 1,
                                dtype=torch.float32) * world_sz
        torch.testing.assert_close(out, expected)


    COLLECTIVES = dict(ft_tests._COLLECTIVE_TO_FUNC, reduce_scatter=run_reduce_scatter_test_cpu)
    # parameterized.expand names the methods by index: a fixed order keeps the
    # names (the ctest entries) stable.
    COLLECTIVE_NAMES = sorted(COLLECTIVES)

    # What torchft's resiliency test accepts (gloo's and nccl's words), and
    # collie's: the connection to the rank that shut down closed, or the 1 s
    # timeout passed.
    RESILIENCY_ERRORS = (r"(Connection closed by peer|timed out after|Timed out waiting|no error|"
                         r"Read error|not equal|not close|process group not initialized|"
                         r"closed unexpectedly|closed its communicator|refused|aborted|shut down|timed out)")


    class TestCollieMultiPg(ft_tests.MultiPgBaseTest):
        """torchft's NormalGlooMultiPgTest with BACKEND collie: 3 ranks (threads),
        one ProcessGroupCollie each, configured on one TCPStore."""
        BACKEND = "collie"
        WORLD_SIZE = 3

        @classmethod
        def _create_pg(cls, backend):
            assert backend == "collie"
            return ProcessGroupCollie(timeout=timedelta(seconds=60))

        def _run_parallel(self, collective, device="cpu"):
            with _patched_collectives():
                super()._run_parallel(collective, device)

        @parameterized.expand(COLLECTIVE_NAMES)
        def test_collective(self, collective):
            self._run_parallel(collective, device="cpu")

        @parameterized.expand(COLLECTIVE_NAMES)
        def test_collective_with_resiliency(self, collective):
            """torchft's _run_with_resiliency, with collie's messages accepted
            too: all ranks reconfigure, the collective works, the last rank
            shuts its group down, the others' next one raises (or, for a
            send/recv between ranks 0 and 1, which does not involve it,
            succeeds: torchft's 'no error')."""
            test = COLLECTIVES[collective]

            def worker(pg, rank):
                pg.set_timeout(timedelta(seconds=30))
                fault_rank = self.WORLD_SIZE - 1
                pg.configure(f"localhost:{self.store.port}/reconfig_{collective}", "0", rank,
                             self.WORLD_SIZE)
                test(pg, rank, torch.tensor([rank + 1]))
                if rank == fault_rank:
                    pg.shutdown()
                    return f"Rank{rank} crashed"
                pg.set_timeout(timedelta(seconds=1))
                with self.assertRaisesRegex(Exception, RESILIENCY_ERRORS):
                    test(pg, rank, torch.tensor([rank + 1]))
                    raise RuntimeError("no error")
                return f"Rank{rank} final success."

            start = time.monotonic()
            futs = [self.executor.submit(worker, self.pg_pool[r], r) for r in range(self.WORLD_SIZE)]
            self._collect(futs)
            # Nothing waits for the 30 s of the group that was alive.
            assert time.monotonic() - start < 25


    class _patched_collectives:
        """MultiPgBaseTest._run_parallel looks collectives up in torchft's table;
        ours adds the CPU reduce_scatter."""

        def __enter__(self):
            self._saved = ft_tests._COLLECTIVE_TO_FUNC
            ft_tests._COLLECTIVE_TO_FUNC = COLLECTIVES

        def __exit__(self, *exc):
            ft_tests._COLLECTIVE_TO_FUNC = self._saved


# --- torchft's ManagerIntegTest (replica groups as threads), with collie ----

MANAGER_INTEG_TESTS = ["test_ddp_healthy", "test_ddp_recovery_0_async_quorum",
                       "test_ddp_recovery_1_sync_quorum", "test_ddp_skip_init_sync",
                       "test_ddp_recovery_multi_rank", "test_quorum_timeout",
                       "test_manager_allreduce_1"]  # _1: CPU (_0 needs GPUs)


@pytest.mark.parametrize("errors", ["raise", "report"])
def test_torchft_manager_integ_tests(errors):
    """torchft's own Manager integration tests (torchft/manager_integ_test.py:
    an in-process lighthouse, 2-3 replica groups of 1-2 ranks as threads,
    torchft's DDP, injected failures between steps, recovery by healing)
    with every ProcessGroupGloo they make a ProcessGroupCollie. Their
    managers listen on fixed ports (19530 + replica); here on port 0."""
    from unittest import TestSuite, TextTestRunner
    from unittest.mock import patch
    import torchft.manager_integ_test as integ
    from torchft.manager import Manager

    made = []

    def collie_group(*args, **kwargs):
        made.append(ProcessGroupCollie(*args, errors=errors, **kwargs))
        return made[-1]

    class PortZeroManager(Manager):
        def __init__(self, *args, port=None, **kwargs):
            super().__init__(*args, port=0, **kwargs)

    class SeededModel(integ.MyModel):
        """test_ddp_skip_init_sync needs every replica to start from the same
        weights: torchft seeds torch's global generator under a lock, but the
        replicas are threads and one that has its model already draws its
        inputs from that generator outside the lock, so on a loaded machine a
        replica's weights come out of a shifted stream (whatever the backend:
        the weights then differ by their initial range, ~1, not by the 4 Adam
        steps of 1e-3 a backend could change). A generator of the model's own
        gives every replica the same weights."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            generator = torch.Generator().manual_seed(42)
            with torch.no_grad():
                for p in self.parameters():
                    p.copy_(torch.rand(p.shape, generator=generator) - 0.5)

    suite = TestSuite([integ.ManagerIntegTest(name) for name in MANAGER_INTEG_TESTS])
    with patch.object(integ, "ProcessGroupGloo", collie_group), \
            patch.object(integ, "Manager", PortZeroManager), \
            patch.object(integ, "MyModel", SeededModel):
        result = TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    problems = [f"{t.id()}:\n{tb}" for t, tb in result.errors + result.failures]
    assert not problems, "\n".join(problems)
    assert result.testsRun == len(MANAGER_INTEG_TESTS) and not result.skipped, result.skipped
    assert made and all(type(p.backend()).__name__ == "BackendCollie"
                        for p in made if p.backend() is not None)


# --- a torchft training job with a replica SIGKILLed -----------------------

LIGHTHOUSE = os.path.join(os.path.dirname(sys.executable), "torchft_lighthouse")
HEARTBEAT_TIMEOUT_MS = 2000
JOB_TIMEOUT = 420


class Lighthouse:
    """torchft's lighthouse server, a process of its own, on a port the OS
    picked; its log is drained by a thread (it logs every quorum tick)."""

    def __init__(self, min_replicas):
        self.lines = []
        self.address = None
        self._ready = threading.Event()
        self.proc = subprocess.Popen(
            [LIGHTHOUSE, "--bind", "127.0.0.1:0", "--min_replicas", str(min_replicas),
             "--heartbeat_timeout_ms", str(HEARTBEAT_TIMEOUT_MS), "--quorum_tick_ms", "50"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()
        if not self._ready.wait(60) or not self.address:
            self.close()
            raise RuntimeError("the lighthouse did not say where it listens within 60 s:\n"
                               + "\n".join(self.lines[-20:]))

    def _drain(self):
        for line in self.proc.stderr:
            if "Quorum status" not in line or len(self.lines) < 200:
                self.lines.append(line.rstrip())
            if self.address is None and "listening on:" in line:
                self.address = line.split("listening on:")[1].strip()
                self._ready.set()
        self._ready.set()

    def close(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


class EventFifo:
    """Lines the replicas write (workers_torchft.event), read with deadlines."""

    def __init__(self, folder):
        self.path = os.path.join(folder, "events")
        os.mkfifo(self.path)
        self._read = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self._keep = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)  # no EOF between writers
        self._buf = b""

    def next(self, deadline, procs):
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no event from the replicas before the deadline")
            dead = [p for p in procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"replica(s) exited before the event: "
                                   f"{[(p.args[3], p.returncode) for p in dead]}")
            ready, _, _ = select.select([self._read], [], [], min(left, 1.0))
            if ready:
                self._buf += os.read(self._read, 4096)
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def close(self):
        os.close(self._read)
        os.close(self._keep)


def spawn_replica(folder, fifo, role, index, lighthouse, min_steps, kill_step, rejoin, extra):
    tag = f"{role}_{index}"
    out = os.path.join(folder, f"{tag}.pt")
    log = open(os.path.join(folder, f"{tag}.log"), "w+")
    env = harness.base_env(dict(extra, COLLIE_TEST_EVENT_FIFO=fifo.path, RUST_BACKTRACE="1"))
    p = subprocess.Popen([harness.PYTHON, WORKERS, role, f"replica_{index}", lighthouse,
                          str(min_steps), str(kill_step), "1" if rejoin else "0", out],
                         env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    p.out, p.log, p.tag = out, log, tag
    return p


def output_of(p, tail=6000):
    p.log.flush()
    p.log.seek(0)
    text = p.log.read()
    return f"--- {p.tag} (exit {p.returncode}) ---\n{text[-tail:]}"


@pytest.mark.parametrize("loop,errors,rejoin", [
    ("manager", "raise", True), ("manager", "raise", False), ("ddp", "report", True)],
    ids=["manager-rejoin", "manager-no-rejoin", "ddp-report-rejoin"])
def test_training_survives_a_killed_replica(loop, errors, rejoin):
    """3 replica groups train with torchft over collie; replica 2 is
    SIGKILLed inside a step >= 3 that the 3 take part in (the others are in
    its gradient all_reduce); replicas 0 and 1 go on as a quorum of 2 and
    commit steps; with rejoin, replica 2 is started again, heals from them
    and the 3 train on. Every replica that finishes has the same parameters,
    bit for bit. loop "manager": Manager.allreduce of the gradients, collie's
    errors raised from wait(); "ddp": torchft's DistributedDataParallel,
    which needs ProcessGroupCollie(errors="report") (see collie_torch.torchft)."""
    min_steps, kill_step = 8, 3
    extra = {"COLLIE_TORCHFT_LOOP": loop, "COLLIE_TORCHFT_ERRORS": errors}
    deadline = time.monotonic() + JOB_TIMEOUT
    lighthouse = Lighthouse(min_replicas=2)
    procs = []
    with tempfile.TemporaryDirectory(prefix="collie_torchft_") as folder:
        fifo = EventFifo(folder)
        try:
            for i, role in enumerate(["survivor", "survivor", "victim"]):
                procs.append(spawn_replica(folder, fifo, role, i, lighthouse.address, min_steps,
                                           kill_step, rejoin, extra))
            victim = procs[2]
            line = fifo.next(deadline, procs)
            assert line == f"pid {victim.pid}", line
            os.kill(victim.pid, signal.SIGKILL)
            killed_at = time.time()
            victim.wait(timeout=30)
            line = fifo.next(deadline, procs[:2])
            assert line.startswith("continued "), line
            _, who, step, when = line.split()
            first_commit_s = float(when) - killed_at
            if rejoin:
                procs.append(spawn_replica(folder, fifo, "rejoiner", 2, lighthouse.address,
                                           min_steps, -1, rejoin, extra))
            finishers = procs[:2] + procs[3:]
            for p in finishers:
                p.wait(timeout=max(deadline - time.monotonic(), 1))
            outputs = "\n".join(output_of(p) for p in procs)
            assert victim.returncode == -signal.SIGKILL, outputs
            assert all(p.returncode == 0 for p in finishers), outputs
            results = [torch.load(p.out, weights_only=False) for p in finishers]
        except BaseException:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
            print("\n".join(output_of(p) for p in procs))
            print("--- lighthouse ---\n" + "\n".join(lighthouse.lines[-40:]))
            raise
        finally:
            fifo.close()
            lighthouse.close()
            for p in procs:
                p.log.close()

    survivors = results[:2]
    print(f"torchft ({loop}, errors={errors}, {results[0]['backends']}): replica 2 killed at step "
          f"{survivors[0]['failed_at']}; "
          f"the survivors' next committed step ({survivors[0]['continued_at']}, by 2 replicas) "
          f"{first_commit_s:.2f} s after the SIGKILL (lighthouse heartbeat timeout "
          f"{HEARTBEAT_TIMEOUT_MS} ms); all finished at step {results[0]['step']}"
          + (f", the restarted replica trained with them from step "
             f"{min(s for s, c, n, _ in results[2]['log'] if c and n == 3)}" if rejoin else ""))
    for r in results:
        assert r["backends"] == ["BackendCollie"], r["backends"]
    for r in survivors:
        # The killed step failed on both survivors, the next commits were by 2.
        assert r["failed_at"] is not None and r["failed_at"] >= kill_step, r["log"]
        assert r["continued_at"] is not None and r["continued_at"] >= r["failed_at"], r["log"]
        by_two = [s for s, c, n, _ in r["log"] if c and n == 2 and s >= r["failed_at"]]
        assert by_two, r["log"]
    assert survivors[0]["continued_at"] == survivors[1]["continued_at"]
    steps = {r["step"] for r in results}
    assert len(steps) == 1 and steps.pop() >= min_steps, [r["step"] for r in results]
    if rejoin:
        together = [s for s, c, n, _ in results[2]["log"] if c and n == 3]
        assert len(together) >= 3 and together == list(range(together[0], together[0] + len(together))), results[2]["log"]
        for r in survivors:
            assert [s for s, c, n, _ in r["log"] if c and n == 3 and s > r["continued_at"]] == together
    for r in results[1:]:
        for k, v in r["params"].items():
            assert torch.equal(v, results[0]["params"][k]), k
