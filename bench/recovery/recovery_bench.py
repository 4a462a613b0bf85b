#!/usr/bin/env python3
"""How long a 4-rank training job takes to recover from a SIGKILLed rank,
collie against torchrun's restart, side by side in one run.

Each rep runs, in turn:
  collie shrink   4 collie-recovery-worker ranks over a file:// store; one
                  is SIGKILLed mid-training; the survivors shrink and go
                  on. Figure: the kill to the last survivor's first
                  completed step after it.
  collie replace  the same, and at once a replacement process is started
                  (what collie-run --on-failure=replace does); it joins at
                  the next step boundary and gets the weights by broadcast.
                  Figures: the survivors' next step, and the replacement's
                  first step, process start included.
  torchrun        torch 2.x DDP over gloo, the same MLP, under torchrun,
                  rank 0 checkpointing after every step (no step lost:
                  restart's best case). One worker is SIGKILLed, and the
                  whole job is relaunched at once, reloading the
                  checkpoint (torchrun's own --max-restarts does not
                  recover here: under torch 2.11 its restarted gloo
                  workers connect to the dead attempt's addresses, left in
                  the agent store, and fail). Figure: the kill to the last
                  worker's first completed step after the relaunch.

It prints the median (min-max) of every figure over the reps and the ratio
torchrun / collie, and writes every sample as JSON (--out).

    bench/recovery/recovery_bench.py --build build --python ~/.cache/collie/venv-torch-2.11.0/bin/python --reps 5
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "compare"))
from bench_stats import spread  # noqa: E402

HERE = Path(__file__).resolve().parent
WORLD = 4
VICTIM = 1


class Proc:
    """A process whose stdout goes to a file that the driver reads."""

    def __init__(self, argv, workdir: Path, name: str, env=None):
        self.path = workdir / f"{name}.out"
        self.file = open(self.path, "w")
        self.p = subprocess.Popen(argv, stdout=self.file, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True)

    def text(self) -> str:
        return self.path.read_text()

    def stop(self):
        # torchrun's workers are not in its process group: each announced
        # its pid ("ready ... pid=P"), so each is killed by it too.
        for m in re.finditer(r"ready rank=\d+ pid=(\d+)", self.text()):
            try:
                os.kill(int(m.group(1)), signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
        self.p.wait()
        self.file.close()


def wait_for(procs, pattern: str, count: int, timeout: float):
    """Polls the outputs until `pattern` matched `count` times in all; returns the matches."""
    rx = re.compile(pattern)
    until = time.monotonic() + timeout
    while True:
        found = [m for p in procs for m in rx.finditer(p.text())]
        if len(found) >= count:
            return found
        for p in procs:
            if p.p.poll() not in (None, 0):
                raise RuntimeError(f"{p.path.name} exited {p.p.returncode}:\n{p.text()[-3000:]}")
        if time.monotonic() > until:
            raise RuntimeError(f"timed out waiting for {pattern!r} x{count}:\n" +
                               "\n".join(f"--- {p.path.name}\n{p.text()[-2000:]}" for p in procs))
        time.sleep(0.005)  # the driver's poll of files; nothing here is synchronised by it


def run_collie(build: Path, replace: bool, workdir: Path) -> dict:
    worker = str(build / "bin" / "collie-recovery-worker")
    init = f"file://{workdir}/rdzv"
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    procs = [Proc([worker, "--init", init, "--rank", str(r), "--world", str(WORLD),
                   "--steps", "1000000"], workdir, f"rank{r}", env) for r in range(WORLD)]
    try:
        wait_for(procs, r"ready rank=\d+", WORLD, 120)
        # Let training run for a while, so that the kill lands mid-step.
        time.sleep(0.3)
        kill_ns = time.monotonic_ns()
        os.kill(procs[VICTIM].p.pid, signal.SIGKILL)
        result = {}
        survivors = [p for i, p in enumerate(procs) if i != VICTIM]
        if replace:
            joiner = Proc([worker, "--init", init, "--rank", str(VICTIM), "--world", str(WORLD),
                           "--steps", "1000000", "--join"], workdir, "joiner", env)
            procs.append(joiner)
            m = wait_for([joiner], r"first_step_ns=(\d+)", 1, 120)
            result["replacement_first_step_ms"] = (int(m[0].group(1)) - kill_ns) / 1e6
        found = wait_for(survivors, r"recovered_ns=(\d+)", WORLD - 1, 120)
        result["survivors_next_step_ms"] = max(int(m.group(1)) - kill_ns for m in found) / 1e6
        return result
    finally:
        for p in procs:
            p.stop()


def run_torchrun(python: str, workdir: Path) -> dict:
    checkpoint = workdir / "ckpt.pt"
    argv = [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(WORLD),
            str(HERE / "torch_restart_worker.py"), str(checkpoint), "1000000"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("COLLIE_")}
    env["OMP_NUM_THREADS"] = "1"
    job = Proc(argv, workdir, "torchrun", env)
    relaunched = None
    try:
        ready = wait_for([job], r"ready rank=(\d+) pid=(\d+) resumed=0", WORLD, 180)
        wait_for([job], r"step=40\n", 1, 180)
        pid = next(int(m.group(2)) for m in ready if int(m.group(1)) == VICTIM)
        kill_ns = time.monotonic_ns()
        os.kill(pid, signal.SIGKILL)
        # The job is relaunched at once, as a scheduler that noticed at once
        # would (torch 2.11's in-place --max-restarts fails here: docs).
        job.stop()
        relaunched = Proc(argv, workdir, "relaunched", env)
        found = wait_for([relaunched], r"first_step_ns=(\d+)", WORLD, 300)
        return {"restart_next_step_ms": max(int(m.group(1)) - kill_ns for m in found) / 1e6}
    finally:
        job.stop()
        if relaunched:
            relaunched.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", type=Path)
    ap.add_argument("--python", default=str(Path.home() / ".cache/collie/venv-torch-2.11.0/bin/python"),
                    help="a Python with torch 2.x, for the torchrun side")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, help="write every sample here (JSON)")
    args = ap.parse_args()
    if args.reps < 1:
        ap.error(f"--reps {args.reps}: at least 1")
    if not (args.build / "bin" / "collie-recovery-worker").exists():
        ap.error(f"{args.build}/bin/collie-recovery-worker is not built "
                 "(ninja -C build collie-recovery-worker)")
    samples = {"collie shrink": [], "collie replace": [], "torchrun": []}
    for rep in range(args.reps):
        for name in samples:
            with tempfile.TemporaryDirectory(prefix="collie-recovery-", ignore_cleanup_errors=True) as d:
                if name == "torchrun":
                    r = run_torchrun(args.python, Path(d))
                else:
                    r = run_collie(args.build, name == "collie replace", Path(d))
            samples[name].append(r)
            print(f"rep {rep + 1}/{args.reps} {name}: " +
                  ", ".join(f"{k} {v:.1f} ms" for k, v in r.items()), flush=True)

    def fig(name, key):
        return spread([s[key] for s in samples[name]])

    rows = [("collie shrink: survivors' next step", fig("collie shrink", "survivors_next_step_ms")),
            ("collie replace: survivors' next step", fig("collie replace", "survivors_next_step_ms")),
            ("collie replace: replacement's first step", fig("collie replace", "replacement_first_step_ms")),
            ("torchrun relaunch + checkpoint reload: next step", fig("torchrun", "restart_next_step_ms"))]
    print(f"\nSIGKILL of 1 of {WORLD} ranks, medians of {args.reps} (min-max), ms after the kill:")
    for label, (med, lo, hi) in rows:
        print(f"  {label:<50} {med:9.1f} ({lo:.1f}-{hi:.1f})")
    torchrun = rows[3][1][0]
    print(f"  torchrun / collie shrink: {torchrun / rows[0][1][0]:.0f}x; "
          f"torchrun / collie replacement's first step: {torchrun / rows[2][1][0]:.1f}x")
    if args.out:
        args.out.write_text(json.dumps({"world": WORLD, "reps": args.reps, "samples": samples},
                                       indent=1) + "\n")


if __name__ == "__main__":
    main()
