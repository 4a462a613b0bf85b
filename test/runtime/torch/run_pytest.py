"""ctest's entry point for the collie_torch tests:

    <venv>/bin/python run_pytest.py TEST_ID...      (TEST_ID: test_torch.py::name[...])
    python3 run_pytest.py --no-environment TEST_ID  (no environment was set up)

Runs pytest on the given test ids in the virtual environment whose Python
runs it (torch 2.x and collie_torch pip-installed there by tools/collie.sh)
and maps the outcome onto ctest's codes: 0 passed, 1 failed, 77 skipped
(every selected test skipped, or no environment), with the reason on one
line. Under CI=true a skip is a failure, except a test that needs a GPU
(its reason starts with "no GPU"): the test command installs everything
else.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def finish(code, line):
    print(line, flush=True)
    print(line, file=sys.stderr, flush=True)
    sys.exit(code)


def skip(reason):
    if os.environ.get("CI") == "true" and not reason.startswith("no GPU"):
        finish(1, f"FAIL: {reason} (CI=true: the test command installs this prerequisite, "
                  "so it may not skip)")
    finish(77, f"SKIP: {reason}")


def main(args):
    if args and args[0] == "--no-environment":
        skip("no torch 2.x virtual environment: tools/collie.sh makes them and configures "
             "-DCOLLIE_TORCH_VENVS")
    # Found, not imported: importing torch here would cost every test a few
    # CPU-seconds (the ranks import it themselves), and a torch or
    # collie_torch that is present but broken fails in the ranks, naming why.
    import importlib.metadata
    import importlib.util
    for module in ("pytest", "torch"):
        if importlib.util.find_spec(module) is None:
            skip(f"{sys.executable} lacks a test prerequisite (no module named {module!r}); "
                 "tools/collie.sh installs it")
    if importlib.util.find_spec("collie_torch") is None:
        skip(f"collie_torch is not installed for {sys.executable} "
             f"(torch {importlib.metadata.version('torch')}); pip install . at the repository root")
    import pytest

    class Outcomes:
        def __init__(self):
            self.passed, self.failed, self.skipped = 0, 0, []

        def pytest_runtest_logreport(self, report):
            if report.skipped:
                self.skipped.append(str(report.longrepr[-1]) if report.longrepr else "")
            elif report.failed:
                self.failed += 1
            elif report.when == "call":
                self.passed += 1

    outcomes = Outcomes()
    code = pytest.main(["-q", "-s", "-rs", "-p", "no:cacheprovider", "--rootdir", HERE]
                       + [os.path.join(HERE, t) for t in args], plugins=[outcomes])
    if code == 0 and outcomes.skipped and (not outcomes.passed or os.environ.get("CI") == "true"):
        reasons = sorted({r.removeprefix("Skipped: ") for r in outcomes.skipped})
        skip("; ".join(reasons))
    sys.exit(0 if code == 0 else 1)


if __name__ == "__main__":
    main(sys.argv[1:])
