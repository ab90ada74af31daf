"""The LSTM revocation model (PyTorch, CPU-sized).

Input per sample (zone z, tick t):

* a sequence of the last ``seq_len`` ticks of per-tick features (availability, revocation and
  restore events, the other zones' and same-region zones' availability, other zones' revocations,
  price change and price relative to its weekly mean) — see ``SEQ_FEATURES``;
* summary features at t (run length, time since the last revocation, availability shares and
  revocation counts over 1 h … 7 d, hazard estimates, market shares, price level and changes,
  time of day / week) — see ``STAT_FEATURES``.

Network: ``LSTM(seq) → h``; ``MLP([h, stat]) → logit``. Training: BCE with Adam on ticks of the
earlier part of the given trace (every ``stride``-th tick), early stopping on a validation slice
at its end (the last ``val_fraction``, purged of labels that cross into it), then Platt scaling
fitted on that same validation slice. With ``refit`` (the default) the chosen number of epochs is
then run again on *all* the given ticks by ``members`` nets of other seeds whose logits are
averaged (a seed ensemble). Nothing from after the given trace is ever seen.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, cast

from spotwise.predictors.revocation import _TraceModel

if TYPE_CHECKING:
    import numpy as np
    import torch

    from spotwise.traces import TraceSet


def _net(f_seq: int, f_stat: int, hidden: int, head: int, members: int = 1) -> torch.nn.Module:
    """``members`` independent LSTM nets whose logits are averaged (a seed ensemble)."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(f_seq, hidden, batch_first=True)
            self.head = nn.Sequential(
                nn.Linear(hidden + f_stat, head), nn.ReLU(), nn.Linear(head, 1)
            )

        def forward(self, seq: torch.Tensor, stat: torch.Tensor) -> torch.Tensor:
            _, (h, _) = self.lstm(seq)
            return self.head(torch.cat([h[-1], stat], dim=1)).squeeze(1)

    class Ensemble(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.members = nn.ModuleList([Net() for _ in range(members)])

        def forward(self, seq: torch.Tensor, stat: torch.Tensor) -> torch.Tensor:
            return torch.stack([m(seq, stat) for m in self.members]).mean(0)

    return Ensemble()


class LSTMModel(_TraceModel):
    """LSTM over recent history + summary features; Platt-calibrated probabilities."""

    name = "lstm"

    def __init__(
        self,
        seq_len: int = 32,
        hidden: int = 32,
        head: int = 32,
        stride: int = 2,
        epochs: int = 12,
        batch_size: int = 256,
        lr: float = 3e-3,
        weight_decay: float = 1e-4,
        val_fraction: float = 0.2,
        max_seconds: float = 300.0,
        seed: int = 0,
        patience: int = 2,
        refit: bool = True,
        members: int = 3,
        verbose: bool = False,
    ) -> None:
        super().__init__()
        if not 0 < val_fraction < 1:
            raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction=}")
        self.seq_len, self.hidden, self.head = seq_len, hidden, head
        self.stride, self.epochs, self.batch_size = stride, epochs, batch_size
        self.lr, self.weight_decay, self.val_fraction = lr, weight_decay, val_fraction
        self.max_seconds, self.seed, self.verbose = max_seconds, seed, verbose
        self.patience, self.refit, self.members = patience, refit, members
        self.norm: dict[str, list[float]] = {}
        self.platt = (1.0, 0.0)
        self.history: list[dict[str, float]] = []
        self.net: torch.nn.Module | None = None

    # ---- data --------------------------------------------------------------------------
    def _tensors(self, seq: np.ndarray, stat: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        import numpy as np
        import torch

        n = self.norm
        seq = (seq - np.array(n["seq_mean"], np.float32)) / np.array(n["seq_std"], np.float32)
        stat = (stat - np.array(n["stat_mean"], np.float32)) / np.array(n["stat_std"], np.float32)
        return torch.from_numpy(np.ascontiguousarray(seq)), torch.from_numpy(
            np.ascontiguousarray(stat)
        )

    def _logits(self, seq: torch.Tensor, stat: torch.Tensor, batch: int = 8192) -> np.ndarray:
        import numpy as np
        import torch

        assert self.net is not None
        self.net.eval()
        out = []
        with torch.inference_mode():
            for i in range(0, len(seq), batch):
                out.append(self.net(seq[i : i + batch], stat[i : i + batch]).numpy())
        return np.concatenate(out) if out else np.zeros(0, np.float32)

    # ---- fit ---------------------------------------------------------------------------
    def _fit(self, traces: TraceSet, horizon_s: float) -> None:
        import numpy as np
        import torch

        from spotwise.predictors._revfeatures import features_for, samples

        t_start = time.monotonic()
        n = traces.n_ticks
        val0 = round(n * (1 - self.val_fraction))
        purge = int(np.searchsorted(traces.times, traces.times[val0] - horizon_s, side="left"))
        f = features_for(traces, 0, n, self.seq_len)
        zt, tt, yt = samples(traces, horizon_s, (0, purge), self.stride)
        zv, tv, yv = samples(traces, horizon_s, (val0, n), 1)
        if len(yt) == 0 or len(yv) == 0:
            raise ValueError("too few labelled ticks for a train/validation split")
        seq_t, stat_t = f.windows(zt, tt), f.stat[zt, tt]
        self.norm = {
            "seq_mean": seq_t.reshape(-1, seq_t.shape[-1]).mean(0).tolist(),
            "seq_std": (seq_t.reshape(-1, seq_t.shape[-1]).std(0) + 1e-3).tolist(),
            "stat_mean": stat_t.mean(0).tolist(),
            "stat_std": (stat_t.std(0) + 1e-3).tolist(),
        }
        train = (*self._tensors(seq_t, stat_t), torch.from_numpy(yt.astype(np.float32)))
        val = (*self._tensors(f.windows(zv, tv), f.stat[zv, tv]), yv)
        # phase 1: one net, early stopping on the validation slice -> the number of epochs
        net1, best_epoch = self._train(train, val, self.epochs, self.seed, t_start)
        self.net = net1
        platt1 = _platt(self._logits(val[0], val[1]), yv)
        if self.refit:
            # phase 2: ``members`` nets (other seeds) trained for that many epochs on *all* the
            # given ticks -- the validation slice is the most recent history and the model should
            # learn from it -- their logits averaged.
            za, ta, ya = samples(traces, horizon_s, (0, n), self.stride)
            alld = (
                *self._tensors(f.windows(za, ta), f.stat[za, ta]),
                torch.from_numpy(ya.astype(np.float32)),
            )
            members = [
                self._train(alld, None, best_epoch, self.seed + 1 + k, t_start)[0]
                for k in range(self.members)
            ]
            self.net = _net(
                alld[0].shape[-1], alld[1].shape[-1], self.hidden, self.head, self.members
            )
            slots: Any = self.net.members
            for k, member in enumerate(members):
                slots[k].load_state_dict(cast(Any, member).members[0].state_dict())
        # Platt scaling fitted on the held-out validation slice calibrates the phase-1 net. The
        # refitted ensemble has seen that slice, so a fit there would be in-sample; on the
        # validation protocol (tuning inside the training period) leaving it uncalibrated gave
        # the better Brier score and calibration error, so it keeps the identity.
        self.platt = (1.0, 0.0) if self.refit else platt1
        self.train_seconds = time.monotonic() - t_start

    def _train(
        self,
        train: tuple[Any, Any, Any],
        val: tuple[Any, Any, Any] | None,
        epochs: int,
        seed: int,
        t_start: float,
    ) -> tuple[torch.nn.Module, int]:
        """Train a fresh net; with ``val``, keep its best epoch (early stopping)."""
        import numpy as np
        import torch

        torch.manual_seed(seed)
        rng = np.random.default_rng(seed)
        xs, xt, ys = train
        self.net = net = _net(xs.shape[-1], xt.shape[-1], self.hidden, self.head)
        opt = torch.optim.Adam(net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        # cosine over the *planned* epochs, stepped per epoch: phase 2 replays phase 1's
        # learning rates exactly (annealing per step within a short phase 2 was tried and did
        # no better on the validation protocol)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(self.epochs, 1))
        loss_fn = torch.nn.BCEWithLogitsLoss()
        best, best_epoch, best_state, stale = float("inf"), epochs, None, 0
        for epoch in range(1, epochs + 1):
            self.net.train()
            order = torch.from_numpy(rng.permutation(len(ys)))
            total = 0.0
            for i in range(0, len(order), self.batch_size):
                idx = order[i : i + self.batch_size]
                opt.zero_grad()
                loss = loss_fn(self.net(xs[idx], xt[idx]), ys[idx])
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.net.parameters(), 1.0)
                opt.step()
                total += float(loss.detach()) * len(idx)
            sched.step()
            rec = {
                "phase": 1 if val is not None else 2,
                "epoch": epoch,
                "train_bce": total / len(ys),
                "seconds": round(time.monotonic() - t_start, 1),
            }
            if val is not None:
                rec["val_bce"] = _bce(self._logits(val[0], val[1]), val[2])
                if rec["val_bce"] < best - 1e-4:
                    best, best_epoch, stale = rec["val_bce"], epoch, 0
                    best_state = {k: v.detach().clone() for k, v in self.net.state_dict().items()}
                else:
                    stale += 1
            self.history.append(rec)
            if self.verbose:  # progress for a person: stderr, so stdout keeps the result
                print(progress_line(rec, epochs), file=sys.stderr, flush=True)
            if stale >= self.patience or time.monotonic() - t_start > self.max_seconds:
                break
        if best_state is not None:
            net.load_state_dict(best_state)
        return net, best_epoch

    # ---- predict -----------------------------------------------------------------------
    def _score(
        self, traces: TraceSet, lo: int, hi: int, zi: np.ndarray, ti: np.ndarray
    ) -> np.ndarray:
        import numpy as np

        from spotwise.predictors._revfeatures import features_for

        f = features_for(traces, lo, hi, self.seq_len)
        logit = self._logits(*self._tensors(f.windows(zi, ti), f.stat[zi, ti])).astype(np.float64)
        a, b = self.platt
        return 1.0 / (1.0 + np.exp(-np.clip(a * logit + b, -30, 30)))

    # ---- persistence -------------------------------------------------------------------
    def _state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        assert self.net is not None
        config = {
            "seq_len": self.seq_len,
            "hidden": self.hidden,
            "head": self.head,
            "members": len(self.net.members),  # type: ignore[arg-type]
            "f_seq": len(self.norm["seq_mean"]),
            "f_stat": len(self.norm["stat_mean"]),
            "norm": self.norm,
            "platt": list(self.platt),
            "history": self.history,
        }
        return config, {k: v.detach().clone() for k, v in self.net.state_dict().items()}

    def _load_state(self, config: dict[str, Any], tensors: dict[str, Any]) -> None:
        from spotwise.predictors._modelfile import count, finite
        from spotwise.predictors._revfeatures import SEQ_FEATURES, STAT_FEATURES

        if config["f_seq"] != len(SEQ_FEATURES) or config["f_stat"] != len(STAT_FEATURES):
            raise ValueError("the saved LSTM was built for other features; retrain it")
        self.seq_len, self.hidden, self.head = (count(config[k], k, _MOST[k]) for k in _WIDTHS)
        members = count(config["members"], "members", _MOST["members"])
        _check_shapes(tensors, members, self.hidden, self.head)  # before a net is allocated
        self.norm = _norm(config["norm"])
        platt = finite(config["platt"], "platt")
        if len(platt) != 2:
            raise ValueError(f"platt has {len(platt)} numbers, not 2 (a, b); retrain it")
        a, b = platt
        if a <= 0:  # training never fits a <= 0 (it keeps (1, 0)): it would invert the model
            raise ValueError(f"platt[0] is {a:g}, not > 0; retrain it")
        self.platt = (a, b)
        self.history = list(config.get("history", []))
        self.net = _net(config["f_seq"], config["f_stat"], self.hidden, self.head, members)
        self.net.load_state_dict(tensors)
        _check_weights(tensors)


_WIDTHS = ("seq_len", "hidden", "head")
# the most a model file may say: 16x what ``spotwise predictor train`` writes (32, 32, 32) and
# twice the 8 members tried on validation (docs/predictors.md); an absurd width in a damaged or
# hand-edited file would otherwise size a net (or a history window) too big to allocate
_MOST = {"seq_len": 512, "hidden": 512, "head": 512, "members": 16}


def _check_shapes(tensors: object, members: int, hidden: int, head: int) -> None:
    """The saved weights are those of ``members`` nets of these widths: a config that says
    otherwise is refused before :func:`_net` allocates what it says."""
    from spotwise.predictors._revfeatures import SEQ_FEATURES, STAT_FEATURES

    f_seq, f_stat, g = len(SEQ_FEATURES), len(STAT_FEATURES), 4 * hidden  # LSTM: 4 gates
    one = {
        "lstm.weight_ih_l0": (g, f_seq),
        "lstm.weight_hh_l0": (g, hidden),
        "lstm.bias_ih_l0": (g,),
        "lstm.bias_hh_l0": (g,),
        "head.0.weight": (head, hidden + f_stat),
        "head.0.bias": (head,),
        "head.2.weight": (1, head),
        "head.2.bias": (1,),
    }
    want = {f"members.{k}.{n}": shape for k in range(members) for n, shape in one.items()}
    if not isinstance(tensors, dict):
        raise TypeError("tensors is not a mapping")
    got = {str(n): tuple(t.shape) for n, t in tensors.items()}
    if set(got) != set(want):
        extra = sorted(set(got) ^ set(want))[0]
        raise ValueError(
            f"its weights are not those of {members} member(s) (first odd one: {extra}); retrain it"
        )
    for n, shape in want.items():
        if got[n] != shape:
            raise ValueError(
                f"weight {n} is shaped {got[n]}, not {shape} as hidden {hidden}, head {head} "
                "say; retrain it"
            )


def _norm(norm: Any) -> dict[str, list[float]]:
    """The saved feature normalisation: the four vectors, finite, each std > 0."""
    from spotwise.predictors._modelfile import finite
    from spotwise.predictors._revfeatures import SEQ_FEATURES, STAT_FEATURES

    sizes = {"seq": len(SEQ_FEATURES), "stat": len(STAT_FEATURES)}
    out = {}
    for key in ("seq_mean", "seq_std", "stat_mean", "stat_std"):
        v, want = finite(norm[key], f"norm.{key}"), sizes[key.split("_")[0]]
        if len(v) != want:
            raise ValueError(f"norm.{key} has {len(v)} entries, not {want}; retrain it")
        bad = [i for i, x in enumerate(v) if key.endswith("std") and x <= 0]
        if bad:
            raise ValueError(f"norm.{key}[{bad[0]}] is {v[bad[0]]:g}, not > 0; retrain it")
        out[key] = v
    return out


def _check_weights(tensors: dict[str, Any]) -> None:
    """Every weight finite: a NaN weight makes every probability NaN (a predict error)."""
    import torch

    for name, t in tensors.items():
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"weight {name} holds NaN or infinite numbers; retrain it")


def _bce(logits: np.ndarray, y: np.ndarray) -> float:
    import numpy as np

    z = logits.astype(np.float64)
    return float(np.mean(np.logaddexp(0, z) - y * z))


def _platt(logits: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(a, b) with P = sigmoid(a·logit + b), fitted by maximum likelihood on a held-out slice."""
    import numpy as np
    from scipy.optimize import minimize

    z, yy = logits.astype(np.float64), y.astype(np.float64)
    if yy.min() == yy.max():
        return 1.0, 0.0

    def nll(w: np.ndarray) -> tuple[float, np.ndarray]:
        s = w[0] * z + w[1]
        p = 1 / (1 + np.exp(-s))
        return float(np.mean(np.logaddexp(0, s) - yy * s)), np.array(
            [np.mean((p - yy) * z), np.mean(p - yy)]
        )

    res = minimize(nll, np.array([1.0, 0.0]), jac=True, method="L-BFGS-B")
    a, b = (float(v) for v in res.x)
    return (a, b) if a > 0 else (1.0, 0.0)


def progress_line(rec: dict[str, float], epochs: int) -> str:
    """One epoch of :meth:`LSTMModel._train` as a person reads it: ``epoch 3/12 train
    0.499 val 0.264 (4 s)``; the refit (phase 2, no validation) says so."""
    head = "refit epoch" if rec["phase"] == 2 else "epoch"
    val = f" val {rec['val_bce']:.3f}" if "val_bce" in rec else ""
    return (
        f"{head} {int(rec['epoch'])}/{epochs} train {rec['train_bce']:.3f}{val} "
        f"({rec['seconds']:.0f} s)"
    )
