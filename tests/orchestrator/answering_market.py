"""A scripted cloud market whose launch calls answer as a list says, and the earlier-run /
resumed-run steps the lasting-refusal and quota-pause resume tests share (session 20).

It runs the real loop on the scripted market of ``test_running_totals`` (a clock that moves
``tick_s`` market s each time it is read, provider ``fake``: a cloud); a resumed run's market
carries on from the earlier run's clock, as the wall clock does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from test_running_totals import ScriptedMarket, run_scripted

from spotwise.planner import orchestrator
from spotwise.planner.orchestrator import Orchestrator, RunOptions, resume_job
from spotwise.planner.resume import plan_resume
from spotwise.providers.base import Instance, LaunchRequest
from spotwise.store import Store

NOW = 10_000.0  # the market time of the restore-only orchestrators


class AnsweringMarket(ScriptedMarket):
    """Launch calls answered in turn as ``answers`` says (``ok``: launched; any other word:
    ``refusals[word]()`` is raised), then launched; (market time, answer) of each call kept."""

    refusals: ClassVar[dict[str, Callable[[], Exception]]] = {}

    def __init__(self, answers: list[str], t0: float | None = None) -> None:
        super().__init__(steps=2)
        self.answers = list(answers)
        self.calls: list[tuple[float, str]] = []
        self.tick_s = 10.0  # market seconds a read of the clock moves it
        if t0 is not None:
            self.t = t0

    def now(self) -> float:
        self.t += self.tick_s
        return self.t

    def launch(self, request: LaunchRequest) -> Instance:
        answer = self.answers.pop(0) if self.answers else "ok"
        self.calls.append((self.t, answer))
        if answer == "ok":
            return super().launch(request)
        raise self.refusals[answer]()


def failed_events(db: str, job_id: str) -> list[dict[str, Any]]:
    """The details of the job's launch_failed events, oldest first."""
    with Store.open_existing(db) as s:
        return [e.detail for e in s.events(job_id, kind="launch_failed")]


def refused_then_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: AnsweringMarket
) -> tuple[dict[str, Any], str]:
    """The earlier run: cancelled (as Ctrl-C or `spotwise cancel`) right after its first launch
    call was answered, so whatever that refusal started is still on when it ends."""
    handle: dict[str, Any] = {}
    real = orchestrator.on_signals

    def capture(callback: Any) -> Any:
        handle["cancel"] = callback
        return real(callback)

    monkeypatch.setattr(orchestrator, "on_signals", capture)

    def cancel_once_refused(m: AnsweringMarket) -> None:
        if m.calls and "cancel" in handle:
            handle.pop("cancel")()
            m.tick_s = 1.0  # the cancel takes a few seconds, not 10 s a read

    first.on_pass = cancel_once_refused
    summary, db = run_scripted(tmp_path, monkeypatch, first)
    assert summary["state"] == "cancelled", summary
    return summary, db


def resume_on(
    tmp_path: Path,
    db: str,
    job_id: str,
    market: AnsweringMarket,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Any, dict[str, Any]]:
    """`spotwise resume` of the job on ``market``: (its resume plan, the resumed run's summary)."""
    monkeypatch.setattr(orchestrator, "open_backend", lambda *a, **kw: market.backend())
    with Store.open_existing(db) as store:
        plan = plan_resume(store, store.get_job(job_id))
        out = resume_job(plan, store, RunOptions(poll_s=0.0, run_root=tmp_path / "runs"))
    return plan, out


def new_job(store: Store) -> str:
    return store.create_job("m", "{}", "", "x", "maximize").id


def restore_only(provider: str, speedup: float = 1.0) -> Any:
    """An orchestrator with only the state a resume's restore touches, its market at NOW."""
    o: Any = Orchestrator.__new__(Orchestrator)
    o.blocked, o.quota_full, o.throttled = {}, {}, {}
    o.backend = SimpleNamespace(
        provider=provider, speedup=speedup, info={"tick_s": 0.0}, now=lambda: NOW
    )
    return o
