"""Hyper-parameter search with scikit-optimize's ask/tell, shared by every policy.

Only scikit-optimize's GP, RF and ET estimators are used: with numpy 2.4 and scikit-learn 1.9 its
GBRT and "dummy" paths are broken (see pyproject). ``random`` samples the space directly and
fits no model. While trials run in parallel, new points come from a constant liar (``cl_min``):
a copy of the optimizer told each pending point at the best value seen, kept from one ask to
the next until a result arrives, so filling P slots costs about P model fits, not P²/2.
skopt's own ``ask(n_points=…)`` is not used: it refits the whole batch on every ask, and its
batch starts with a fresh fit's next point, which in a continuous space is the pending point
moved by 1e-7, so every parallel trial ran (nearly) the same configuration.

A tell fits no model (a GP fit and its acquisition search took ~1.5 CPU-s at 150 points, run
inline in the orchestrator's loop on each completed trial, while the next point came from the
liar anyway): a model is fitted when an ask needs one, at most once an ask: the main one only
when no trial is pending and it was told something since its last fit, else the liar's. A
caller filling several slots bounds a pass's time with :meth:`Search.asks`.

A point is never handed out twice while it is pending, evaluated, or failed: when the model
proposes one, a random point not yet used is drawn instead (in a finite space, from those left).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import math
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from spotwise.spec import CategoricalParam, IntParam, RealParam, SearchSpec, space_points

_ESTIMATORS = {"gp": "GP", "rf": "RF", "et": "ET"}
ENUMERATE_UP_TO = 100_000  # a finite space this small is listed to find a point not yet used
RANDOM_TRIES = 64  # else random draws: in a large space the first one is almost always new
ASKS_WITHIN_S = 1.0  # Search.asks: a pass of a caller's loop asks for about this long, then goes on
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


Point = list[Any]


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
        self._new_opt = functools.partial(
            Optimizer,
            dims,
            base_estimator=_ESTIMATORS.get(spec.optimizer, "GP"),
            n_initial_points=spec.initial_points,
            acq_func="EI",
        )
        self._opt = self._new_opt(random_state=spec.seed)
        counts = space_points(space)
        small = counts is not None and math.prod(counts.values()) <= ENUMERATE_UP_TO
        self._values = [_values(p) for p in space.values()] if small else None
        self._pending: list[Point] = []
        self._failed: list[Point] = []  # failed before any value was known: told with the first
        self._finals: list[float] = []  # the completed trials' values (tell_stopped's range)
        self._liar: Any = None  # _opt's results and a lie at each pending point (constant liar)
        self._unlied: list[Point] = []  # points handed out since the liar's last fit
        self._fit_on = 0  # how many results _opt's model was fitted on (0: none yet)
        self.told = 0

    def asks(
        self,
        n: int,
        within_s: float = ASKS_WITHIN_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> Iterator[dict[str, Any]]:
        """Up to ``n`` new points, one :meth:`ask` each, until the asks have taken ``within_s``
        seconds together: always one when ``n`` > 0, the rest left to the caller's next pass.
        A GP ask fits a model (~1.4 CPU-s at 150 results): a loop that filled 12 slots in one
        pass sat in the search for minutes on a loaded machine, handling no exit or notice."""
        spent = 0.0
        for i in range(n):
            if i and spent >= within_s:
                return
            t0 = clock()
            point = self.ask()
            spent += clock() - t0
            yield point

    def ask(self) -> dict[str, Any]:
        from threadpoolctl import threadpool_limits

        # one BLAS thread: on a small machine OpenBLAS threads fight and a GP fit takes 6× longer
        with threadpool_limits(1), _skopt_notes():
            return self._ask()

    def _ask(self) -> dict[str, Any]:
        used = {tuple(p) for p in [*self._opt.Xi, *self._pending, *self._failed]}
        if self.random:
            point = self._draw()
        elif len(self._opt.yi) < max(1, self._opt.n_initial_points_):
            point = [_plain(v) for v in self._opt.ask()]  # the first points: random, no model
        elif self._pending:
            point = self._liar_ask()
        else:
            point = self._main_ask()
        if tuple(point) in used:  # evaluated, pending or failed: never run twice
            point = self._fresh(used) or self._reused(point)
        self._pending.append(point)
        if self._liar is not None:
            self._unlied.append(point)
        return dict(zip(self.names, point, strict=True))

    def _main_ask(self) -> Point:
        """The model's next point, nothing pending. Tells do not fit (``fit=False``), and an
        unfitted skopt optimizer's ask returns the next point of its last fit (stale: one
        already handed out), or raises before any fit: so the model is fitted here, once, on
        every result, when it was told something since (skopt's ``copy`` continues the same
        random stream and fits in one ``_tell``; a GP is refitted from scratch either way)."""
        if self._fit_on != len(self._opt.yi):
            self._opt = self._opt.copy(random_state=self._opt.rng)
            self._fit_on = len(self._opt.yi)
        return [_plain(v) for v in self._opt.ask()]

    def _liar_ask(self) -> Point:
        """The constant liar's next point: a copy of the optimizer that has its results and
        each pending point at the best value seen (skopt's ``cl_min``). Kept until a result
        arrives or a point is dropped, so each ask costs one model fit, not one per pending
        point; rebuilt when it has nothing new to be told (its next point would be stale)."""
        lie = min(self._opt.yi)
        xs: list[Point] = []
        ys: list[float] = []
        if self._liar is None or not self._unlied:
            self._liar = self._new_opt(random_state=self._opt.rng.randint(0, 2**31 - 1))
            xs, ys, self._unlied = list(self._opt.Xi), list(self._opt.yi), list(self._pending)
        xs, ys = [*xs, *self._unlied], [*ys, *[lie] * len(self._unlied)]
        self._liar.tell(xs, ys)  # one fit: past the initial points, with one pending at least
        self._unlied = []
        return [_plain(v) for v in self._liar.ask()]

    def _draw(self) -> Point:
        return [_plain(v) for v in self._opt.space.rvs(n_samples=1, random_state=self._opt.rng)[0]]

    def _fresh(self, used: set[tuple[Any, ...]]) -> Point | None:
        """A random point not in ``used``; None when every point of the space is."""
        if self._values is not None:  # a small finite space: pick among the points left
            left = [list(p) for p in itertools.product(*self._values) if p not in used]
            return left[self._opt.rng.randint(len(left))] if left else None
        for _ in range(RANDOM_TRIES):
            point = self._draw()
            if tuple(point) not in used:
                return point
        return None

    def _reused(self, point: Point) -> Point:
        """Every point of the space is used (more trials than points: refused at spec load, but
        a job recorded before that check may resume): an evaluated point, never one that is
        still pending or known to fail, unless no other is left."""
        busy = {tuple(p) for p in [*self._pending, *self._failed]}
        return next((list(p) for p in [point, *self._opt.Xi] if tuple(p) not in busy), point)

    def tell(self, params: Mapping[str, Any], value: float) -> None:
        """Report a completed trial's final metric (NaN: nothing is told; a trial that ended on
        NaN is a :meth:`tell_failure`)."""
        if self._tell(params, value):
            self._finals.append(float(value))

    def tell_stopped(self, params: Mapping[str, Any], value: float) -> None:
        """Report an early-stopped trial's value (a predicted final, a rung's or its last value),
        clamped to the completed finals' range once a trial has completed: above the best, a
        prediction would become the model's incumbent and the next points would crowd around a
        trial that was stopped; below the worst, a partial value understates the final it would
        have reached. Before any trial has completed it is told as it is."""
        if self._finals and value == value:
            value = min(max(value, min(self._finals)), max(self._finals))
        self._tell(params, value)

    def _tell(self, params: Mapping[str, Any], value: float) -> bool:
        point = self._point(params)
        self._release(point)
        if value != value:
            return False
        self._tell_points([point], [self.sign * float(value)])
        return True

    def _tell_points(self, points: list[Point], ys: list[float]) -> None:
        """Tell skopt, with no model fit (the next ask fits the model it uses), with the
        failures held until a first value, told the worst value seen as :meth:`tell_failure`
        does."""
        if self._failed:
            worst = max([*self._opt.yi, *ys])
            points, ys = [*points, *self._failed], [*ys, *[worst] * len(self._failed)]
            self._failed = []
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1), _skopt_notes():
            self._opt.tell(points, ys, fit=False)
        self.told += len(points)
        self._liar = None

    def tell_failure(self, params: Mapping[str, Any]) -> None:
        """A trial at ``params`` failed (it crashed, or could not start): tell the worst value
        seen so far, so the model steers away. Forgotten, a GP proposes the very same point
        again (its next point only changes with a tell) and every later trial crashes the same
        way. Before any value is known the point is held: never proposed again, and told the
        worst value once a first one arrives."""
        point = self._point(params)
        self._release(point)
        if self._opt.yi:
            self._tell_points([point], [max(self._opt.yi)])  # skopt minimises: its largest y
        elif point not in self._failed:
            self._failed.append(point)

    def replay(
        self,
        ended: list[tuple[Mapping[str, Any], float | None]],
        pending: list[Mapping[str, Any]],
        stopped: Sequence[tuple[Mapping[str, Any], float]] = (),
    ) -> None:
        """Seed a resumed job's search with what its earlier run learnt, in one tell (the
        next ask fits once):
        ``ended`` holds each completed trial's final and each failure (None: told the worst
        value, as :meth:`tell_failure`); ``stopped`` each early-stopped trial's value, clamped
        to the finals' range as :meth:`tell_stopped` does and not counted as a final;
        ``pending`` the trials about to run again, which :meth:`ask` must not propose a second
        time."""
        finite = [float(v) for _, v in ended if v is not None and v == v]
        self._finals += finite
        lo, hi = (min(self._finals), max(self._finals)) if self._finals else (None, None)
        told: list[tuple[Mapping[str, Any], float | None]] = [*ended]
        for params, v in stopped:
            told.append((params, min(max(v, lo), hi) if lo is not None and hi is not None else v))
        known = [v for _, v in told if v is not None and v == v]
        worst = max((self.sign * v for v in known), default=None)
        points: list[Point] = []
        ys: list[float] = []
        for params, value in told:
            point = self._point(params)
            y = worst if value is None else self.sign * float(value)
            if y is not None and y == y:  # NaN: nothing to tell
                points.append(point)
                ys.append(y)
            elif value is None and point not in self._failed:  # a failure before any value
                self._failed.append(point)
        self._pending += [self._point(p) for p in pending]
        self._liar = None
        if points:
            self._tell_points(points, ys)

    def forget(self, params: Mapping[str, Any]) -> None:
        """A trial that ended with nothing to tell (cancelled, or stopped with no value): its
        point is no longer pending and may be proposed again."""
        self._release(self._point(params))

    def _release(self, point: Point) -> None:
        if point in self._pending:
            self._pending.remove(point)
        self._liar = None  # it lies about a point no longer pending

    def _point(self, params: Mapping[str, Any]) -> Point:
        return [_plain(params[n]) for n in self.names]


def _values(p: IntParam | CategoricalParam | RealParam) -> Sequence[Any]:
    if isinstance(p, IntParam):
        return range(p.low, p.high + 1)
    return list(p.choices) if isinstance(p, CategoricalParam) else []
