"""CPU cost of the GP search in a parallel job: tells and asks, old behaviour against new.

    python bench/search_cost.py                 # 60 trials, parallel 12: ~2 min on 2 busy cores
    python bench/search_cost.py --trials 150    # the size of review-bd's job (BD1): ~10 min
    (writes bench/results/search-cost.json)

The search alone (no orchestrator, no trainer): a 2-D bowl (best at x=0.3, y=-0.2, maximised),
``parallel`` points asked up front, then one completion at a time, as a steady job sees them:
the oldest pending point is told its value and one new point is asked for its slot, until
``trials`` points were asked; the last ones are told at the end. Both searches run the same
schedule in this process, one after the other, each on one BLAS thread as the orchestrator's:

- ``old``: every tell fits the model (skopt ``tell(fit=True)``), as spotwise did before s24 (a
  fit nobody used while trials were pending: the next point came from the constant liar);
- ``new``: tells fit nothing; an ask fits once (the liar's model, or the main one when nothing
  is pending).

Figures: CPU seconds (``time.process_time``) of all tells and of all asks, the model fits
counted (the estimator's ``fit``), the largest cost of one completion (its tell and the ask
that refills the slot: what the orchestrator's loop spent inline before polling again) and
``old_vs_new``, the ratio of the totals. CPU seconds and the ratio are the figures to compare;
the proposals differ after the first fits (the random stream is consumed differently), so the
best value found is reported as a check, not a comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "bench" / "results" / "search-cost.json"

from spotwise.planner.search import Search, _skopt_notes  # noqa: E402
from spotwise.spec import RealParam, SearchSpec  # noqa: E402

SPACE = {
    "x": RealParam(type="real", low=-1.0, high=1.0),
    "y": RealParam(type="real", low=-1.0, high=1.0),
}


def bowl(p: Mapping[str, Any]) -> float:
    return -((p["x"] - 0.3) ** 2 + (p["y"] + 0.2) ** 2)


class PerTellFits(Search):
    """The search before s24: each tell fits the model (none for ``random``); an ask with
    nothing pending reuses that fit."""

    def _tell_points(self, points: list[list[Any]], ys: list[float]) -> None:
        from threadpoolctl import threadpool_limits

        if self._failed:
            worst = max([*self._opt.yi, *ys])
            points, ys = [*points, *self._failed], [*ys, *[worst] * len(self._failed)]
            self._failed = []
        with threadpool_limits(1), _skopt_notes():
            self._opt.tell(points, ys, fit=not self.random)
        self.told += len(points)
        self._liar = None
        self._fit_on = len(self._opt.yi)  # the tell fitted: the next main ask uses its point


@contextmanager
def counting_fits() -> Iterator[list[int]]:
    from skopt.learning import GaussianProcessRegressor

    real = GaussianProcessRegressor.fit
    n = [0]

    def fit(self: Any, X: Any, y: Any) -> Any:
        n[0] += 1
        return real(self, X, y)

    GaussianProcessRegressor.fit = fit  # type: ignore[method-assign]
    try:
        yield n
    finally:
        GaussianProcessRegressor.fit = real  # type: ignore[method-assign]


def run(search: Search, trials: int, parallel: int) -> dict[str, Any]:
    tell_s = ask_s = worst = 0.0
    best = float("-inf")
    with counting_fits() as fits:
        t0 = time.process_time()
        pending = [search.ask() for _ in range(min(parallel, trials))]
        ask_s += time.process_time() - t0
        asked = len(pending)
        while pending:
            p = pending.pop(0)
            t0 = time.process_time()
            search.tell(p, bowl(p))
            t1 = time.process_time()
            if asked < trials:
                pending.append(search.ask())
                asked += 1
            t2 = time.process_time()
            tell_s, ask_s = tell_s + t1 - t0, ask_s + t2 - t1
            worst = max(worst, t2 - t0)
            best = max(best, bowl(p))
    return {
        "tell_cpu_s": round(tell_s, 2),
        "ask_cpu_s": round(ask_s, 2),
        "total_cpu_s": round(tell_s + ask_s, 2),
        "model_fits": fits[0],
        "max_one_completion_cpu_s": round(worst, 3),
        "best_value": round(best, 5),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=60, help="points asked (150: review-bd's job)")
    ap.add_argument("--parallel", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    import numpy as np
    import sklearn
    import skopt

    spec = SearchSpec(optimizer="gp", seed=args.seed)  # the default search: GP, 4 initial points
    results = {}
    for name, cls in (("old", PerTellFits), ("new", Search)):
        results[name] = run(cls(SPACE, spec, "maximize"), args.trials, args.parallel)
        print(name, results[name], flush=True)
    old, new = results["old"]["total_cpu_s"], results["new"]["total_cpu_s"]
    out = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python bench/search_cost.py", *sys.argv[1:]]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus, "
        f"python {platform.python_version()}, scikit-optimize {skopt.__version__}, "
        f"scikit-learn {sklearn.__version__}, numpy {np.__version__} (1 BLAS thread)",
        "schedule": f"{args.trials} trials, parallel {args.parallel}, GP (initial_points "
        f"{spec.initial_points}, seed {args.seed}), 2-D bowl, one completion at a time",
        "full_size": args.trials >= 150,
        **results,
        "old_vs_new": round(old / new, 2) if new else None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
