"""Train a small MLP on scikit-learn's bundled digits data, under spotwise or by hand.

One step is one epoch over the training split; the metric is the validation accuracy. The
script checkpoints every ``SPOTWISE_CHECKPOINT_EVERY`` steps and whenever it is asked to stop,
and a relaunch resumes *exactly*: an interrupted-and-resumed run reports bit-identical metrics
to an uninterrupted one (see README.md).

    python train.py                                  # by hand: defaults, ./spotwise-checkpoints
    SPOTWISE_PARAMS='{"lr": 0.1}' SPOTWISE_STEPS=20 python train.py
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from spotwise import sdk

DEFAULTS: dict[str, Any] = {
    "lr": 0.05,
    "hidden": 64,
    "weight_decay": 1e-4,
    "dropout": 0.1,
    "batch_size": 64,
    "momentum": 0.9,
    "seed": 0,
}
DEFAULT_STEPS = 40
SPLIT_SEED = 0  # the train/validation split is the same for every trial


def hyper_parameters() -> dict[str, Any]:
    """The trial's parameters over the defaults, cast to the types the model needs."""
    given = sdk.params()
    hp = {**DEFAULTS, **{k: v for k, v in given.items() if v is not None}}
    out = {
        "lr": float(hp["lr"]),
        "hidden": int(hp["hidden"]),
        "weight_decay": float(hp["weight_decay"]),
        "dropout": float(hp["dropout"]),
        "batch_size": int(hp["batch_size"]),
        "momentum": float(hp["momentum"]),
        "seed": int(hp["seed"]),
    }
    if out["lr"] <= 0 or out["hidden"] < 1 or out["batch_size"] < 1:
        raise SystemExit(f"invalid hyper-parameters: {out}")
    if not 0.0 <= out["dropout"] < 1.0:
        raise SystemExit(f"dropout must be in [0, 1), got {out['dropout']}")
    return out


def load_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The 1,797 8x8 digits scaled to [0, 1], split 80/20 (stratified, fixed seed).

    Reads scikit-learn's bundled ``digits.csv.gz`` (the file ``load_digits`` reads) without
    importing scikit-learn, which would add seconds to every trial start.
    """
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("scikit-learn is not installed: it ships the digits data")
    sklearn_dir = Path(next(iter(spec.submodule_search_locations)))
    path = sklearn_dir / "datasets" / "data" / "digits.csv.gz"
    data = np.loadtxt(path, delimiter=",")
    x = (data[:, :-1] / 16.0).astype(np.float32)
    y = data[:, -1].astype(np.int64)
    rng = np.random.default_rng(SPLIT_SEED)
    val = np.zeros(len(y), dtype=bool)
    for label in np.unique(y):  # 20% of each class to validation
        idx = rng.permutation(np.flatnonzero(y == label))
        val[idx[: round(0.2 * len(idx))]] = True
    x_tr, x_va, y_tr, y_va = x[~val], x[val], y[~val], y[val]
    return (
        torch.from_numpy(x_tr),
        torch.from_numpy(y_tr),
        torch.from_numpy(x_va),
        torch.from_numpy(y_va),
    )


def build_model(hidden: int, dropout: float) -> nn.Module:
    return nn.Sequential(
        nn.Linear(64, hidden),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(hidden, 10),
    )


class SGD:
    """SGD with Nesterov momentum and weight decay, as ``torch.optim.SGD`` computes it.

    Written out because the first ``torch.optim`` step imports ``torch._dynamo`` (seconds of
    start-up for every trial attempt); the update and the state are the same.
    """

    def __init__(self, params: list[nn.Parameter], lr: float, momentum: float, weight_decay: float):
        self.params, self.lr, self.momentum, self.weight_decay = params, lr, momentum, weight_decay
        self.buffers: list[torch.Tensor | None] = [None] * len(params)

    @torch.no_grad()
    def step(self) -> None:
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            d = p.grad.add(p, alpha=self.weight_decay) if self.weight_decay else p.grad.clone()
            if self.momentum:
                buf = self.buffers[i]
                if buf is None:
                    buf = self.buffers[i] = d.clone()
                else:
                    buf.mul_(self.momentum).add_(d)
                d = d.add(buf, alpha=self.momentum)  # Nesterov
            p.add_(d, alpha=-self.lr)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def state_dict(self) -> dict[str, Any]:
        state = {i: {"momentum_buffer": b} for i, b in enumerate(self.buffers) if b is not None}
        return {"state": state, "lr": self.lr}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.lr = float(sd["lr"])
        for i, entry in sd["state"].items():
            self.buffers[int(i)] = entry["momentum_buffer"].clone()


def lr_at(base: float, step: int, milestones: list[int]) -> float:
    """Step decay: x0.1 after each milestone (the stages EarlyCurve fits)."""
    return base * 0.1 ** sum(1 for m in milestones if step >= m)


def train_epoch(
    model: nn.Module,
    optimizer: SGD,
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int,
    order: torch.Generator,
) -> None:
    model.train()
    loss_fn = nn.CrossEntropyLoss()
    perm = torch.randperm(len(x), generator=order)  # the data order: its own generator
    for i in range(0, len(x), batch_size):
        idx = perm[i : i + batch_size]
        optimizer.zero_grad()
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    correct = int((model(x).argmax(dim=1) == y).sum())
    return correct / len(y)


def main() -> int:
    hp = hyper_parameters()  # first SDK call: installs the SIGTERM handler
    total = sdk.steps(default=DEFAULT_STEPS)
    # Bit-exact resume needs deterministic kernels. With one thread every op used here on CPU
    # (linear, relu, dropout, randperm, cross-entropy, SGD) is deterministic, so
    # torch.use_deterministic_algorithms(True) is not called: it imports torch._inductor, which
    # costs about as much as `import torch` itself. Call it if you move this model to a GPU.
    torch.set_num_threads(1)
    torch.manual_seed(hp["seed"])

    x_tr, y_tr, x_va, y_va = load_data()
    model = build_model(hp["hidden"], hp["dropout"])
    optimizer = SGD(list(model.parameters()), hp["lr"], hp["momentum"], hp["weight_decay"])
    # step decay: lr x0.1 at 50% and x0.01 at 75% of the trial (the stages EarlyCurve fits)
    milestones = sorted({max(1, total // 2), max(1, (3 * total) // 4)})
    order = torch.Generator().manual_seed(hp["seed"] + 1)

    start = 0
    state = sdk.load_checkpoint()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        order.set_state(state["order_rng"])
        start = int(state["step"])
        print(f"resumed from step {start} (attempt {sdk.attempt()})", file=sys.stderr)

    for step in range(start + 1, total + 1):
        t0 = time.perf_counter()
        optimizer.lr = lr_at(hp["lr"], step - 1, milestones)
        train_epoch(model, optimizer, x_tr, y_tr, hp["batch_size"], order)
        val_acc = accuracy(model, x_va, y_va)
        sdk.report(step, val_acc)
        print(
            f"step {step}/{total} val_accuracy={val_acc:.4f} "
            f"lr={optimizer.lr:.4g} ({time.perf_counter() - t0:.3f}s)",
            flush=True,
        )
        due = sdk.checkpoint_due(step)  # periodic, or a stop was requested
        # decided once, before saving: a stop seen now is saved at this step and obeyed; one
        # arriving later is seen (and saved) at the next step, so the newest checkpoint is
        # always the step at which the trial noticed the stop
        stop = sdk.should_stop()
        if due or stop:
            sdk.save_checkpoint(
                {
                    "step": step,
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": {"milestones": milestones, "lr": optimizer.lr},
                    "torch_rng": torch.get_rng_state(),
                    "order_rng": order.get_state(),
                    "params": hp,
                },
                step,
            )
        if stop and step < total:
            print(f"stopping after step {step}: checkpoint saved", file=sys.stderr)
            return 0
    sdk.done(total)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
