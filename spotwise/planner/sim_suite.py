"""Run several policies on the same traces, curves and seeds, and summarise them.

What is shared, per seed, by every policy (this is what makes them comparable):

* the start time in the trace: uniform over ticks from ``start_from`` of the trace (default
  0.7: the part the shipped revocation model never saw in training) to the latest start that
  leaves ``window_s`` of trace;
* the sequence of trial configurations: ``trials`` curves drawn from the pool without
  replacement by ``random.Random(seed)`` — the simulator's stand-in for the search's
  ``ask()``: a recorded pool cannot answer arbitrary configurations, so every policy gets the
  same draws in the same order (the real loop asks scikit-optimize instead);
* the revocation forecast (``predict_series`` over the whole trace, computed once).
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from spotwise.errors import SpecError, check_choice, did_you_mean
from spotwise.planner.policy import Policy, get_policy, policy_names
from spotwise.planner.sim_curves import DEFAULT_STEP_SECONDS, CurvePool
from spotwise.planner.sim_summary import summarize
from spotwise.planner.simulator import Engine, RunResult, SimSettings

log = logging.getLogger("spotwise.simulate")

if TYPE_CHECKING:
    import numpy as np

    from spotwise.traces import TraceSet

TUNING_POLICIES = ("on-demand", "spot-greedy", "asha", "spottune", "spotwise")
DEADLINE_POLICIES = ("on-demand", "greedy", "uniform-progress", "spotwise")
TIME_SCALE = 120.0  # --time-scale's default: LCBench's CPU seconds as GPU trials of hours


def parse_policies(text: str | Sequence[str], valid: Sequence[str] | None = None) -> list[str]:
    """``--policy``'s names, each registered; with ``valid``, each one of those (a tuning
    policy in ``simulate deadline`` gave another policy's numbers under its own name)."""
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]
    if not names:
        raise SpecError(f"--policy: name at least one of {', '.join(valid or policy_names())}")
    known = {*policy_names(), *(valid or ())}
    for n in names:
        if n not in known:  # the option's error, not the registry's "policy: unknown ..."
            choices = list(valid or known)
            raise SpecError(
                f"--policy: unknown policy {n!r}{did_you_mean(n, choices)}; "
                f"valid: {', '.join(choices)}"
            )
        if valid is not None and n not in valid:
            raise SpecError(f"--policy: {n!r} is not a deadline policy; valid: {', '.join(valid)}")
    return list(dict.fromkeys(names))


def check(ok: bool, flag: str, rule: str, value: float) -> None:
    """The one-line ``FLAG must be RULE, got VALUE`` unless ``ok`` (and ``value`` is finite)."""
    if not ok or not math.isfinite(value):
        raise SpecError(f"{flag} must be {rule}, got {value:g}")


def check_sampling(starts: int, seed: int, start_from: float) -> None:
    check(starts >= 1, "--starts", ">= 1", starts)
    check(seed >= 0, "--seed", ">= 0", seed)
    check(0.0 <= start_from < 1.0, "--start-from", "in [0, 1)", start_from)


def check_prices(spot_price: float | None, on_demand_price: float | None) -> None:
    if spot_price is not None:
        check(spot_price > 0, "--spot-price", "> 0 ($/h)", spot_price)
    if on_demand_price is not None:
        check(on_demand_price > 0, "--on-demand-price", "> 0 ($/h)", on_demand_price)


def tuning_settings(
    *,
    parallel: int,
    time_scale: float | None,
    restart_s: float,
    checkpoint_s: float,
    max_cost_usd: float | None,
    deadline_hours: float | None,
) -> SimSettings:
    """The simulator's settings from ``spotwise simulate``'s flags, each checked by its name
    (``time_scale`` None: :data:`TIME_SCALE`)."""
    check(parallel >= 1, "--parallel", ">= 1", parallel)
    if time_scale is not None:
        check(time_scale > 0, "--time-scale", "> 0", time_scale)
    check(restart_s >= 0, "--restart-seconds", ">= 0", restart_s)
    check(checkpoint_s >= 0, "--checkpoint-seconds", ">= 0", checkpoint_s)
    if max_cost_usd is not None:
        check(max_cost_usd > 0, "--max-cost", "> 0 (USD)", max_cost_usd)
    if deadline_hours is not None:
        check(deadline_hours > 0, "--deadline-hours", "> 0", deadline_hours)
    return SimSettings(
        parallel=parallel,
        time_scale=TIME_SCALE if time_scale is None else time_scale,
        restart_overhead_s=restart_s,
        checkpoint_s=checkpoint_s,
        max_cost_usd=max_cost_usd,
        deadline_s=deadline_hours * 3600 if deadline_hours else None,
    )


def check_time_scale(pool: CurvePool, time_scale: float | None) -> None:
    """``--time-scale`` given for curves without recorded seconds: it would scale nothing."""
    if time_scale is not None and not pool.timed:
        raise SpecError(
            f"--time-scale {time_scale:g}: {pool.source} records no step times, so each step "
            f"lasts the {DEFAULT_STEP_SECONDS:g} s prior in market seconds and nothing is "
            "scaled; drop --time-scale, or add a seconds column"
        )


def step_time(pool: CurvePool, time_scale: float) -> str:
    """How long a step lasts, in words (the table and the JSON's ``step_time``)."""
    if not pool.timed:
        return pool.time_note
    return f"{pool.time_note} × {time_scale:g} (--time-scale)"


def policy_options(name: str, suite: Suite) -> dict[str, Any]:
    """The options the suite's flags set on policy ``name`` (--theta, --asha-min-steps)."""
    if name == "spottune":
        return {"theta": suite.theta}
    return {"min_steps": suite.asha_min_steps} if name == "asha" else {}


# ---- the revocation forecast -------------------------------------------------------------


@dataclass(frozen=True)
class Risk:
    p: np.ndarray | None  # (Z, T) P(revoked within the horizon); None: no forecast (p = 0)
    horizon_s: float
    model: str

    def at(self, tick: int) -> np.ndarray | None:
        return None if self.p is None else self.p[:, tick]


def check_revocation_model(name: str) -> None:
    from spotwise.predictors.revocation import FORECAST_NAMES

    check_choice("--revocation-model", name, FORECAST_NAMES)


def revocation_risk(
    traces: TraceSet, model: str = "pretrained", train_fraction: float = 0.7, from_tick: int = 0
) -> Risk:
    """Forecast every tick from ``from_tick`` on, once (earlier ticks get p = 1: never used).

    ``pretrained``: the shipped model; another registered name: that model fitted here on the
    first ``train_fraction`` of this trace; ``none``: no forecast. A model that cannot be fitted
    there, or gives a NaN p, is a SpecError naming ``--revocation-model`` and the fix (before
    any run: nothing is written).
    """
    import numpy as np

    from spotwise.errors import PredictorError
    from spotwise.predictors.revocation import get_revocation_model, load_pretrained

    check_revocation_model(model)
    if model == "none":
        return Risk(None, 3600.0, "none (p = 0 everywhere)")
    fix = "pass --revocation-model none (no forecast) or another model (base-rate, logistic)"
    if model == "pretrained":
        m = load_pretrained()
        desc = f"pretrained {m.name} (shipped)"
    else:
        m = get_revocation_model(model)
        cut = max(int(train_fraction * traces.n_ticks), 3)
        try:
            m.fit(traces.slice(0, cut), 3600.0)
        except PredictorError as e:
            raise SpecError(
                f"--revocation-model {model} cannot be fitted on the first {cut} ticks of the "
                f"trace ({e.message.removeprefix(f'{model}: ')}); {fix}"
            ) from None
        desc = f"{m.name} fitted on the first {train_fraction:.0%} of the trace"
        if cut > from_tick:
            desc += " (overlaps the simulated period: in-sample)"
    p = np.ones((len(traces.zones), traces.n_ticks))
    lo = min(max(from_tick, 0), traces.n_ticks - 1)
    try:  # a NaN p is never read as 0.5 or 0
        p[:, lo:] = m.predict_series(traces, np.arange(lo, traces.n_ticks))
    except PredictorError as e:
        raise SpecError(
            f"--revocation-model {model} gave no usable forecast "
            f"({e.message.removeprefix(f'{model}: ')}); {fix}"
        ) from None
    return Risk(np.round(p, 9), float(m.horizon_s), desc)


# ---- tuning ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Suite:
    policies: tuple[str, ...] = TUNING_POLICIES
    trials: int = 100
    seeds: int = 3
    seed: int = 0
    theta: float = 0.3
    settings: SimSettings = field(default_factory=SimSettings)
    start_from: float = 0.7
    window_s: float = 7 * 86400.0
    asha_min_steps: int = 1  # asha's first rung (its default: a trial's first report)

    def __post_init__(self) -> None:
        check(self.trials >= 1, "--trials", ">= 1", self.trials)
        check(self.seeds >= 1, "--seeds", ">= 1", self.seeds)
        check(0.0 < self.theta < 1.0, "--theta", "in (0, 1)", self.theta)
        check(0.0 <= self.start_from < 1.0, "--start-from", "in [0, 1)", self.start_from)
        check(self.window_s > 0, "--window-hours", "> 0", self.window_s / 3600)
        check(self.asha_min_steps >= 1, "--asha-min-steps", ">= 1", self.asha_min_steps)


def draw(traces: TraceSet, pool: CurvePool, suite: Suite, seed: int) -> tuple[int, list[Any]]:
    """The start tick and curve sequence of one seed (identical for every policy)."""
    rng = random.Random(seed)
    gap = float(traces.gap_seconds or 60.0)
    lo = int(suite.start_from * traces.n_ticks)
    hi = traces.n_ticks - int(suite.window_s / gap) - 1
    if hi < lo:
        hours = traces.duration_s * (1 - suite.start_from) / 3600
        raise SpecError(
            f"--traces: {hours:.0f} h of trace after --start-from {suite.start_from} is shorter "
            f"than the {suite.window_s / 3600:.0f} h window a run may need; lower --start-from "
            "or --window-hours"
        )
    start = rng.randint(lo, hi)
    curves = list(pool.curves)
    return start, rng.sample(curves, suite.trials)  # run_suite checked there are enough


def run_suite(
    traces: TraceSet,
    pool: CurvePool,
    suite: Suite,
    risk: Risk,
    *,
    spot_price: float | None = None,
    on_demand_price: float | None = None,
    billing: str = "aws",
    on_run: Callable[[RunResult], None] | None = None,
    policy_factory: Callable[[str], Policy] | None = None,
    workers: int = 1,
) -> dict[str, Any]:
    from spotwise.providers.billing import rule_for
    from spotwise.providers.replay import ReplayMarket

    wall0 = time.monotonic()
    full, pool = pool, pool.uniform()
    if len(pool) < len(full):  # a job has one step budget: curves of other lengths cannot run
        log.warning(
            "--curves: %d of %d curves left out: not %d steps long like the rest",
            len(full) - len(pool),
            len(full),
            pool.common_length(),
        )
    if suite.trials > len(pool):
        of = f" of {pool.common_length()} steps" if len(pool) < len(full) else ""
        raise SpecError(
            f"--trials {suite.trials} is more than the {len(pool)} curves{of} in --curves: each "
            "trial replays one recorded configuration, drawn without replacement; lower "
            "--trials or give more curves"
        )
    market = ReplayMarket(
        traces, provider=billing, spot_price=spot_price, on_demand_price=on_demand_price
    )
    rule = rule_for(billing)
    # the prior of a pool without recorded time is market seconds already: not scaled
    scale = suite.settings.time_scale if pool.timed else 1.0
    settings = replace(
        suite.settings, direction=pool.direction, horizon_s=suite.window_s, time_scale=scale
    )
    make = policy_factory or (lambda n: get_policy(n, **policy_options(n, suite)))
    names = list(suite.policies)
    seeds = [suite.seed + k for k in range(suite.seeds)]
    draws = {seed: draw(traces, pool, suite, seed) for seed in seeds}
    starts = [float(traces.times[draws[seed][0]]) for seed in seeds]
    every = names + ([] if "on-demand" in names else ["on-demand"])
    tasks = [(seed, name) for seed in seeds for name in every]
    _SHARED.update(
        market=market,
        rule=rule,
        settings=settings,
        make=make,
        draws=draws,
        risk=risk,
        traces=traces,
    )
    n = max(1, min(workers, len(tasks)))
    if n > 1:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(n) as procs:
            results = procs.map(_one, tasks, chunksize=1)
    else:
        results = [_one(t) for t in tasks]
    runs: dict[str, list[RunResult]] = {name: [] for name in names}
    reference: list[RunResult] = []
    for (_, name), r in zip(tasks, results, strict=True):
        runs.get(name, reference).append(r)
        if on_run is not None:
            on_run(r)
    od = runs.get("on-demand", reference)
    od_cost = {r.seed: r.cost_usd for r in od}
    summary = {n: summarize(rs, od_cost) for n, rs in runs.items()}
    return {
        "kind": "tuning",
        "traces": traces.source,
        "zones": list(traces.zones),
        "instance_type": market.instance_type,
        "on_demand_price": market.on_demand_price,
        "billing": billing,
        "curves": pool.source,
        "curve_count": len(pool),
        "metric": pool.metric,
        "direction": pool.direction,
        "step_time": step_time(pool, scale),
        "revocation_model": risk.model,
        "settings": {
            **asdict(settings),
            "trials": suite.trials,
            "theta": suite.theta,
            "asha_min_steps": suite.asha_min_steps,
            "start_from": suite.start_from,
        },
        "seeds": seeds,
        "starts": [_iso(s) for s in starts],
        "policies": summary,
        "runs": {n: [r.as_dict() for r in rs] for n, rs in runs.items()},
        "wall_seconds": round(time.monotonic() - wall0, 2),
    }


_SHARED: dict[str, Any] = {}  # what forked workers read (set before the pool starts)


def _one(task: tuple[int, str]) -> RunResult:
    """One (seed, policy) run. BLAS runs single-threaded: curve fits then give the same numbers
    on any machine (multi-threaded reductions change the last bits, and a top-k cut can flip)."""
    from threadpoolctl import threadpool_limits

    seed, name = task
    s = _SHARED
    start_tick, seq = s["draws"][seed]
    risk: Risk = s["risk"]
    with threadpool_limits(limits=1):
        return _run(s, name, seed, start_tick, seq, risk)


def _run(
    s: dict[str, Any], name: str, seed: int, start_tick: int, seq: Any, risk: Risk
) -> RunResult:
    engine = Engine(
        s["make"](name),
        s["market"],
        s["rule"],
        seq,
        s["settings"],
        float(s["traces"].times[start_tick]),
        risk=risk.at,
        horizon_s=risk.horizon_s,
    )
    r = engine.run()
    r.seed = seed
    return r


def _iso(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
