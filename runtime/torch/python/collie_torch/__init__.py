"""collie as a torch.distributed backend.

    import torch.distributed as dist
    dist.init_process_group("collie")     # instead of "gloo"

Installed with `pip install .` at collie's repository root, the package is
found by torch itself (its "torch.backends" entry point, which torch loads on
`import torch`); `import collie_torch` does the same explicitly. Either way
the backend "collie" is registered for CPU tensors (collie's shared-memory
and TCP collectives) and CUDA tensors (collie's NCCL backend, where this
build has it: see CUDA).
"""
import atexit
import os
import sys

import torch

from . import _build

BACKEND_NAME = "collie"
TORCH_VERSION = _build.TORCH_VERSION  # the torch this build is for
CUDA = _build.CUDA  # what this build does with CUDA tensors

if torch.__version__ != TORCH_VERSION:
    # A C++ extension only loads into the torch it was compiled against.
    raise ImportError(
        f"collie_torch was built for torch {TORCH_VERSION}, but this environment has torch "
        f"{torch.__version__}: rebuild it here (pip install --force-reinstall --no-deps "
        f"<collie's source folder>)")

import torch.distributed as dist  # noqa: E402  (after the version check)

from . import _C  # noqa: E402
from ._C import BackendCollie, build_info  # noqa: E402,F401


def _group_desc():
    """The description torch gives the group it is creating (what its flight
    recorder calls the group: "default_pg", a user's group_desc, or
    "undefined"). torch sets it on the group only after the backend exists,
    so it is read from _new_process_group_helper's frame; None elsewhere."""
    frame = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            break
        if frame.f_code.co_name == "_new_process_group_helper":
            desc = frame.f_locals.get("group_desc")
            return desc if isinstance(desc, str) else None
        frame = frame.f_back
    return None


def _create_backend(opts, pg_options=None):
    return _C._create_backend(opts, pg_options, group_desc=_group_desc())


def _register():
    if BACKEND_NAME.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True,
                                  devices=["cpu", "cuda"])


_register()

# A program may end without destroy_process_group(), with operations still
# running on a group's worker thread; they must end before Python's
# finalization starts (a thread that touches a Python object after that is
# killed, and the process with it): at most 10 s each, then the groups are
# aborted.
atexit.register(_C._quiesce_all, 10.0)


def backend(group=None, device="cpu"):
    """The BackendCollie under `group` (the default group when None) for
    `device`: its queue_stats() and group_name."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return pg._get_backend(torch.device(device))


def dump_flight_recorder():
    """Writes this rank's flight recorder dump now and returns its path,
    <TORCH_FR_DUMP_TEMP_FILE><rank> (default
    ~/.cache/torch/comm_lib_trace_rank_<rank> under torch's recorder,
    /tmp/collie_trace_rank_<rank> under collie's),
    which `torchfrtrace <folder>` reads (docs/torch.md, "Flight recorder").

    One file, by one recorder: torch's own (torch 2.15 and later, which
    attach their FlightRecorderHook to every collie group; the backend name
    its entries are filed under is "collie"), else collie's (torch 2.11, or
    TORCH_FR_BUFFER_SIZE=0 with COLLIE_FR_BUFFER_SIZE set)."""
    if _C._torch_recorder_attached():
        from torch._C._distributed_c10d import _dump_fr_trace_file

        rank = dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))
        _dump_fr_trace_file(rank, backend=BACKEND_NAME)
        # torch's DebugInfoWriter's default: $HOME/.cache/torch/comm_lib_trace_rank_
        default = os.path.join(os.environ.get("HOME", "/tmp"), ".cache", "torch",
                               "comm_lib_trace_rank_")
        prefix = (os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
                  or os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") or default)
        return prefix + str(rank)
    return _C._dump_flight_recorder("collie_torch.dump_flight_recorder()")
