"""The orchestrator's pass asks the search for about a second, then goes on polling (review-bd
BD1): `_admit` asked once per empty slot in one pass, each GP ask one model fit, and a
150-trial parallel-12 job's loop sat minutes in the search, reaping no exit and handling no
notice. A slow fake search: each ask takes 0.4 s of the clock `asks` reads."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest

import spotwise.planner.search as search_mod
from spotwise.planner.orchestrator import Orchestrator
from spotwise.planner.search import Search
from spotwise.spec import RealParam, SearchSpec


def admitting(parallel: int, trials: int) -> Orchestrator:
    o = Orchestrator.__new__(Orchestrator)  # only what _admit reads
    o.cancelled, o.trace_end, o.trials, o.job_id, o.ckpt_root = False, None, [], "j-1", "/ck"
    o.spec = SimpleNamespace(
        parallel=parallel, trials=trials, steps=3, checkpoint=SimpleNamespace(every=1)
    )
    rows = itertools.count(1)
    o.store = SimpleNamespace(add_trial=lambda job, n, params: SimpleNamespace(id=next(rows)))
    o._budget_spent = o._broken = o._doubtful = lambda: False  # type: ignore[method-assign]
    space = {"x": RealParam(type="real", low=0.0, high=1.0)}
    o.search = Search(space, SearchSpec(optimizer="random", seed=0))
    return o


def test_a_pass_asks_for_about_a_second_and_fills_the_rest_next_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ticks = itertools.count(step=0.4)  # read before and after each ask: 0.4 s an ask
    real_asks = Search.asks

    def slow_asks(self: Search, n: int, **kw: Any) -> Any:
        return real_asks(self, n, clock=lambda: next(ticks), **kw)

    monkeypatch.setattr(Search, "asks", slow_asks)
    o = admitting(parallel=12, trials=14)
    assert search_mod.ASKS_WITHIN_S == 1.0
    sizes = [len(o._admit()) for _ in range(6)]
    assert sizes == [3, 3, 3, 3, 0, 0]  # 0.4, 0.8, 1.2 s: stop; 12 slots in 4 passes
    assert [t.number for t in o.trials] == list(range(12))


def test_a_fast_search_still_fills_every_slot_in_one_pass() -> None:
    o = admitting(parallel=12, trials=14)
    assert len(o._admit()) == 12
    o.trials[0].phase = o.trials[0].phase.__class__.DONE
    assert len(o._admit()) == 1 and len(o._admit()) == 0  # one free slot
    for t in o.trials:
        t.phase = t.phase.__class__.DONE
    assert len(o._admit()) == 1  # trials: 14 at most
