#!/usr/bin/env bash
# tools/collie.sh's check of a torch virtual environment (torch_venv_ok) and
# the repair of its pip (repair_pip), sourced from the script, on a small
# environment with stand-in torch, numpy and pytest modules (no PyPI):
#  - without pip (python3 -m venv --without-pip) it is not healthy, though
#    torch, numpy and pytest import; repair_pip gives it one with ensurepip
#    and keeps what it had;
#  - bin/pip gone but the module there: healthy (every call is python -m pip);
#  - bin/pip there but the pip module gone: not healthy;
#  - the script calls pip only as `python -m pip`.
# Usage: collie_sh_venv_pip_test.sh SOURCE_DIR [PYTHON]
set -uo pipefail
src=$1
py=${2:-python3}
fail() { echo "FAIL: $*"; exit 1; }
"$py" -c 'import ensurepip, venv' 2>/dev/null ||
  { echo "SKIP: $py has no venv/ensurepip (Debian package python3-venv)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
venv=$tmp/venv-torch-2.11.0

echo "== the script runs pip only as python -m pip"
if grep -nP '^[^#]*(bin/pip|(?<!-m )\bpip3? +install)' "$src/tools/collie.sh"; then
  fail "tools/collie.sh calls a pip script, not python -m pip"
fi

"$py" -m venv --without-pip "$venv" || { echo "SKIP: $py -m venv --without-pip failed"; exit 77; }
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for m in torch numpy pytest; do mkdir -p "$site/$m"; done
echo '__version__ = "2.11.0+cpu"' >"$site/torch/__init__.py"
touch "$site/numpy/__init__.py" "$site/pytest/__init__.py"

# shellcheck source=/dev/null
source "$src/tools/collie.sh" || fail "sourcing tools/collie.sh failed"
set +e  # collie.sh's set -e: the checks below expect failures

echo "== no pip at all: not healthy"
torch_venv_ok "$venv" 2.11.0 && fail "a venv without pip passed the health check"
echo "== repair_pip gives it a pip with ensurepip, keeping torch"
torch_imports "$venv" 2.11.0 || fail "the stand-in torch 2.11.0 does not import"
repair_pip "$venv" || fail "repair_pip failed"
"$venv/bin/python" -m pip --version || fail "python -m pip does not run after repair_pip"
[[ -f $site/torch/__init__.py ]] || fail "repair_pip lost the installed torch"
torch_venv_ok "$venv" 2.11.0 || fail "the repaired venv is not healthy"
torch_venv_ok "$venv" 2.15.0 && fail "a torch 2.11.0 venv passed as torch 2.15.0"

echo "== the module there, bin/pip gone: healthy"
ls "$venv"/bin/pip* >/dev/null || fail "ensurepip made no bin/pip"
mv "$venv/bin" "$tmp/bin.saved" && mkdir "$venv/bin" && cp -P "$tmp/bin.saved"/python* "$venv/bin/"
torch_venv_ok "$venv" 2.11.0 || fail "a venv without bin/pip but with its pip module failed the check"

echo "== bin/pip there, the pip module gone: not healthy"
cp -P "$tmp/bin.saved"/pip* "$venv/bin/"
rm -rf "$site"/pip "$site"/pip-*
torch_venv_ok "$venv" 2.11.0 && fail "a venv whose pip module is gone passed the health check"
echo PASS
