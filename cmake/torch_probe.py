"""What cmake/CollieTorch.cmake needs to know of the torch it builds against,
one key=value per line. Run as `python -I torch_probe.py`; exits non-zero with
the reason on stderr when there is no usable torch 2.x."""
import os
import sys
import sysconfig

try:
    import torch
except Exception as e:  # noqa: BLE001  any failure means: no usable torch
    sys.exit(f"import torch failed: {e}")

major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
if (major, minor) < (2, 6):
    sys.exit(f"torch {torch.__version__} is older than 2.6 (collie_torch is a torch 2.x c10d::Backend)")

root = os.path.dirname(torch.__file__)
include = os.path.join(root, "include")
backend_hpp = os.path.join(include, "torch", "csrc", "distributed", "c10d", "Backend.hpp")
if not os.path.exists(backend_hpp):
    sys.exit(f"{backend_hpp} is missing (a torch without its C++ headers?)")
with open(backend_hpp) as f:
    backend_source = f.read()

print(f"version={torch.__version__}")
print(f"includes={include}|{os.path.join(include, 'torch', 'csrc', 'api', 'include')}")
print(f"lib_dir={os.path.join(root, 'lib')}")
print(f"python_include={sysconfig.get_paths()['include']}")
print(f"ext_suffix={sysconfig.get_config_var('EXT_SUFFIX')}")
print(f"cxx11_abi={int(torch._C._GLIBCXX_USE_CXX11_ABI)}")
print(f"cuda={torch.version.cuda}")
# Methods of c10d::Backend that only some torch versions have.
print(f"gather_into_tensor={int('gather_into_tensor(' in backend_source)}")
