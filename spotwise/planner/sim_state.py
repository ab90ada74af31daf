"""State and results of the tuning simulation (see :mod:`spotwise.planner.simulator`)."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field
from dataclasses import fields as dataclass_fields
from typing import TYPE_CHECKING, Any, TypeVar

from spotwise.planner.policy import Phase, TrialView
from spotwise.planner.sim_curves import RecordedCurve
from spotwise.providers.base import Offer

if TYPE_CHECKING:
    from spotwise.planner.simulator import Engine

_V = TypeVar("_V")


@dataclass(frozen=True)
class SimSettings:
    parallel: int = 8
    direction: str = "maximize"
    time_scale: float = 120.0  # market seconds per recorded second
    restart_overhead_s: float = 180.0
    checkpoint_s: float = 20.0
    checkpoint_every: int = 5
    max_cost_usd: float | None = None
    deadline_s: float | None = None  # after the start
    horizon_s: float = 14 * 86400.0  # give up (``unfinished``) after this much market time

    def __post_init__(self) -> None:
        if self.parallel < 1:
            raise ValueError(f"parallel must be >= 1, got {self.parallel=}")
        if self.time_scale <= 0:
            raise ValueError(f"time_scale must be > 0, got {self.time_scale=}")
        if self.checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be >= 1, got {self.checkpoint_every=}")


@dataclass
class RunResult:
    policy: str
    seed: int
    start: float
    cost_usd: float
    makespan_hours: float
    returned: str | None  # the best completed trial; None when none completed
    returned_final: float | None
    best_final: float
    regret: float | None  # None (JSON null) when no trial completed: the job returned nothing
    revocations: int
    lost_hours: float
    overhead_hours: float
    early_stopped: int
    completed: int
    stopped_by: dict[str, int]
    budget_stopped: int  # trials stopped by the budget (``max_cost_usd``)
    deadline_stopped: int  # trials stopped by the deadline
    steps_run: int
    spot_hours: float
    on_demand_hours: float
    refunded_hours: (
        float  # instance hours not billed (revoked by the provider in the refund window)
    )
    budget_exceeded: bool
    deadline_missed: bool
    unfinished: bool
    decisions: int

    def as_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


@dataclass
class Life:
    lid: int
    offer: Offer
    launched_at: float
    ready_at: float
    start_step: int
    revoke_at: float | None
    token: int = 0  # bumps to cancel the scheduled step of this life
    noticed: bool = False
    leaving: bool = False
    ckpt_until: float = 0.0  # a periodic checkpoint is being written until then
    ckpt_step: int = 0
    step_end: dict[int, float] = field(default_factory=dict)


@dataclass
class TrialState:
    tid: str
    number: int
    curve: RecordedCurve
    checkpoint_every: int
    phase: Phase = Phase.QUEUED
    step: int = 0
    reported: dict[int, float] = field(default_factory=dict)
    checkpoint_step: int = 0
    life: Life | None = None
    cost: float = 0.0
    revocations: int = 0
    lost_s: float = 0.0
    overhead_s: float = 0.0
    run_s: float = 0.0  # market s in steps and checkpoint writes (observed seconds per step)
    steps_run: int = 0
    stopping: bool = False
    completed: bool = False
    stop_reason: str | None = None
    lives: int = 0  # instances launched for it
    pending_every: int | None = None
    view: TrialView | None = None


def make_result(e: Engine, unfinished: bool) -> RunResult:
    """The run's numbers; the returned trial is the best *completed* one (by its observed final),
    as ``spotwise tune`` reports; regret uses the curves' true finals. A run that completed no
    trial returns nothing: its ``returned`` and ``regret`` are None, never a number that could
    rank it best."""
    better = (lambda a, b: a > b) if e.s.direction == "maximize" else (lambda a, b: a < b)
    best_final = e.curves[0].final
    for c in e.curves:
        if better(c.final, best_final):
            best_final = c.final
    done = [t for t in e.trials if t.completed]
    returned: TrialState | None = None
    for t in done:
        v = t.reported[max(t.reported)]
        if returned is None or better(v, returned.reported[max(returned.reported)]):
            returned = t
    ret_final = returned.curve.final if returned else None
    regret: float | None = None
    if ret_final is not None:
        regret = (
            (best_final - ret_final) if e.s.direction == "maximize" else (ret_final - best_final)
        )
    stopped: dict[str, int] = {}
    for t in e.trials:
        if t.stop_reason:
            stopped[t.stop_reason] = stopped.get(t.stop_reason, 0) + 1
    early = sum(n for r, n in stopped.items() if r not in ("budget", "deadline", "unfinished"))
    cap = e.s.max_cost_usd
    return RunResult(
        policy=e.policy.name,
        seed=-1,
        start=e.start,
        cost_usd=e.billed,
        makespan_hours=(e.last_end - e.start) / 3600.0,
        returned=returned.curve.curve_id if returned else None,
        returned_final=ret_final,
        best_final=best_final,
        regret=regret,
        revocations=sum(t.revocations for t in e.trials),
        lost_hours=sum(t.lost_s for t in e.trials) / 3600.0,
        overhead_hours=sum(t.overhead_s for t in e.trials) / 3600.0,
        early_stopped=early,
        completed=len(done),
        stopped_by=stopped,
        budget_stopped=stopped.get("budget", 0),
        deadline_stopped=stopped.get("deadline", 0),
        steps_run=sum(t.steps_run for t in e.trials),
        spot_hours=e.spot_s / 3600.0,
        on_demand_hours=e.od_s / 3600.0,
        refunded_hours=e.refunded_s / 3600.0,
        budget_exceeded=cap is not None and e.billed > cap + 1e-9,
        deadline_missed=e.deadline is not None and e.last_end > e.deadline + 1e-6,
        unfinished=unfinished,
        decisions=e.decisions,
    )


_TEMPLATES: dict[type, dict[str, Any]] = {}


def frozen(cls: type[_V], **fields: Any) -> _V:
    """Build a frozen view without running its ``__init__`` (a hot path: one view per event).

    The result equals ``cls(**fields)``: every field starts from the class defaults. Only for
    the plain frozen dataclasses of :mod:`spotwise.planner.policy` (no ``__post_init__``).
    """
    base = _TEMPLATES.get(cls)
    if base is None:
        base = {}
        for f in dataclass_fields(cls):  # type: ignore[arg-type]
            if f.default is not MISSING:
                base[f.name] = f.default
            elif f.default_factory is not MISSING:  # shared, and never mutated: views are frozen
                base[f.name] = f.default_factory()
        _TEMPLATES[cls] = base
    obj = object.__new__(cls)
    obj.__dict__.update(base)
    obj.__dict__.update(fields)
    return obj


def iid(life: Life) -> str:
    return f"i{life.lid}"
