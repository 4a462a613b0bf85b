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


def _register():
    if BACKEND_NAME.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    dist.Backend.register_backend(BACKEND_NAME, _C._create_backend, extended_api=True,
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
