"""The totals a running job saves for `spotwise status`: its spend and its on-demand reference
cover the same seconds, while it runs and not only once it has ended.

The spend counted the running instances up to now, but the reference only the lives already
billed: a job in its first life showed $0.03 vs $0.00 on demand, and after a revocation the
running life's seconds were in the spend and not in the reference.

The real loop runs here on a scripted market (:class:`ScriptedMarket`): a clock that moves 60
market seconds each time the loop reads it (once a pass), and a trial that starts up in 120 s,
then makes a step every 60 s, checkpointing every 2 steps. Spot is $1/h, on demand $5/h,
billed per second with no refund (as Azure). Each pass saves the job's totals; the market reads
them back as `spotwise status` does (``jobs.status``) at the start of the next pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from spotwise import jobs
from spotwise.planner import orchestrator
from spotwise.planner.backend import Backend
from spotwise.planner.orchestrator import RunOptions, run_job
from spotwise.providers.base import TAG_JOB, Instance, InstanceState, LaunchRequest, Market, Offer
from spotwise.providers.billing import BillingRule
from spotwise.spec import JobSpec
from spotwise.store import Store

TICK_S, STARTUP_S, STEP_S, EVERY = 60.0, 120.0, 60.0, 2
SPOT, ON_DEMAND = 1.0, 5.0
OFFER = Offer("fake", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, SPOT, ON_DEMAND)
RULE = BillingRule("fake", 1.0, 0.0, 0.0, 30.0, "test: per second, no refund")


class ScriptedMarket:
    """Clock and provisioner of a scripted market (see the module docstring). A life launched
    at ``L`` resuming from step ``s`` reports step ``s + k`` at ``L + STARTUP_S + k * STEP_S``
    and exits 0 after its last step; ``revoke_after[n]``: the ``n``-th life is revoked that
    many seconds after its launch. Trials never look at their stop file."""

    name = "fake"

    def __init__(self, steps: int, revoke_after: Mapping[int, float] | None = None) -> None:
        self.t = 1_000_000.0
        self.steps = steps
        self.revoke_after = dict(revoke_after or {})
        self.launched: list[float] = []
        self.lives: dict[str, dict[str, Any]] = {}
        self.checkpoint = 0
        self.job_id: str | None = None
        self.on_pass: Callable[[ScriptedMarket], None] | None = None

    # ---- clock ------------------------------------------------------------------------------
    def now(self) -> float:
        self.t += TICK_S
        return self.t

    # ---- provisioner --------------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> Instance:
        n = len(self.launched)
        iid = f"i-{n}"
        self.job_id = request.tags[TAG_JOB]
        revoke = self.revoke_after.get(n)
        self.lives[iid] = {
            "at": self.t,
            "start": self.checkpoint,
            "read": self.checkpoint,
            "revoked_at": None if revoke is None else self.t + revoke,
            "terminated_at": None,
            "tags": dict(request.tags),
        }
        self.launched.append(self.t)
        return Instance(iid, request.offer, InstanceState.RUNNING, dict(request.tags), self.t)

    def _step_at(self, life: dict[str, Any], step: int) -> float:
        return float(life["at"] + STARTUP_S + (step - life["start"]) * STEP_S)

    def _ended_at(self, life: dict[str, Any]) -> float | None:
        ends = [e for e in (life["revoked_at"], life["terminated_at"]) if e is not None]
        return min(ends) if ends else None

    def progress(self, instance_id: str) -> list[dict[str, object]]:
        life = self.lives[instance_id]
        end = self._ended_at(life)
        out: list[dict[str, object]] = []
        while life["read"] < self.steps:
            step = life["read"] + 1
            at = self._step_at(life, step)
            if at > self.t or (end is not None and at >= end):
                break
            out.append({"type": "report", "step": step, "metric": step / 10})
            if step % EVERY == 0:
                out.append({"type": "checkpoint", "step": step})
                self.checkpoint = step
            life["read"] = step
        return out

    def describe(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        out = []
        for iid, life in self.lives.items():
            end = self._ended_at(life)
            if end is not None and end <= self.t:
                state = (
                    InstanceState.REVOKED if end == life["revoked_at"] else InstanceState.TERMINATED
                )
                out.append(Instance(iid, OFFER, state, life["tags"], life["at"], end, None, False))
                continue
            done = self.t >= self._step_at(life, self.steps) and life["read"] >= self.steps
            inst = Instance(iid, OFFER, InstanceState.RUNNING, life["tags"], life["at"])
            inst.exit_code = 0 if done else None
            out.append(inst)
        return out

    def terminate(self, instance_ids: list[str]) -> None:
        for iid in instance_ids:
            life = self.lives[iid]
            if life["terminated_at"] is None:
                life["terminated_at"] = self.t

    def notices(self) -> list[Any]:
        if self.on_pass is not None:
            self.on_pass(self)  # the first call of each pass, before anything changes
        return []

    def backend(self) -> Backend:
        return Backend(
            provider="fake",
            catalog=None,  # type: ignore[arg-type]
            provisioner=self,  # type: ignore[arg-type]
            rules={"fake": RULE},
            now=self.now,
            list_offers=lambda t: [OFFER],
            segments=lambda offer, t0, t1: [(max(t1 - t0, 0.0), offer.price_per_hour)],
            close=lambda: None,
            info={"tick_s": TICK_S},
        )


def run_scripted(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    market: ScriptedMarket,
    *,
    policy: str = "spot-greedy",
    **spec_fields: Any,
) -> tuple[dict[str, Any], str]:
    """Run one job to its end on ``market``, saving its totals every pass; (summary, db)."""
    monkeypatch.setattr(orchestrator, "open_backend", lambda *a, **kw: market.backend())
    monkeypatch.setattr(orchestrator, "SAVE_TOTALS_EVERY_WALL_S", 0.0)
    spec = JobSpec.model_validate(
        {
            "name": "scripted",
            "command": ["python", "-c", "pass"],
            "metric": {"name": "score", "direction": "maximize"},
            "steps": market.steps,
            "trials": 1,
            "parallel": 1,
            "policy": policy,
            "search_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1, "log": True}},
            "checkpoint": {"every": EVERY, "location": str(tmp_path / "ckpt")},
            "workdir": str(tmp_path),
            # never opened (the scripted market stands in for it)
            "providers": [{"name": "local", "replay": {"trace": str(tmp_path / "none.csv")}}],
            **spec_fields,
        }
    )
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    store = Store.open(db)
    try:
        summary = run_job(spec, None, store, RunOptions(poll_s=0.0, run_root=tmp_path / "runs"))
    finally:
        store.close()
    return summary, db


def usd(seconds: float, price: float) -> float:
    return seconds * price / 3600.0


@pytest.mark.timeout(120)
def test_a_running_job_saves_its_spend_and_on_demand_reference_over_the_same_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One trial of 6 steps: its first life is revoked 360 s after its launch (steps 1-3 made,
    step 2 checkpointed), the second resumes from step 2 and completes."""
    market = ScriptedMarket(steps=6, revoke_after={0: 360.0})
    saved: dict[float, tuple[float, float, str]] = {}

    def read_status(m: ScriptedMarket) -> None:
        if m.job_id is not None:  # saved at the end of the previous pass, one tick ago
            s = jobs.status(m.job_id, db=db)
            saved[m.t - TICK_S] = (s["cost_usd"], s["on_demand_cost_usd"], s["state"])

    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    market.on_pass = read_status
    summary, _ = run_scripted(tmp_path, monkeypatch, market)

    first, second = market.launched
    assert second == first + 360.0  # relaunched in the pass that saw the revocation
    # the first life's bill: 360 s at $1/h; its reference: the 2 kept steps and the start-up
    # an on-demand run pays too (the first report at +180 s, less its one step) at $5/h
    bill1, ref1 = usd(360, SPOT), usd(2 * STEP_S + STARTUP_S, ON_DEMAND)
    expected = {
        # the first life, starting up: an on-demand run starts up too
        first + 60: (usd(60, SPOT), usd(60, ON_DEMAND)),
        first + 120: (usd(120, SPOT), usd(120, ON_DEMAND)),
        # its steps (3 made at +300 s): every second so far, on both sides
        first + 300: (usd(300, SPOT), usd(300, ON_DEMAND)),
        # the relaunch starting up: paid, but not what an on-demand run (started once) pays
        second + 60: (bill1 + usd(60, SPOT), ref1),
        second + 120: (bill1 + usd(120, SPOT), ref1),
        # its first step (reported at +180 s): the seconds after its start-up count again
        second + 180: (bill1 + usd(180, SPOT), ref1 + usd(180 - STARTUP_S, ON_DEMAND)),
        second + 300: (bill1 + usd(300, SPOT), ref1 + usd(300 - STARTUP_S, ON_DEMAND)),
    }
    for at, (cost, on_demand) in expected.items():
        assert saved[at][2] == "running"
        assert saved[at][:2] == (pytest.approx(cost, abs=1e-9), pytest.approx(on_demand, abs=1e-9))
    # the end of the job: the billed totals, as before (the second life: 360 s at $1/h, and
    # its 4 steps at $5/h without its start-up)
    final = (bill1 + usd(360, SPOT), ref1 + usd(4 * STEP_S, ON_DEMAND))
    assert summary["state"] == "succeeded", summary
    assert (summary["revocations"], summary["completed"]) == (1, 1)
    assert summary["cost_usd"] == pytest.approx(final[0], abs=1e-6)
    assert summary["on_demand_cost_usd"] == pytest.approx(final[1], abs=1e-6)
    after = jobs.status(summary["job_id"], db=db)
    assert (after["cost_usd"], after["on_demand_cost_usd"]) == (
        pytest.approx(final[0], abs=1e-9),
        pytest.approx(final[1], abs=1e-9),
    )
