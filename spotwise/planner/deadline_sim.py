"""``spotwise simulate deadline``: every policy on the same random (zone, start) pairs of the
"Can't Be Late" (NSDI'24) setting, summarised per policy and per zone.

One run is :class:`~spotwise.planner.sim_deadline.DeadlineEngine` (the model and its sources
are described there); its names are importable from here too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spotwise.errors import SpecError
from spotwise.planner.policy import Policy
from spotwise.planner.sim_deadline import (
    PAPER_BILLING,
    DeadlineEngine,
    DeadlineJob,
    DeadlineRun,
    billing_rule,
    check_trace_prices,
    flat_spot_price,
)
from spotwise.planner.sim_suite import check_sampling
from spotwise.providers.billing import BillingRule

if TYPE_CHECKING:
    import numpy as np

    from spotwise.traces import TraceSet

__all__ = [
    "PAPER_BILLING",
    "DeadlineEngine",
    "DeadlineJob",
    "DeadlineRun",
    "billing_rule",
    "check_trace_prices",
    "flat_spot_price",
    "run_deadline_suite",
    "run_many",
    "sample_starts",
    "summarize",
]


def sample_starts(
    traces: TraceSet, job: DeadlineJob, starts: int, seed: int, from_fraction: float
) -> list[tuple[int, int]]:
    """``starts`` random (zone, start tick) pairs per zone, each leaving room for the deadline."""
    import numpy as np

    check_sampling(starts, seed, from_fraction)
    gap = float(traces.gap_seconds or 60.0)
    lo = int(from_fraction * traces.n_ticks)
    hi = traces.n_ticks - int(np.ceil(job.deadline_s / gap)) - 2
    if hi <= lo:
        hours = traces.duration_s * (1 - from_fraction) / 3600
        raise SpecError(
            f"--traces: {hours:.0f} h of trace after --start-from {from_fraction:g} is shorter "
            f"than --deadline-hours ({job.deadline_s / 3600:g}); lower --start-from or "
            "--deadline-hours"
        )
    rng = np.random.default_rng(seed)
    return [
        (z, int(s)) for z in range(len(traces.zones)) for s in rng.integers(lo, hi, size=starts)
    ]


def run_many(
    policy_factory: Callable[[], Policy],
    traces: TraceSet,
    pairs: list[tuple[int, int]],
    job: DeadlineJob,
    rule: BillingRule = PAPER_BILLING,
    risk: np.ndarray | None = None,
) -> list[DeadlineRun]:
    out = []
    for z, s in pairs:
        fn = (lambda i, z=z: float(risk[z, i])) if risk is not None else None  # type: ignore[misc]
        out.append(DeadlineEngine(policy_factory(), traces, z, s, job, rule, fn).run())
    return out


def summarize(runs: list[DeadlineRun]) -> dict[str, Any]:
    import numpy as np

    c = np.array([r.normalized_cost for r in runs])
    return {
        "runs": len(runs),
        "mean_cost": float(c.mean()),
        "p25_cost": float(np.percentile(c, 25)),
        "p50_cost": float(np.percentile(c, 50)),
        "p75_cost": float(np.percentile(c, 75)),
        "misses": int(sum(r.missed for r in runs)),
        "mean_spot_hours": float(np.mean([r.spot_hours for r in runs])),
        "mean_on_demand_hours": float(np.mean([r.on_demand_hours for r in runs])),
        "mean_changeovers": float(np.mean([r.changeovers for r in runs])),
    }


# ---- the suite: every policy on the same (zone, start) pairs -----------------------------

_SHARED: dict[str, Any] = {}  # what forked workers read (set before the pool starts)


def _chunk(args: tuple[str, list[tuple[int, int]]]) -> list[DeadlineRun]:
    from spotwise.planner.policy import get_policy

    name, pairs = args
    s = _SHARED
    return run_many(lambda: get_policy(name), s["traces"], pairs, s["job"], s["rule"], s["risk"])


def run_deadline_suite(
    traces: TraceSet,
    job: DeadlineJob,
    policies: list[str],
    *,
    starts: int = 300,
    seed: int = 0,
    start_from: float = 0.7,
    rule: BillingRule = PAPER_BILLING,
    risk: np.ndarray | None = None,
    risk_model: str = "none",
    workers: int = 1,
) -> dict[str, Any]:
    import time

    wall0 = time.monotonic()
    pairs = sample_starts(traces, job, starts, seed, start_from)
    check_trace_prices(traces, job)  # here, not in a worker: the error reaches the CLI whole
    flat = flat_spot_price(traces, job)
    _SHARED.update(traces=traces, job=job, rule=rule, risk=risk)
    n = max(1, min(workers, len(pairs)))
    chunks = [(name, pairs[k::n]) for name in policies for k in range(n)]
    if n > 1:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(n) as pool:
            parts = pool.map(_chunk, chunks)
    else:
        parts = [_chunk(c) for c in chunks]
    # each policy's runs back in the order of ``pairs`` (pair j ran in chunk j % n, at j // n):
    # its means then sum in one order whatever --workers is, and the JSON is the same to the bit
    by: dict[str, list[DeadlineRun]] = {}
    for name in policies:
        mine = [part for (of, _), part in zip(chunks, parts, strict=True) if of == name]
        by[name] = [mine[j % n][j // n] for j in range(len(pairs))]
    zones = sorted({r.zone for rs in by.values() for r in rs})
    return {
        "kind": "deadline",
        "traces": traces.source,
        "zones": zones,
        "job_hours": job.job_s / 3600,
        "deadline_hours": job.deadline_s / 3600,
        "restart_hours": job.restart_s / 3600,
        # spot $/h: the flat price of every zone and tick ("spot_prices": "flat"), or null
        # when each tick is billed at the trace's own price ("spot_prices": "trace")
        "spot_price": flat,
        "spot_prices": "flat" if flat is not None else "trace",
        "on_demand_price": job.on_demand_price,
        "billing": rule.provider,
        "starts_per_zone": starts,
        "seed": seed,
        "start_from": start_from,
        "revocation_model": risk_model,
        "policies": {name: summarize(rs) for name, rs in by.items()},
        "per_zone": {
            name: {z: summarize([r for r in rs if r.zone == z]) for z in zones}
            for name, rs in by.items()
        },
        "wall_seconds": round(time.monotonic() - wall0, 2),
    }
