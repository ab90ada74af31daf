"""The drain's stray sweep (the real LaunchCleanup methods) on a real store with a stand-in
backend, as the stray-sweep tests share it (test_s20_stray_sweep_race,
test_s21a_stray_per_instance): a running AWS job "j-aws" whose one trial's life l-0 (instance
i-0) ran an hour at $0.95."""

from __future__ import annotations

import json
import types
from collections.abc import Callable
from typing import Any

from shared_helpers import record_life

from spotwise.planner.launch_cleanup import LaunchCleanup
from spotwise.providers.base import Instance, Market, Offer
from spotwise.providers.billing import rule_for
from spotwise.store import Store

PRICE = 0.95  # record_life's
OFFER = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, PRICE, 3.0)
SPEC = json.dumps({"providers": [{"name": "aws", "regions": ["us-east-1"]}]})


def aws_job(db: str, now: float) -> str:
    """The job (state "running", $0.95) and its trial; returns the trial's id."""
    with Store.open(db) as s:
        s.create_job("j", SPEC, "job.yaml", "spot-greedy", "maximize", job_id="j-aws")
        s.update_job("j-aws", state="running", cost_usd=PRICE)
        record_life(
            s, "j-aws", 0, "l-0", requested_at=now - 7200, launched_at=now - 7200,
            provider_instance_id="i-0", state="terminated", end_reason="completed",
            ended_at=now - 3600, cost_usd=PRICE, market_seconds=3600.0,
        )  # fmt: skip
        trial_id: str = s.get_instance("l-0").trial_id
        s.update_trial(trial_id, cost_usd=PRICE)
    return trial_id


def sweep(
    store: Store,
    trial: Any,
    now: float,
    describe: Callable[[object], list[Instance]],
    terminate: Callable[[list[str]], None],
    segments: Callable[..., list[tuple[float, float]]] | None = None,
) -> LaunchCleanup:
    """Run the drain's stray sweep of "j-aws" at ``now`` over what ``describe`` lists;
    ``segments``: the backend's pricing (default: the offer's price for the whole life)."""
    lc = object.__new__(LaunchCleanup)
    lc.store, lc.job_id, lc.leftover_ids, lc.unconfirmed = store, "j-aws", [], {}
    lc.spent_usd, lc.trials = PRICE, [trial]
    lc._event = lambda *a, **k: None  # type: ignore[method-assign]
    lc.backend = types.SimpleNamespace(  # type: ignore[assignment]
        provisioner=types.SimpleNamespace(describe=describe, terminate=terminate),
        segments=segments or (lambda o, a, b: [(b - a, o.price_per_hour)]),
        rule_of=lambda o: rule_for("aws"),
    )
    lc._sweep_strays(now)
    return lc
