"""ctest's entry point for the collie_torch tests: /usr/bin/python3 run_pytest.py TEST_ID...

Runs pytest on the given test ids (test_torch.py::...) and maps the outcome
onto ctest's codes: 0 passed, 1 failed, 77 skipped (every selected test
skipped, or the module cannot be imported at all), with the reason on one
line. Under CI=true a skip is a failure: the test command installs torch,
libtorch-dev, pybind11-dev and python3-pytest, so nothing may be missing.

CMakeLists.txt next to this file sets COLLIE_TORCH_MISSING (why the build
has no collie_torch module; empty when it has one), PYTHONPATH and
COLLIE_BIN_DIR.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def finish(code, line):
    print(line, flush=True)
    print(line, file=sys.stderr, flush=True)
    sys.exit(code)


def skip(reason):
    if os.environ.get("CI") == "true":
        finish(1, f"FAIL: {reason} (CI=true: the test command installs this prerequisite, "
                  "so it may not skip)")
    finish(77, f"SKIP: {reason}")


def main(test_ids):
    missing = os.environ.get("COLLIE_TORCH_MISSING", "")
    if missing:
        skip(f"the collie_torch module is not built: {missing}")
    try:
        import pytest
    except ImportError:
        skip(f"{sys.executable} has no pytest (Debian: python3-pytest)")

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
                       + [os.path.join(HERE, t) for t in test_ids], plugins=[outcomes])
    if code == 0 and outcomes.skipped and (not outcomes.passed or os.environ.get("CI") == "true"):
        skip("; ".join(sorted(set(outcomes.skipped))))
    sys.exit(0 if code == 0 else 1)


if __name__ == "__main__":
    main(sys.argv[1:])
