"""blip_train's checkpoint in PyTorch: train blip_train briefly on Fashion-MNIST
(2 ranks under collie-run), load its checkpoint with safetensors.torch.load_file
into the equivalent torch.nn.Sequential (load_state_dict(strict=True)),
evaluate the test set, and compare with what `blip_train --evaluate` prints.

    python3 blip_safetensors_torch.py --python VENV_PYTHON --bin-dir BUILD/bin

Runs itself again under VENV_PYTHON (torch and safetensors from PyPI). Exit 0
passed, 1 failed, 77 skipped: only when VENV_PYTHON (or torch, safetensors in
it) is missing and CI is not "true" (tools/collie.sh makes the environment and
installs safetensors there).

The counts of correct predictions must be equal. collie's forward (Eigen) and
torch's (its own GEMM) add the same float32 products in different orders, so
a logit can differ in its last bits; a prediction can flip only where the two
largest logits of an image are that close. The test counts those images
(margin under 1e-4) and allows that many differences, which in practice is 0:
the counts are equal.
"""
import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile

DATA_DIR = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # samples/blip_train/fashion_mnist.cc
HIDDEN = [256, 128]  # blip_train's default --hidden
AMBIGUOUS_MARGIN = 1e-4


def finish(code, line):
    print(line, flush=True)
    sys.exit(code)


def skip(reason):
    if os.environ.get("CI") == "true":
        finish(1, f"FAIL: {reason} (CI=true: the test command installs this prerequisite, "
                  "so it may not skip)")
    finish(77, f"SKIP: {reason}")


def without_launcher_env():
    env = dict(os.environ)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                 "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                 "TORCHELASTIC_USE_AGENT_STORE", "COLLIE_TIMEOUT"):
        env.pop(name, None)
    return env


def run(argv, what):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=without_launcher_env(), timeout=480)
    if p.returncode != 0:
        finish(1, f"FAIL: {what} exited {p.returncode}: {' '.join(argv)}\n{p.stdout}")
    return p.stdout


def read_idx(path, dims):
    with gzip.open(path, "rb") as f:
        data = f.read()
    import numpy as np
    magic = int.from_bytes(data[0:4], "big")
    assert magic == 0x0800 + dims, f"{path}: IDX magic {magic:#x}"
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def test(args):
    import numpy as np
    import torch
    from torch import nn
    from safetensors.torch import load_file

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run")
        run([os.path.join(args.bin_dir, "collie-run"), "--standalone", "--nproc-per-node", "2",
             os.path.join(args.bin_dir, "blip_train"), "--backend", "socket", "--epochs", "1",
             "--max-steps", "150", "--batch-size", "64", "--print-freq", "1000",
             "--data-dir", args.data_dir, "--output-dir", out], "blip_train (training)")
        ckpt = os.path.join(out, "checkpoint_00.pth")
        # One process, no launcher: rank 0 evaluates the whole test set.
        text = run([os.path.join(args.bin_dir, "blip_train"), "--evaluate", "--resume", ckpt,
                    "--data-dir", args.data_dir], "blip_train --evaluate")
        m = re.search(r'^(?:\[rank0\]: )?(\{"epoch".*\})$', text, re.M)
        if not m:
            finish(1, f"FAIL: no result line in blip_train --evaluate's output:\n{text}")
        collie = json.loads(m.group(1))
        collie_correct = round(collie["test_acc"] * collie["test_count"])

        # What a PyTorch user writes (docs/nn.md, "Loading a checkpoint in PyTorch").
        sizes = [28 * 28] + HIDDEN + [10]
        layers = [nn.Flatten()]
        for i in range(len(sizes) - 1):
            layers.append(nn.Linear(sizes[i], sizes[i + 1]))
            if i + 2 < len(sizes):
                layers.append(nn.ReLU())
        model = nn.Sequential(*layers)
        state = load_file(ckpt)
        model.load_state_dict({k: v for k, v in state.items() if not k.startswith("optimizer.")},
                              strict=True)
        model.eval()

        images = read_idx(os.path.join(args.data_dir, "t10k-images-idx3-ubyte.gz"), 3)
        labels = read_idx(os.path.join(args.data_dir, "t10k-labels-idx1-ubyte.gz"), 1)
        # The sample's normalisation, in float32 step by step as it does it.
        x = (images.astype(np.float32) / np.float32(255.0) - np.float32(MEAN)) / np.float32(STD)
        with torch.no_grad():
            logits = model(torch.from_numpy(x).unsqueeze(1))
        y = torch.from_numpy(labels.astype(np.int64))
        torch_correct = int((logits.argmax(dim=1) == y).sum())
        torch_loss = float(nn.functional.cross_entropy(logits.double(), y))
        top2 = logits.topk(2, dim=1).values
        ambiguous = int(((top2[:, 0] - top2[:, 1]) < AMBIGUOUS_MARGIN).sum())

    print(f"blip_train --evaluate: {collie_correct} of {collie['test_count']} correct "
          f"(test_acc {collie['test_acc']}, test_loss {collie['test_loss']}); torch "
          f"{torch.__version__}: {torch_correct} of {len(y)} correct (loss {torch_loss}); "
          f"{ambiguous} images with their top two logits within {AMBIGUOUS_MARGIN}")
    ok = (collie["test_count"] == len(y) == 10000
          and abs(torch_correct - collie_correct) <= ambiguous
          and abs(torch_loss - collie["test_loss"]) <= 1e-5 * abs(collie["test_loss"]))
    if collie_correct < 6000:
        finish(1, "FAIL: the model did not learn (chance is 1000 of 10000)")
    finish(0 if ok else 1, "PASS" if ok else "FAIL: torch's evaluation differs from collie's")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--python", default="", help="the torch virtual environment's python")
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--data-dir", default=DATA_DIR)
    args = parser.parse_args()
    if os.environ.get("COLLIE_BLIP_TORCH_CHILD") != "1":
        if not args.python or not os.path.exists(args.python):
            skip(f"no torch virtual environment ({args.python or 'none configured'}): "
                 "tools/collie.sh makes it and configures -DCOLLIE_TORCH_VENVS")
        os.environ["COLLIE_BLIP_TORCH_CHILD"] = "1"
        os.execv(args.python, [args.python, os.path.abspath(__file__)] + sys.argv[1:])
    try:
        import numpy  # noqa: F401
        import safetensors  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        skip(f"{sys.executable} lacks a test prerequisite ({e}); tools/collie.sh installs it "
             "(pip install safetensors)")
    test(args)


if __name__ == "__main__":
    main()
