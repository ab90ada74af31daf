"""The Can't Be Late replica: greedy and Uniform Progress against decision traces worked by hand."""

from __future__ import annotations

import numpy as np
import pytest
from plan_helpers import make_traces

from spotwise.errors import SpecError
from spotwise.planner.deadline_sim import (
    PAPER_BILLING,
    DeadlineEngine,
    DeadlineJob,
    billing_rule,
    run_deadline_suite,
    sample_starts,
)
from spotwise.planner.policy import get_policy
from spotwise.providers.billing import RULES
from spotwise.traces import TraceSet

H = 3600.0
JOB = DeadlineJob(
    job_s=4 * H, deadline_s=6 * H, restart_s=0.1 * H, spot_price=0.8, on_demand_price=3.0
)


def tenth_hour_ticks(spans: list[tuple[float, float]], hours: float = 10.0) -> TraceSet:
    """One zone, 6-minute ticks, spot available in the given [from, to) hour spans."""
    n = round(hours * 10)
    avail = [int(any(a <= i / 10 < b for a, b in spans)) for i in range(n)]
    tr = make_traces({"z": avail}, {"z": 0.8}, od=3.0)
    tr.times = tr.times[0] + 360.0 * np.arange(n)
    tr.gap_seconds = 360.0
    return tr


def run(name: str, tr: TraceSet) -> tuple[float, float | None, bool]:
    r = DeadlineEngine(get_policy(name), tr, 0, 0, JOB).run()
    return r.cost_usd, r.finished_s, r.missed


def test_greedy_waits_then_runs_on_demand_to_the_end() -> None:
    # spot for the first 2 h, then from 4.5 h on; 4 h job, 6 h deadline, d = 0.1 h
    tr = tenth_hour_ticks([(0, 2.0), (4.5, 10)])
    cost, fin, missed = run("greedy", tr)
    # spot 0–2 h (1.9 h of progress); idle until R < C + 2d at 3.8 h; on-demand 3.8–6.0 h
    assert cost == pytest.approx(2.0 * 0.8 + 2.2 * 3.0)
    assert fin == pytest.approx(6.0 * H) and not missed


def test_uniform_progress_catches_up_early_and_returns_to_spot() -> None:
    tr = tenth_hour_ticks([(0, 2.0), (4.5, 10)])
    cost, fin, missed = run("uniform-progress", tr)
    # behind ep(t) = t·4/6 at 2.9 h → on-demand (ready 3.0); at 4.5 h cp = 3.4 ≥ ep(4.7) = 3.13:
    # back to spot (ready 4.6), 0.6 h left → done at 5.2 h
    assert cost == pytest.approx(2.0 * 0.8 + (4.5 - 2.9) * 3.0 + (5.2 - 4.5) * 0.8)
    assert fin == pytest.approx(5.2 * H) and not missed


def test_spotwise_without_a_forecast_behaves_like_uniform_progress() -> None:
    tr = tenth_hour_ticks([(0, 2.0), (4.5, 10)])
    assert run("spotwise", tr) == pytest.approx(run("uniform-progress", tr))


def test_on_demand_is_the_reference() -> None:
    tr = tenth_hour_ticks([(0, 10)])
    cost, fin, _ = run("on-demand", tr)
    assert cost == pytest.approx(4.1 * 3.0)
    assert fin == pytest.approx(4.1 * H)


@pytest.mark.parametrize("name", ["on-demand", "greedy", "uniform-progress", "spotwise"])
def test_no_deadline_is_missed_on_a_flickering_trace(name: str) -> None:
    rng = np.random.default_rng(7)
    spans = [(a, a + float(rng.uniform(0.05, 0.8))) for a in np.arange(0, 30, 1.0)]
    tr = tenth_hour_ticks(spans, hours=30)
    for start in range(0, 200, 25):
        r = DeadlineEngine(get_policy(name), tr, 0, start, JOB).run()
        assert not r.missed, (name, start)


def test_suite_is_deterministic_and_samples_per_zone() -> None:
    rng = np.random.default_rng(3)
    avail = {z: list((rng.uniform(size=400) < 0.7).astype(int)) for z in ("a", "b")}
    tr = make_traces(avail, {"a": 0.8, "b": 0.8})
    job = DeadlineJob(job_s=8 * H, deadline_s=10 * H, restart_s=0.2 * H)
    pairs = sample_starts(tr, job, 5, seed=1, from_fraction=0.0)
    assert len(pairs) == 10 and {z for z, _ in pairs} == {0, 1}
    a = run_deadline_suite(
        tr, job, ["greedy", "uniform-progress"], starts=5, seed=1, start_from=0.0
    )
    b = run_deadline_suite(
        tr, job, ["greedy", "uniform-progress"], starts=5, seed=1, start_from=0.0
    )
    a.pop("wall_seconds"), b.pop("wall_seconds")
    assert a == b
    assert all(p["misses"] == 0 for p in a["policies"].values())


@pytest.mark.parametrize(
    ("hours", "message"),
    [
        ((60, 52, 0.2), "--job-hours (60) must be at most --deadline-hours (52)"),
        ((48, 52, -3), "--restart-hours must be in [0, 4] (deadline - job), got -3"),
        ((48, 52, 4.5), "--restart-hours must be in [0, 4] (deadline - job), got 4.5"),
        ((0, 52, 0.2), "--job-hours must be > 0, got 0"),
    ],
)
def test_job_errors_name_the_flags_in_hours(
    hours: tuple[float, float, float], message: str
) -> None:
    job, deadline, restart = (h * H for h in hours)
    with pytest.raises(SpecError) as e:
        DeadlineJob(job_s=job, deadline_s=deadline, restart_s=restart)
    assert str(e.value) == message


def test_a_restart_that_exactly_fills_the_slack_is_allowed() -> None:
    assert DeadlineJob(job_s=51.8 * H, deadline_s=52 * H, restart_s=0.2 * H).restart_s > 0


def test_billing_names_every_valid_rule() -> None:
    assert billing_rule("paper") is PAPER_BILLING and billing_rule("aws").provider == "aws"
    with pytest.raises(SpecError) as e:
        billing_rule("aw")
    assert str(e.value) == (
        f"--billing: unknown 'aw' (did you mean 'aws'?); valid: paper, {', '.join(RULES)}"
    )


def test_start_from_is_checked_before_the_trace_length() -> None:
    tr = tenth_hour_ticks([(0, 10)])
    with pytest.raises(SpecError, match=r"^--start-from must be in \[0, 1\), got 1.5$"):
        sample_starts(tr, JOB, 3, seed=0, from_fraction=1.5)
    with pytest.raises(SpecError) as e:
        sample_starts(tr, JOB, 3, seed=0, from_fraction=0.9)
    assert str(e.value) == (
        "--traces: 1 h of trace after --start-from 0.9 is shorter than --deadline-hours (6); "
        "lower --start-from or --deadline-hours"
    )
