"""How the framework tests end, for ctest (torch-free: the scripts use it
before they re-run themselves in the frameworks environment): 0 passed, 1
failed, 77 skipped, and under CI=true a skip is a failure (only a missing
GPU may skip there)."""
import os
import sys


def finish(code, line):
    print(line, flush=True)
    if code:
        print(line, file=sys.stderr, flush=True)
    sys.exit(code)


def skip(reason):
    if os.environ.get("CI") == "true":
        finish(1, f"FAIL: {reason} (CI=true: only a missing GPU may skip)")
    finish(77, f"SKIP: {reason}")
