#!/usr/bin/env bash
# Makes the environment test/frameworks runs in: Lightning, Accelerate,
# DeepSpeed and Ray Train (requirements.txt) on top of the torch 2.11.0
# environment that tools/collie.sh makes, which holds torch and collie_torch.
#
#   bash test/frameworks/make_venv.sh [TORCH_VENV [FRAMEWORKS_VENV]]
#
# Defaults: ${XDG_CACHE_HOME:-~/.cache}/collie/venv-torch-2.11.0 and
# .../venv-frameworks-2.11.0. torch is not downloaded again: the new
# environment reads the torch environment's site-packages through a .pth file
# (after its own), and pip is held to that torch's version by a constraint.
# The torch environment is never written to (the tests of runtime/torch use
# it): pip does not uninstall outside the environment it installs into, and
# this script checks that the torch environment's package list is unchanged.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/collie
TORCH_VENV=${1:-$ROOT/venv-torch-2.11.0}
VENV=${2:-$ROOT/venv-frameworks-2.11.0}

if ! "$TORCH_VENV/bin/python" -c "import torch, collie_torch" 2>/dev/null; then
  echo "make_venv.sh: $TORCH_VENV has no torch with collie_torch" \
    "(bash tools/collie.sh build makes it)" >&2
  exit 1
fi
torch_version=$("$TORCH_VENV/bin/python" -c "import torch; print(torch.__version__.split('+')[0])")
purelib="import sysconfig; print(sysconfig.get_paths()['purelib'])"
torch_site=$("$TORCH_VENV/bin/python" -c "$purelib")
before=$(mktemp) after=$(mktemp) constraints=$(mktemp)
trap 'rm -f "$before" "$after" "$constraints"' EXIT
"$TORCH_VENV/bin/python" -m pip freeze >"$before"
echo "torch==$torch_version" >"$constraints"

if [[ ! -x $VENV/bin/python ]]; then
  # The torch environment's interpreter, so that both are the same Python.
  "$TORCH_VENV/bin/python" -m venv "$VENV"
fi
site=$("$VENV/bin/python" -c "$purelib")
echo "$torch_site" >"$site/_collie_torch_env.pth"
"$VENV/bin/python" -m pip install -q -c "$constraints" -r "$HERE/requirements.txt"

"$TORCH_VENV/bin/python" -m pip freeze >"$after"
if ! diff -u "$before" "$after"; then
  echo "make_venv.sh: the packages of $TORCH_VENV changed (above)" >&2
  exit 1
fi
where=$("$VENV/bin/python" -c "import torch; print(torch.__file__)")
case $where in
  "$torch_site"/*) ;;
  *)
    echo "make_venv.sh: $VENV imports torch from $where, not from $torch_site" >&2
    exit 1
    ;;
esac
"$VENV/bin/python" -c "
import torch, torch.distributed as dist, lightning, accelerate, deepspeed, ray.train
assert 'collie' in dist.Backend.backend_list, 'collie is not registered'
print('make_venv.sh: $VENV: torch', torch.__version__, 'lightning', lightning.__version__,
      'accelerate', accelerate.__version__, 'deepspeed', deepspeed.__version__,
      'ray', ray.__version__)
"
