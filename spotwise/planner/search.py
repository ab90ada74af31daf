"""Hyper-parameter search with scikit-optimize's ask/tell, shared by every policy.

Only scikit-optimize's GP, RF and ET estimators are used: with numpy 2.4 and scikit-learn 1.9 its
GBRT and "dummy" paths are broken (see pyproject). ``random`` samples the space directly.
While trials run in parallel, new points come from ``ask(n_points=…, strategy="cl_min")``
(constant liar), so pending trials are not proposed twice.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

from spotwise.spec import CategoricalParam, IntParam, RealParam, SearchSpec

_ESTIMATORS = {"gp": "GP", "rf": "RF", "et": "ET"}
log = logging.getLogger("spotwise.search")


@contextlib.contextmanager
def _skopt_notes() -> Iterator[None]:
    """skopt warns (a UserWarning on stderr, over the live table) each time its model proposes
    a point already evaluated and it samples a random one instead: expected in a small space,
    so logged at debug level; any other warning is shown as before."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        if "has been evaluated at point" in str(w.message):
            log.debug("search: %s", w.message)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _plain(v: Any) -> Any:
    """numpy scalars → Python scalars (JSON and SQLite friendly)."""
    return v.item() if hasattr(v, "item") else v


class Search:
    def __init__(
        self,
        space: Mapping[str, RealParam | IntParam | CategoricalParam],
        spec: SearchSpec,
        direction: str = "maximize",
    ) -> None:
        from skopt import Optimizer
        from skopt.space import Categorical, Integer, Real

        self.names = list(space)
        dims: list[Any] = []
        for name, p in space.items():
            if isinstance(p, RealParam):
                dims.append(
                    Real(p.low, p.high, prior="log-uniform" if p.log else "uniform", name=name)
                )
            elif isinstance(p, IntParam):
                dims.append(
                    Integer(p.low, p.high, prior="log-uniform" if p.log else "uniform", name=name)
                )
            else:
                dims.append(Categorical(list(p.choices), name=name))
        self.sign = -1.0 if direction == "maximize" else 1.0  # skopt minimises
        self.random = spec.optimizer == "random"
        self._opt = Optimizer(
            dims,
            base_estimator=_ESTIMATORS.get(spec.optimizer, "GP"),
            n_initial_points=spec.initial_points,
            random_state=spec.seed,
            acq_func="EI",
        )
        self._pending: list[list[Any]] = []
        self.told = 0

    def ask(self) -> dict[str, Any]:
        from threadpoolctl import threadpool_limits

        # one BLAS thread: on a small machine OpenBLAS threads fight and a GP fit takes 6× longer
        with threadpool_limits(1), _skopt_notes():
            return self._ask()

    def _ask(self) -> dict[str, Any]:
        if self.random:
            point = self._opt.space.rvs(n_samples=1, random_state=self._opt.rng)[0]
        else:
            n = len(self._pending) + 1
            points = self._opt.ask(n_points=n, strategy="cl_min") if n > 1 else [self._opt.ask()]
            point = next((p for p in points if p not in self._pending), points[-1])
        point = [_plain(v) for v in point]
        self._pending.append(point)
        return dict(zip(self.names, point, strict=True))

    def tell(self, params: Mapping[str, Any], value: float) -> None:
        """Report a trial's final (or predicted final) metric."""
        point = [_plain(params[n]) for n in self.names]
        if point in self._pending:
            self._pending.remove(point)
        if value != value:  # NaN: nothing to tell (a trial that ended on NaN is a tell_failure)
            return
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1), _skopt_notes():
            self._opt.tell(point, self.sign * float(value))
        self.told += 1

    def tell_failure(self, params: Mapping[str, Any]) -> None:
        """A trial at ``params`` failed (it crashed, or could not start): tell the worst value
        seen so far, so the model steers away. Forgotten, a GP proposes the very same point
        again (its next point only changes with a tell) and every later trial crashes the same
        way. Before any value is known there is nothing to compare with: forgotten (the first
        points are random anyway)."""
        ys = list(self._opt.yi)
        if not ys:
            self.forget(params)
            return
        self.tell(params, self.sign * max(ys))  # skopt minimises sign·value: its largest y

    def replay(
        self, ended: list[tuple[Mapping[str, Any], float | None]], pending: list[Mapping[str, Any]]
    ) -> None:
        """Seed a resumed job's search with what its earlier run learnt, in one model fit:
        ``ended`` holds each told trial's params and value (None: a failure, told the worst
        value, as :meth:`tell_failure`); ``pending`` the trials about to run again, which
        :meth:`ask` must not propose a second time."""
        finite = [v for _, v in ended if v is not None and v == v]
        worst = max((self.sign * v for v in finite), default=None)
        points: list[list[Any]] = []
        ys: list[float] = []
        for params, value in ended:
            y = worst if value is None else self.sign * float(value)
            if y is None or y != y:  # a failure before any value, or NaN: nothing to tell
                continue
            points.append([_plain(params[n]) for n in self.names])
            ys.append(y)
        self._pending += [[_plain(p[n]) for n in self.names] for p in pending]
        if not points:
            return
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1), _skopt_notes():
            self._opt.tell(points, ys)
        self.told += len(points)

    def forget(self, params: Mapping[str, Any]) -> None:
        point = [_plain(params[n]) for n in self.names]
        if point in self._pending:
            self._pending.remove(point)
