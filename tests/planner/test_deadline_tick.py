"""The Safety Net with decisions a tick apart: the net leaves ``d`` at every decision."""

from __future__ import annotations

import numpy as np
import pytest
from plan_helpers import T0, curve, make_traces

from spotwise.planner.deadline_sim import DeadlineEngine, DeadlineJob, run_many, sample_starts
from spotwise.planner.policies.deadline import JobClock
from spotwise.planner.policy import get_policy
from spotwise.traces import TraceSet

H = 3600.0
NET_POLICIES = ["greedy", "uniform-progress", "spotwise"]


def clock(left: float, remaining: float, d: float, tick: float) -> JobClock:
    return JobClock(
        remaining=remaining,
        left=left,
        done=0.0,
        total=remaining,
        window=left,
        elapsed=0.0,
        d=d,
        tick=tick,
    )


def test_the_net_margin_is_d_plus_the_larger_of_d_and_the_tick() -> None:
    # tick ≤ d: the paper's R < C + 2d
    assert clock(1000.0, 0.0, 300.0, 60.0).safety_net_margin == 600.0
    assert not clock(600.0, 0.0, 300.0, 60.0).safety_net
    assert clock(599.0, 0.0, 300.0, 60.0).safety_net
    # tick > d: one tick of waiting must still leave d for the changeover
    assert clock(1000.0, 0.0, 60.0, 195.0).safety_net_margin == 255.0
    assert clock(254.0, 0.0, 60.0, 195.0).safety_net  # 2d = 120 would have waited
    assert not clock(255.0, 0.0, 60.0, 195.0).safety_net
    # d = 0 (the repro): 180 s of slack with decisions 195 s apart is already the net
    assert clock(48.05 * H, 48 * H, 0.0, 195.0).safety_net
    assert not clock(48.05 * H, 48 * H, 0.0, 0.0).safety_net


def irregular_ticks(seed: int, hours: float = 12.0) -> TraceSet:
    """One zone, ticks 194–280 s apart (like the SkyNomad trace), spot flickering."""
    rng = np.random.default_rng(seed)
    gaps = rng.integers(194, 281, size=int(hours * H / 194))
    times = np.concatenate([[0.0], np.cumsum(gaps).astype(float)])
    avail = (rng.random(len(times)) < 0.6).astype(int)
    tr = make_traces({"z": list(avail)}, {"z": 0.8}, od=3.0)
    tr.times = 1.7e9 + times
    tr.gap_seconds = 195.0  # the median, as the loaders set it
    return tr


@pytest.mark.parametrize("name", NET_POLICIES)
@pytest.mark.parametrize(("d", "slack"), [(0.0, 180.0), (0.0, 250.0), (60.0, 60.0), (60.0, 300.0)])
def test_no_deadline_is_missed_when_the_slack_covers_the_changeover(
    name: str, d: float, slack: float
) -> None:
    # the old net (R < C + 2d, the tick ignored) misses most of these: an idle tick eats the slack
    job = DeadlineJob(
        job_s=2 * H, deadline_s=2 * H + slack, restart_s=d, spot_price=0.8, on_demand_price=3.0
    )
    for seed in range(3):
        tr = irregular_ticks(seed)
        for start in range(0, 60, 6):
            r = DeadlineEngine(get_policy(name), tr, 0, start, job).run()
            assert not r.missed, (name, seed, start, r.finished_s)


def test_the_built_in_trace_repro_misses_nothing() -> None:
    # spotwise simulate deadline --traces builtin:skynomad-v100-2023 --job-hours 48
    #   --deadline-hours 48.05 --restart-hours 0  (41 of 45 missed before), on a shorter job
    from spotwise.providers.replay import resolve_trace
    from spotwise.traces import load_traces

    ts = load_traces(resolve_trace("builtin:skynomad-v100-2023"))
    job = DeadlineJob(job_s=6 * H, deadline_s=6.05 * H, restart_s=0.0)
    pairs = sample_starts(ts, job, 5, 0, 0.7)
    for name in NET_POLICIES:
        runs = run_many(lambda name=name: get_policy(name), ts, pairs, job)  # type: ignore[misc]
        assert len(runs) == 45
        assert sum(r.missed for r in runs) == 0, name
        assert max(r.finished_s or 0.0 for r in runs) <= job.deadline_s


def test_the_tuning_simulator_gives_the_time_to_the_next_tick() -> None:
    """The tuning simulator passed the trace's median gap as ``tick_s``, so on uneven ticks
    (SkyNomad: 194-280 s around 195 s) its budget and deadline guards looked too little ahead.
    Every view now reaches exactly the next trace tick, wherever between two ticks it is made."""
    import dataclasses

    from spotwise.planner.simulator import Engine, SimSettings
    from spotwise.providers.billing import rule_for
    from spotwise.providers.replay import ReplayMarket

    base = make_traces({"z": [1] * 200}, {"z": 0.8})
    gaps = np.resize([300.0, 300.0, 900.0], 199)  # median 300 s, every third gap 900 s
    tr = dataclasses.replace(base, times=T0 + np.concatenate([[0.0], np.cumsum(gaps)]))
    seen: list[tuple[float, float]] = []
    inner = get_policy("spot-greedy")

    class Watch:
        name = "watch"

        def decide(self, view, event):  # type: ignore[no-untyped-def]
            seen.append((view.now, view.tick_s))
            return inner.decide(view, event)

    cs = [curve(str(i), 0.5, steps=6, step_s=250.0) for i in range(2)]
    settings = SimSettings(parallel=2, time_scale=1.0, restart_overhead_s=60.0)
    Engine(Watch(), ReplayMarket(tr), rule_for("aws"), cs, settings, T0).run()  # type: ignore[arg-type]
    times = set(tr.times.tolist())
    assert len(seen) >= 15
    assert all(now + tick in times for now, tick in seen)
    assert max(tick for _, tick in seen) == 900.0
    assert any(0.0 < tick < 300.0 for _, tick in seen)  # a decision between two ticks
