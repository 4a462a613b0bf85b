"""Trains the same tiny MLP under a framework twice, on gloo and on collie, on
N CPU ranks, and checks that collie was picked by the framework's setting and
gives the same weights:

    python3 run_frameworks.py [--venv DIR] [--steps S] [--nproc N] CASE

CASE: lightning, lightning-fsdp2, accelerate, accelerate-kwargs,
deepspeed-zero0 to deepspeed-zero3, ray (see CASES); N: 2 by default. DIR is
the environment with the frameworks (make_venv.sh makes it; default
~/.cache/collie/venv-frameworks-2.11.0); this script re-runs itself with its
Python. Checks, for each backend: the default group's CPU backend is the one
asked for, the weights moved, and they match a single-process reference of
N-rank data parallel SGD within REFERENCE_TOL (so the data was sharded and
the gradients averaged); then collie's weights against gloo's: at 2 ranks
equal bit for bit (a sum of two floats does not depend on its order); at
more, equal bit for bit or, where the two backends sum in different orders,
within GLOO_TOL (the output says which).

Exit codes for ctest: 0 passed, 1 failed, 77 skipped (no environment, or a
framework missing from it; under CI=true a failure).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

from outcome import finish, skip

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_VENV = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                            "collie", "venv-frameworks-2.11.0")
# torchrun; run_one puts the number of ranks after it.
TORCHRUN = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node"]
# The largest |collie - gloo| accepted at more than 2 ranks, where each
# backend may add the N gradients in its own order: float32's rounding
# (6e-8 relative) on weights below 1 in magnitude, over the 8 steps a test
# runs, differs by about 1.5e-8 (seen at 4 ranks), two orders below this.
GLOO_TOL = 1e-6
# The largest |weights - one-process reference| accepted: the frameworks
# average the gradients in another order than the reference (and Accelerate
# deals out whole batches rather than every N-th sample: the same samples per
# step, summed in another order).
REFERENCE_TOL = 1e-5

# name: (module the case needs, the command after the Python, seconds per run,
#        a refusal of collie that is known and accepted, or None)
CASES = {
    # Trainer(accelerator="cpu", devices=N, strategy=DDPStrategy(process_group_backend=B));
    # Lightning starts the other ranks itself.
    "lightning": ("lightning", ["lightning_train.py"], 270, None),
    # ModelParallelStrategy(data_parallel_size=N, process_group_backend=B), FSDP2's
    # fully_shard in configure_model: Lightning's FSDP on CPU (its FSDPStrategy
    # accepts only CUDA: lightning/pytorch/trainer/connectors/accelerator_connector.py).
    "lightning-fsdp2": ("lightning", ["lightning_train.py", "--strategy", "fsdp2"], 270, None),
    # init_process_group(B) before Accelerator(cpu=True): accelerate takes the
    # group as it finds it.
    "accelerate": ("accelerate", TORCHRUN + ["accelerate_train.py", "--cpu", "--preinit"], 270,
                   None),
    # Accelerator(cpu=True, kwargs_handlers=[InitProcessGroupKwargs(backend=B)]):
    # accelerate 1.16 refuses every backend but gloo and mpi on CPU
    # (accelerate/state.py, PartialState._prepare_backend).
    "accelerate-kwargs": ("accelerate", TORCHRUN + ["accelerate_train.py", "--cpu"], 270,
                          "Your assigned backend collie is not available, please use gloo"),
    # deepspeed.init_distributed(dist_backend=B), ZeRO stage N, DS_ACCELERATOR=cpu.
    "deepspeed-zero0": ("deepspeed", TORCHRUN + ["deepspeed_train.py", "--zero", "0"], 270, None),
    "deepspeed-zero1": ("deepspeed", TORCHRUN + ["deepspeed_train.py", "--zero", "1"], 270, None),
    "deepspeed-zero2": ("deepspeed", TORCHRUN + ["deepspeed_train.py", "--zero", "2"], 270, None),
    "deepspeed-zero3": ("deepspeed", TORCHRUN + ["deepspeed_train.py", "--zero", "3"], 270, None),
    # TorchTrainer(torch_config=TorchConfig(backend=B)) on a local Ray cluster.
    "ray": ("ray.train", ["ray_train.py"], 280, None),
}


def child_env(out):
    env = {k: v for k, v in os.environ.items()
           if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                        "LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID")}
    env.update(COLLIE_FW_OUT=out, OMP_NUM_THREADS="1", DS_ACCELERATOR="cpu",
               PYTHONDONTWRITEBYTECODE="1", RAY_USAGE_STATS_ENABLED="0")
    return env


def command(case, backend, steps, nproc):
    """The command line of one run of `case`."""
    cmd = CASES[case][1]
    script = next(i for i, a in enumerate(cmd) if a.endswith(".py"))
    if cmd[:script] == TORCHRUN:
        launch, own = TORCHRUN + [str(nproc)], []
    else:  # the framework starts the ranks itself, told how many by the script
        launch, own = cmd[:script], ["--nproc", str(nproc)]
    return ([sys.executable] + launch + [os.path.join(HERE, cmd[script])] + cmd[script + 1:]
            + ["--backend", backend, "--steps", str(steps)] + own)


def run_one(case, backend, steps, tmp, nproc=2):
    timeout = CASES[case][2]
    out = os.path.join(tmp, f"{case}-{backend}-{nproc}.pt")
    argv = command(case, backend, steps, nproc)
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, cwd=tmp, env=child_env(out), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=timeout)
        log, rc = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        log = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        log, rc = log + f"\n[timed out after {timeout} s]", None
    wall = time.monotonic() - t0
    return argv, rc, log, out, wall


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--venv", default=DEFAULT_VENV)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--nproc", type=int, default=2, help="ranks (world size)")
    p.add_argument("case", choices=sorted(CASES))
    args = p.parse_args(argv)

    python = os.path.join(args.venv, "bin", "python")
    if os.path.realpath(os.path.dirname(sys.executable)) != os.path.realpath(
            os.path.join(args.venv, "bin")):
        if not os.path.exists(python):
            skip(f"no frameworks environment at {args.venv}: test/frameworks/make_venv.sh "
                 "makes it")
        os.execv(python, [python, os.path.abspath(__file__)] + argv)

    module, _, _, known_refusal = CASES[args.case]
    # The framework is found, not imported (seconds of CPU the ranks spend
    # again); one that is present but broken fails in the ranks, naming why.
    import importlib.util
    try:
        import torch
        if importlib.util.find_spec(module) is None:
            raise ImportError(f"no module named {module!r}")
    except ImportError as e:
        skip(f"{sys.executable} lacks {module} ({e}): test/frameworks/make_venv.sh installs it")
    if "collie" not in torch.distributed.Backend.backend_list:
        skip(f"collie is not registered in {sys.executable} (torch {torch.__version__}, "
             f"{torch.__file__}): is collie_torch installed in the torch environment?")
    sys.path.insert(0, HERE)
    import common

    failures = []
    results = {}
    with tempfile.TemporaryDirectory(prefix="collie-fw-") as tmp:
        for backend in ("gloo", "collie"):
            cmd, rc, log, out, wall = run_one(args.case, backend, args.steps, tmp, args.nproc)
            if rc != 0:
                if backend == "collie" and known_refusal and known_refusal in log:
                    print(f"{args.case}: collie refused, as known for this framework version: "
                          f"{known_refusal!r}", flush=True)
                    results[backend] = None
                    continue
                print(log[-6000:])
                failures.append(f"{backend}: {' '.join(cmd)} exited with {rc}")
                continue
            if not os.path.exists(out):
                print(log[-6000:])
                failures.append(f"{backend}: rank 0 wrote no weights to {out}")
                continue
            saved = torch.load(out)
            info = saved["info"]
            results[backend] = saved["weights"]
            rate = info["steps"] / info["seconds"] if info.get("seconds") else float("nan")
            print(f"{args.case}: {backend}: {args.nproc} ranks, {info['steps']} steps, "
                  f"{rate:.1f} steps/s in the loop, {wall:.1f} s wall; {info}", flush=True)
            if info.get("pg_backend") != backend:
                failures.append(f"{backend}: the default group's CPU backend is "
                                f"{info.get('pg_backend')!r}, not {backend!r}")
            if info["steps"] != args.steps:
                failures.append(f"{backend}: ran {info['steps']} steps, not {args.steps}")
        init = common.make_model().state_dict()
        ref = common.reference(args.steps, args.nproc)
        for backend, w in results.items():
            if w is None:
                continue
            if common.max_diff(w, init) == 0:
                failures.append(f"{backend}: the weights did not move")
            d = common.max_diff(w, ref)
            print(f"{args.case}: {backend}: max |w - reference| = {d:.3g}", flush=True)
            if d > REFERENCE_TOL:
                failures.append(f"{backend}: weights differ from {args.nproc}-rank data "
                                f"parallel SGD by {d:.3g} (data not sharded, or gradients not "
                                "averaged?)")
        if results.get("gloo") is not None and results.get("collie") is not None:
            g, c = results["gloo"], results["collie"]
            equal = all(torch.equal(g[k], c[k]) for k in g)
            d = common.max_diff(g, c)
            if equal:
                verdict = "equal bit for bit"
            elif args.nproc > 2 and d <= GLOO_TOL:
                verdict = (f"not bit for bit: max diff {d:.3g}, within the tolerance {GLOO_TOL:g} "
                           f"for {args.nproc} ranks (the backends sum in different orders)")
            else:
                verdict = f"max diff {d:.3g}"
                failures.append(f"collie's weights differ from gloo's by {d:.3g} at "
                                f"{args.nproc} ranks " + ("(2 ranks: must be equal bit for bit)"
                                                         if args.nproc <= 2 else
                                                         f"(above the tolerance {GLOO_TOL:g})"))
            print(f"{args.case}: {args.nproc} ranks: collie vs gloo: {verdict}", flush=True)
            if known_refusal:
                print(f"{args.case}: collie is no longer refused: the known refusal "
                      f"{known_refusal!r} is gone (update docs/torch.md)", flush=True)
    if failures:
        finish(1, f"FAIL: {args.case}: " + "; ".join(failures))
    print(f"PASS: {args.case}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
