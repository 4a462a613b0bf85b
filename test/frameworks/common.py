"""What every framework script shares: the model, the data, the seed, and how
the final weights are written for run_frameworks.py to compare.

The model is a tiny MLP, the data random with a fixed seed, the optimizer
plain SGD: with 2 ranks a sum of two floats does not depend on its order, so
the weights after training on gloo and on collie must be equal bit for bit.
"""
import os

import torch

SEED = 1234
IN, HIDDEN, OUT = 16, 32, 4
SAMPLES = 64          # the whole data set
BATCH = 8             # per rank
STEPS = 8             # optimizer steps per run
LR = 0.1


def seed_everything(seed=SEED):
    import random
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy
        numpy.random.seed(seed)
    except ImportError:
        pass


def make_model():
    torch.manual_seed(SEED)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(),
                               torch.nn.Linear(HIDDEN, OUT))


def make_data():
    g = torch.Generator().manual_seed(SEED + 1)
    x = torch.randn(SAMPLES, IN, generator=g)
    y = torch.randn(SAMPLES, OUT, generator=g)
    return torch.utils.data.TensorDataset(x, y)


def rank_batches(rank, world, steps=STEPS):
    """The batches `rank` trains on when the script shards the data itself: the
    data set cycled, rank r taking every world-th sample (DistributedSampler's
    order without shuffling)."""
    data = make_data()
    idx = list(range(rank, SAMPLES, world))
    out = []
    for s in range(steps):
        take = [idx[(s * BATCH + i) % len(idx)] for i in range(BATCH)]
        out.append((data.tensors[0][take], data.tensors[1][take]))
    return out


def loss_fn(pred, y):
    return torch.nn.functional.mse_loss(pred, y)


def save_weights(state_dict, path=None, extra=None):
    """Rank 0 writes the final weights (and what the run measured) to
    $COLLIE_FW_OUT, a torch.save file."""
    path = path or os.environ.get("COLLIE_FW_OUT")
    if not path:
        return
    weights = {k.removeprefix("module."): v.detach().to("cpu", torch.float32).clone()
               for k, v in state_dict.items()}
    tmp = path + ".tmp"
    torch.save({"weights": weights, "info": extra or {}}, tmp)
    os.replace(tmp, path)


def reference(steps, world):
    """Data parallel SGD over `world` ranks in one process: each rank's
    gradient on its own batch, averaged."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    per_rank = [rank_batches(r, world, steps) for r in range(world)]
    for s in range(steps):
        grads = []
        for r in range(world):
            model.zero_grad()
            x, y = per_rank[r][s]
            loss_fn(model(x), y).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for i, p in enumerate(model.parameters()):
            p.grad = sum(g[i] / world for g in grads)
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def max_diff(a, b):
    return max((a[k] - b[k]).abs().max().item() for k in a)
