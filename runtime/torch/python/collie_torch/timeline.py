"""collie's timeline from Python: one Chrome trace / Perfetto JSON file per
job with every collective collie ran (one track per group), and the spans
the program adds (training steps), the ranks' clocks aligned to rank 0's
(docs/troubleshooting.md, "A timeline of a step").

    import collie_torch.timeline as timeline
    dist.init_process_group("collie")
    timeline.start("trace.json")           # collective
    for step, batch in enumerate(loader):
        with timeline.step_span(f"step {step}", step=step):
            ...
    timeline.finish()                      # collective: rank 0 writes the file
    dist.destroy_process_group()

COLLIE_TRACE=FILE does the same for any program: the default group's
creation starts it, and it is written at exit if finish() was not called.
"""
import contextlib
import time

import torch.distributed as dist

from . import _C

# The timeline's clock: CLOCK_REALTIME nanoseconds (time.time_ns()).
now_ns = time.time_ns


def start(path, rank=None, world_size=None):
    """Starts recording; rank 0 writes `path` at finish(). Collective over
    the default group's store (every rank calls it, after
    init_process_group). Without a process group: this process alone."""
    if dist.is_initialized():
        rank = dist.get_rank() if rank is None else rank
        world_size = dist.get_world_size() if world_size is None else world_size
        store = dist.distributed_c10d._get_default_store() if world_size > 1 else None
    else:
        rank, world_size, store = rank or 0, world_size or 1, None
    _C._timeline_start(path, rank, world_size, store)


def enabled():
    """Whether a timeline is recording."""
    return _C._timeline_enabled()


def span(name, start_ns, end_ns, track="step", cat="user", **args):
    """Records a span (times from now_ns()) on `track`, a row of this rank;
    `args` are integers shown with it."""
    _C._timeline_span(track, name, start_ns, end_ns, cat, {k: int(v) for k, v in args.items()})


@contextlib.contextmanager
def step_span(name, track="step", cat="step", **args):
    """A span around the body (nothing when not recording)."""
    if not _C._timeline_enabled():
        yield
        return
    start_ns = time.time_ns()
    try:
        yield
    finally:
        span(name, start_ns, time.time_ns(), track=track, cat=cat, **args)


def finish():
    """Stops recording and writes the trace (collective). Returns the path
    this rank wrote: the job's file on rank 0, "" elsewhere."""
    return _C._timeline_finish()
