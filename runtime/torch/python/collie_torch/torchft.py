"""collie as a torchft process group (torchft 0.2, PyPI `torchft`).

    from torchft import Manager
    from collie_torch.torchft import ProcessGroupCollie

    manager = Manager(pg=ProcessGroupCollie(timeout=timedelta(seconds=30)), ...)

torchft's Manager calls `configure(store_addr, replica_id, rank, world_size,
...)` on its process group for every new quorum (the set of replica groups
that train together changed: one died, one joined); the group must then be
a new group over the new members, built in this process, before the step
goes on. `ProcessGroupCollie` does what torchft's own `ProcessGroupGloo`
does (torchft/process_group.py), with collie's backend in gloo's place:

- torchft's `ProcessGroupWrapper.configure` aborts the group of the
  previous quorum (collie's abort: a call blocked in it returns at once
  with an error, its peers see the connections close) and opens a
  PrefixStore over a TCPStore client at `store_addr` ("host:port/prefix",
  a fresh prefix per quorum);
- `_create_pg` (here) makes collie's `BackendCollie` over that store, as
  torch's `init_process_group("collie")` would (collie's `_create_backend`
  with torch's `_DistributedBackendOptions`), and puts it under a
  `torch.distributed.ProcessGroup` for the CPU (and CUDA, when there is
  one) as a CUSTOM backend.

Every collective then runs on collie: torchft's wrapper forwards each
`allreduce`, `allgather`, `broadcast`, ... to that ProcessGroup. torchft's
gloo wrapper refuses `reduce_scatter` and `reduce_scatter_tensor_coalesced`
(gloo has none); collie has them, so they are not refused here. Two behaviours differ from
the gloo wrapper, because collie can do better than drop its reference:

- `set_timeout` also changes the live group's deadline for its later
  operations (gloo's wrapper only keeps it for the next `configure`);
- `shutdown` shuts collie's group down (what was issued finishes within its
  deadline, then the connections close, so peers blocked on this rank
  raise at once instead of waiting for their timeout).

How a failed collective reaches torchft (`errors`):

- "raise" (the default; c10d's and gloo's way): the Work's `wait()` raises
  the error (a `DistBackendError` naming the rank that failed). torchft's
  `Manager.allreduce(...).wait()` catches it and reports it to the
  Manager, whose `should_commit()` then says no. But torchft 0.2's
  `torchft.ddp.DistributedDataParallel` comm hook then fails on an
  `assert` (its `_ManagedWork.wait` skips building the future chain when
  the underlying `wait()` raises), with gloo as with collie.
- "report" (torchft's NCCL model): `wait()` returns instead of raising and
  the error is kept for `errored()`, which the Manager asks in
  `should_commit()`; the Work's future still completes with the error,
  which torchft's future chain reports too. The step is then discarded,
  as it must be: the outputs of a failed collective are not defined. Use
  it with `torchft.ddp.DistributedDataParallel`. The next `configure`
  (the next quorum) clears the error.

torchft is optional: this module imports it; `import collie_torch` does
not import this module.
"""
from datetime import timedelta
from typing import Optional

import torch
from torch._C._distributed_c10d import _DistributedBackendOptions
from torch.distributed import ProcessGroup as BaseProcessGroup
from torch.distributed import Store
from torch.distributed.distributed_c10d import Work

from torchft.process_group import ProcessGroupWrapper

from . import _C

__all__ = ["ProcessGroupCollie"]


class ProcessGroupCollie(ProcessGroupWrapper):
    """A reconfigurable collie process group for torchft's Manager (its `pg`
    argument), in place of torchft's ProcessGroupGloo.

    Args:
        timeout: the deadline of the rendezvous of each configure (the
            TCPStore client's and collie's) and of every collective of the
            group (collie's default deadline; set_timeout changes it).
        pg: torchft's: a torchft ProcessGroup to configure instead (then
            this is a plain wrapper around it).
        errors: "raise" or "report": how a failed collective reaches
            torchft (see the module's text).
    """

    def __init__(self, timeout: timedelta = timedelta(seconds=60), pg=None,
                 errors: str = "raise") -> None:
        if errors not in ("raise", "report"):
            raise ValueError(f'errors must be "raise" or "report", not {errors!r}')
        super().__init__(timeout=timeout, pg=pg)
        self._errors = errors
        self._error: Optional[Exception] = None

    def configure(self, *args, **kwargs) -> None:
        self._error = None
        super().configure(*args, **kwargs)

    def _create_pg(self, store: Store, rank: int, world_size: int) -> BaseProcessGroup:
        name = self._group_name_for_quorum()
        opts = _DistributedBackendOptions()
        opts.store = store
        opts.group_rank = rank
        opts.group_size = world_size
        opts.timeout = self._timeout
        opts.group_id = name
        if self._global_ranks:
            opts.global_ranks_in_group = list(self._global_ranks)
        # The rendezvous: blocks (without the GIL) until every member of the
        # quorum has published its address, or the timeout passes.
        backend = _C._create_backend(opts)

        pg = BaseProcessGroup(store, rank, world_size)
        pg._set_default_backend(BaseProcessGroup.BackendType.CUSTOM)
        devices = [torch.device("cpu")]
        if torch.cuda.is_available():
            devices.append(torch.device("cuda"))
        for device in devices:
            pg._register_backend(device, BaseProcessGroup.BackendType.CUSTOM, backend)
        return pg

    def _group_name_for_quorum(self) -> str:
        # Every member must give the same name: collie's rendezvous keys are
        # under it (in the store prefix of this quorum). torchft's gloo
        # wrapper names its group the same way: the quorum and the rank
        # within the replica group, which the members share.
        quorum = self._quorum_id if self._quorum_id is not None else "none"
        local = self._group_rank if self._group_rank is not None else 0
        return f"torchft_quorum_{quorum}_rank_{local}"

    def backend(self, device: str = "cpu"):
        """collie's BackendCollie under the current group (None before the
        first configure or after shutdown/abort)."""
        pg = self._pg
        if pg is None or not isinstance(pg, BaseProcessGroup) or isinstance(pg, ProcessGroupWrapper):
            return None
        return pg._get_backend(torch.device(device))

    def getBackendName(self) -> str:
        return "torchft-collie"

    def set_timeout(self, timeout: timedelta) -> None:
        super().set_timeout(timeout)
        backend = self.backend()
        if backend is not None:
            backend.set_timeout(timeout)

    def shutdown(self) -> None:
        backend = self.backend()
        self._pg = None
        if backend is not None:
            backend.shutdown()

    def errored(self) -> Optional[Exception]:
        """With errors="report", the first error a Work's wait() kept since
        the last configure; else None (wait() raised it)."""
        return self._error

    def _report(self, error: Exception) -> None:
        if self._error is None:
            self._error = error

    def _wrap_work(self, work: Work, opts: object) -> Work:
        if self._errors == "report":
            return _ReportingWork(self, work)
        return work


class _ReportingWork(Work):
    """A collie Work whose wait() keeps its error for the group's errored()
    instead of raising it (ProcessGroupCollie(errors="report"))."""

    def __init__(self, pg: ProcessGroupCollie, work: Work) -> None:
        super().__init__()
        self._pg = pg
        self._work = work

    def wait(self, timeout: Optional[timedelta] = None) -> bool:
        try:
            return self._work.wait() if timeout is None else self._work.wait(timeout)
        except Exception as e:  # DistBackendError, or the timeout of wait(timeout)
            self._pg._report(e)
            return False

    def synchronize(self) -> None:
        self.wait()

    def block_current_stream(self) -> None:
        self.wait()

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def is_success(self) -> bool:
        return self._work.is_success()

    def exception(self):
        return self._work.exception()

    def get_future(self):
        return self._work.get_future()

    def result(self):
        return self._work.result()
