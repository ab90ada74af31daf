"""The on-demand reference of the seconds `spotwise cancel` bills a life (:mod:`spotwise.release`).

A life's on-demand reference is what its *useful* work would have cost on demand, under the
orchestrator's rule (:func:`spotwise.planner.report.life_cost` and
:func:`~spotwise.planner.report.running_reference`): the seconds of the life up to its last
reported progress, less a relaunch's start-up (an on-demand run starts once per trial). Cancel
bills what no life's bill covered (a dead orchestrator's lives, a leftover of a drain, an
instance that outlived its record): of those seconds, only the ones inside the life's useful
window are referenced; the rest (the dead orchestrator's idle time, work nobody saw or that
the end threw away) is billed but never referenced, so that the saving is never overstated.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class OnDemandReference:
    """The on-demand reference of the seconds cancel bills a life of a trial, at the on-demand
    price its orchestrator had for the offer (an on-demand record's own; the one its instance
    carries: AWS, Azure a launch tag, GCP the offer saved on the VM; the replayed market's),
    over the seconds of :meth:`useful` only. An instance already gone carries none: the price
    its ``launch`` event recorded (since the twenty-fourth session), else the one another
    instance ``listed`` by the same cancel carries for the record's offer (review-bb F5: every
    gone one was named unknown). Unknown price (none of those, or 0: no price for the type):
    none is added, and the record is named in ``unknown``.

    ``speedup``: market seconds per wall second (a replay's clock; 1 on a cloud)."""

    def __init__(
        self, store: Any, spec: Any, job: Any, speedup: float = 1.0, listed: Iterable[Any] = ()
    ) -> None:
        self.store, self.spec, self.job, self.speedup = store, spec, job, speedup
        self.unknown: list[str] = []
        self._listed = {  # offer key → the on-demand price a listed instance of it carries
            i.offer.key: float(i.offer.on_demand_price_per_hour)
            for i in listed
            if (i.offer.on_demand_price_per_hour or 0.0) > 0
        }
        self._replay: list[float | None] = []  # the replayed market's, read once
        self._events: list[Any] | None = None  # the job's launch and notice events, read once
        self._rows: list[Any] = store.list_instances(job.id)  # oldest first, as found

    def reference(
        self, row: Any, inst: Any, start: float | None, billed_s: float, revoked: bool = False
    ) -> float:
        """Dollars of reference for ``billed_s`` market seconds billed after the
        ``row.market_seconds`` the record's bill covered, of a life that started at ``start``
        (wall time: cancel's own start of the life); ``revoked``: the provider took it."""
        price = self._price(row, inst) if billed_s > 0 else 0.0
        if price is None:
            self.unknown.append(row.id)
        if not price or start is None:
            return 0.0
        lo, hi = self.useful(row, start, revoked)
        b0 = row.market_seconds
        return max(min(hi, b0 + billed_s) - max(lo, b0), 0.0) * price / 3600.0

    def useful(self, row: Any, start: float, revoked: bool) -> tuple[float, float]:
        """The life's useful window, in market seconds from ``start``: ``(lo, hi)``.

        ``hi``: its last report (its last observation), or, for a life the provider took
        (``revoked``) or noticed (a ``notice`` event), its last report at or before the trial's
        checkpoint, as the orchestrator keeps only the checkpoint of such a life (the store
        holds only the trial's latest checkpoint step, bounded by the resume step of a later
        life; a checkpoint the dead orchestrator never read is not known: the smaller figure).
        No report past its resume step: nothing useful (as ``life_cost``: no step kept).

        ``lo``: 0 for a life that started from step 0 (its start-up is the one an on-demand run
        pays too); a relaunch's start-up is left out as ``running_reference`` does: its first
        report less the steps it covered at the trial's measured seconds per step (this life's
        reports, else its latest earlier life's). Where the store cannot give what the rule
        needs, the whole time up to the first report is taken as start-up (the smaller figure):
        no measured speed (the orchestrator then counted it), or no ``launch`` event giving the
        resume step of a life that is not the trial's first."""
        obs = self.store.observations(row.trial_id)
        mine = [o for o in obs if o.instance_id == row.id]
        if not mine:
            return 0.0, 0.0  # no reported progress: no step is known kept
        start_step = self._start_step(row)
        kept = max(o.step for o in mine)
        if revoked or self._noticed(row.id):
            kept = min(kept, self._checkpoint(row))
        done = [o for o in mine if (start_step or 0) < o.step <= kept]
        if not done:
            return 0.0, 0.0
        hi = max(self._offset(o, start) for o in done)
        if start_step == 0:
            return 0.0, hi
        first = mine[0]
        sps = _sps(mine, self.speedup)
        earlier = [o for o in obs if o.id < first.id]  # the trial's reports before this life's
        for life in reversed(list(dict.fromkeys(o.instance_id for o in earlier))):
            if sps is None:
                sps = _sps([o for o in earlier if o.instance_id == life], self.speedup)
        before = (first.step - start_step) * sps if sps and start_step is not None else 0.0
        return max(self._offset(first, start) - before, 0.0), hi

    def _offset(self, o: Any, start: float) -> float:
        """Market seconds from the life's start to an observation (on a cloud, the pass's time
        the orchestrator's rule uses when it is the earlier one)."""
        at = o.wall_time
        if self.speedup == 1.0 and o.market_time is not None:
            at = min(at, o.market_time)
        return (at - start) * self.speedup

    def _launch_events(self) -> list[Any]:
        if self._events is None:
            self._events = [
                e for e in self.store.events(self.job.id) if e.kind in ("launch", "notice")
            ]
        return self._events

    def _trial_rows(self, row: Any) -> list[Any]:
        return [r for r in self._rows if r.trial_id == row.trial_id]

    def _resume(self, launch_id: str) -> int | None:
        for e in self._launch_events():
            step = e.detail.get("resume_step") if e.kind == "launch" else None
            if e.instance_id == launch_id and isinstance(step, int):
                return step
        return None

    def _start_step(self, row: Any) -> int | None:
        """The step the life resumed from (its ``launch`` event); without one, 0 for the
        trial's first life to start, else None (unknown)."""
        step = self._resume(row.id)
        if step is not None:
            return step
        lives = self._trial_rows(row)
        ids = [r.id for r in lives]
        earlier = lives[: ids.index(row.id)] if row.id in ids else lives
        return None if any(r.launched_at is not None for r in earlier) else 0

    def _noticed(self, launch_id: str) -> bool:
        return any(e.kind == "notice" and e.instance_id == launch_id for e in self._launch_events())

    def _checkpoint(self, row: Any) -> int:
        """The step the life's last checkpoint kept, as far as the store says: the trial's
        checkpoint step, no later than the resume step of a later life of the trial."""
        ids = [r.id for r in self._trial_rows(row)]
        later = ids[ids.index(row.id) + 1 :] if row.id in ids else []
        resumed = [s for s in map(self._resume, later) if s is not None]
        return min([int(self.store.get_trial(row.trial_id).checkpoint_step), *resumed])

    def _price(self, row: Any, inst: Any) -> float | None:
        if row.market == "on-demand":
            return float(row.price_per_hour)
        if inst is not None and (inst.offer.on_demand_price_per_hour or 0.0) > 0:
            return float(inst.offer.on_demand_price_per_hour)
        if self.spec.providers[0].name == "local":
            if not self._replay:
                self._replay.append(_replay_on_demand(self.spec, self.job))
            return self._replay[0]
        if inst is not None:  # its tag's 0.0: no price for the type at launch
            return None
        for e in self._launch_events():  # its instance is gone: its launch's record of it
            od = e.detail.get("on_demand") if e.kind == "launch" else None
            if e.instance_id == row.id and isinstance(od, int | float) and od > 0:
                return float(od)
        return self._listed.get(row.offer_key)  # an older job's: a sibling's of its offer


def _sps(obs: list[Any], speedup: float) -> float | None:
    """Market seconds per step measured over one life's reports, as the orchestrator measures
    it: from its first report to its latest one at a later step (None: no such two)."""
    if not obs:
        return None
    first, later = obs[0], [o for o in obs if o.step > obs[0].step]
    if not later:
        return None
    last = later[-1]
    if first.market_time is not None and last.market_time is not None:
        dt = last.market_time - first.market_time
    else:
        dt = (last.wall_time - first.wall_time) * speedup
    return dt / (last.step - first.step) if dt > 0 else None


def _unknown_text(ids: list[str]) -> str:
    """What cancel says of the records billed at an unknown on-demand price (none: "")."""
    if not ids:
        return ""
    return (
        f"; the on-demand price of {len(ids)} record(s) is unknown ({', '.join(ids)}): the "
        "job's on-demand figure leaves out what they were billed now (no price is invented)"
    )


def _replay_on_demand(spec: Any, job: Any) -> float | None:
    """The on-demand price of a local job's replayed market (None: its trace is gone)."""
    from pathlib import Path

    from spotwise.errors import SpotwiseError
    from spotwise.providers.replay import ReplayMarket, load_market_traces
    from spotwise.spec import ReplaySpec

    r = spec.providers[0].replay or ReplaySpec()
    try:
        traces = load_market_traces(r.trace, spec.base_dir(Path(job.spec_path or ".")))
    except (SpotwiseError, OSError, ValueError):
        return None
    return ReplayMarket(traces, provider=r.billing).on_demand_price
