"""The policy interface: a pure function of (frozen view, event) → actions.

A policy never touches the store, the clock, a provider or the terminal (like Optuna's
``BasePruner.prune``). The orchestrator (real jobs) and the simulator (virtual clock, replayed
traces, recorded curves) build the same :class:`PlannerView`, feed the same events and execute
the returned actions, so a policy measured in simulation is the one that runs for real.

All times are on the *market clock* (epoch seconds of the market being traded; for the replay
market that is trace time, for real clouds it is wall time).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

from spotwise.errors import SpecError, did_you_mean
from spotwise.providers.base import Market, Offer


class Phase(enum.StrEnum):
    """Where a trial is, as the planner sees it."""

    QUEUED = "queued"  # created, never launched
    RUNNING = "running"  # has an instance
    WAITING = "waiting"  # lost or left its instance; needs a relaunch from its checkpoint
    DONE = "done"  # finished, stopped early, failed or cancelled

    def is_terminal(self) -> bool:
        return self is Phase.DONE


@dataclass(frozen=True)
class OfferView:
    offer: Offer
    p_revoke: float = 0.0  # probability of revocation within ``horizon_s`` from now
    horizon_s: float = 3600.0
    # the billing rule of the offer's provider (a job may trade on several clouds); None:
    # the view's (single-market) values apply; read them through PlannerView.lead_of/refund_of
    notice_lead_s: float | None = None
    free_if_revoked_within_s: float | None = None
    minimum_s: float = 0.0  # the shortest life its provider bills (AWS: 60 s); 0: none

    @property
    def key(self) -> str:
        return self.offer.key

    @property
    def available(self) -> bool:
        return self.offer.available

    @property
    def price(self) -> float:
        return self.offer.price_per_hour

    @property
    def is_spot(self) -> bool:
        return self.offer.market is Market.SPOT


@dataclass(frozen=True)
class TrialView:
    trial_id: str
    number: int
    phase: Phase
    step: int = 0
    steps_total: int = 1
    curve: tuple[tuple[int, float], ...] = ()  # (step, metric), newest report per step
    checkpoint_step: int = 0
    checkpoint_every: int = 5
    instance_id: str | None = None
    offer_key: str | None = None
    launched_at: float | None = None  # market time the current instance started
    notice_deadline: float | None = None  # market time the current instance will be taken
    seconds_per_step: float = 60.0  # market seconds per step on the current/expected offer
    cost_usd: float = 0.0
    revocations: int = 0
    stopping: bool = False  # asked to checkpoint and leave its instance
    params: Mapping[str, object] = field(default_factory=dict)
    # its step when this run of the job began: > 0 only in a resumed job (`spotwise resume`),
    # whose earlier run did those steps (a deadline counts from the resume, so does progress)
    start_step: int = 0
    # a resumed job's trial queued again: every report of its earlier run, past its checkpoint
    # too (``curve`` is cut back at the checkpoint); what the policies judged it on then
    reported: tuple[tuple[int, float], ...] = ()
    # its estimated market seconds per step on each instance type offered (measured, rescaled
    # by hardware, or the hardware prior: :mod:`spotwise.planner.speeds`); empty: every offer
    # runs at ``seconds_per_step`` (a view built by hand, the simulator's one-type market)
    step_seconds: tuple[tuple[str, float], ...] = ()
    done_at: float | None = None  # market time its last step was seen on its current instance
    # whether its current instance has reported a step yet (None: unknown, a view built by hand)
    reported_on_life: bool | None = None

    def seconds_on(self, offer: OfferView | None) -> float:
        """Market seconds per step on ``offer``'s instance type (``seconds_per_step`` when the
        view has no estimate for it, or for no offer)."""
        if offer is not None:
            for itype, s in self.step_seconds:
                if itype == offer.offer.instance_type:
                    return s
        return self.seconds_per_step

    @property
    def remaining_steps(self) -> int:
        return max(self.steps_total - self.step, 0)

    @property
    def last_metric(self) -> float | None:
        return self.curve[-1][1] if self.curve else None


@dataclass(frozen=True)
class PlannerView:
    now: float
    offers: tuple[OfferView, ...]
    trials: tuple[TrialView, ...]
    direction: str = "maximize"
    parallel: int = 1
    trials_total: int = 1
    spent_usd: float = 0.0
    max_cost_usd: float | None = None
    started_at: float = 0.0
    deadline: float | None = None  # market time by which every trial must be done
    restart_overhead_s: float = 60.0  # market seconds from launch to the first new step
    # billing rule of the market; with several providers the most conservative of theirs
    # (the shortest notice, the shortest refund window): each offer carries its own
    notice_lead_s: float = 120.0
    free_if_revoked_within_s: float = 0.0
    # optional, added for the cost-aware policies (defaults keep older callers valid):
    tick_s: float = 60.0  # longest market time between two decide() calls (guards use it)
    # market seconds one checkpoint write takes; the orchestrator's: the slowest of the job's
    # newest timed saves (:func:`~spotwise.planner.runstate.checkpoint_seconds`), 30 until one
    # is timed; the simulator's: its setting
    checkpoint_s: float = 30.0
    # the longest checkpoint interval a policy may set (a job's spec: checkpoint.every); None:
    # up to the trial's length (the simulator: notices are always delivered, nothing crashes)
    checkpoint_every_max: int | None = None
    # False while no trial of the job has timed a step yet: every ``seconds_per_step`` is then a
    # guess, and with a budget the policy admits one trial at a time until one is measured
    # (:func:`~spotwise.planner.policies._common.free_slots`). The orchestrator and the
    # simulator set it; a view built by hand keeps ``seconds_per_step`` as measured.
    speed_measured: bool = True
    # market seconds a life is billed past its trial's last step (its exit, the orchestrator
    # seeing it, the terminate): the orchestrator's is measured (runstate.wind_down_seconds)
    wind_down_s: float = 0.0  # the simulator's: 0, its lives end at their last step

    def trial(self, trial_id: str) -> TrialView:
        for t in self.trials:
            if t.trial_id == trial_id:
                return t
        raise KeyError(trial_id)

    def offer(self, key: str) -> OfferView | None:
        for o in self.offers:
            if o.key == key:
                return o
        return None

    def lead_of(self, o: OfferView | None) -> float:
        """Interruption notice lead (market seconds) of the provider selling ``o``."""
        lead = o.notice_lead_s if o is not None else None
        return self.notice_lead_s if lead is None else lead

    def refund_of(self, o: OfferView | None) -> float:
        """Seconds within which a revocation by ``o``'s provider is not billed."""
        refund = o.free_if_revoked_within_s if o is not None else None
        return self.free_if_revoked_within_s if refund is None else refund

    def better(self, a: float, b: float) -> bool:
        """Whether metric ``a`` is strictly better than ``b`` in the job's direction."""
        return a > b if self.direction == "maximize" else a < b


# ---- events -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Tick:
    now: float


@dataclass(frozen=True)
class TrialAdded:
    trial_id: str


@dataclass(frozen=True)
class Progress:
    trial_id: str
    step: int
    metric: float | None


@dataclass(frozen=True)
class NoticeReceived:
    trial_id: str
    instance_id: str
    deadline: float


@dataclass(frozen=True)
class InstanceLost:
    """The provider took the instance (revocation); the trial is WAITING now."""

    trial_id: str
    instance_id: str


@dataclass(frozen=True)
class TrialExited:
    """The trial process left its instance: finished all steps, or stopped as asked."""

    trial_id: str
    instance_id: str
    finished: bool


Event: TypeAlias = Tick | TrialAdded | Progress | NoticeReceived | InstanceLost | TrialExited


# ---- actions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    trial_id: str
    offer_key: str


@dataclass(frozen=True)
class Checkpoint:
    """Ask the trial to checkpoint now and leave its instance (it becomes WAITING)."""

    trial_id: str
    reason: str = "notice"


#: The reason of a StopEarly for a trial that reported NaN or inf (its metric is None).
INVALID_METRIC = "invalid metric"


@dataclass(frozen=True)
class StopEarly:
    trial_id: str
    reason: str
    # a prediction of the trial's final metric (EarlyCurve's); None for a stop on an observed
    # value (an ASHA rung, a budget, a deadline): the trial's last reported metric then stands
    # for it, and `spotwise trials` shows no prediction
    predicted_final: float | None = None


@dataclass(frozen=True)
class SetCheckpointEvery:
    trial_id: str
    every: int


Action: TypeAlias = Launch | Checkpoint | StopEarly | SetCheckpointEvery


class Policy(Protocol):
    name: str

    def decide(self, view: PlannerView, event: Event) -> list[Action]: ...


# ---- registry ---------------------------------------------------------------------------

PolicyFactory = Callable[..., Policy]
_POLICIES: dict[str, PolicyFactory] = {}


def register_policy(name: str) -> Callable[[PolicyFactory], PolicyFactory]:
    def deco(factory: PolicyFactory) -> PolicyFactory:
        _POLICIES[name] = factory
        return factory

    return deco


def policy_names() -> list[str]:
    _load_builtin()
    return sorted(_POLICIES)


def get_policy(name: str, **options: object) -> Policy:
    """A policy by name; an unknown name lists the valid ones. ``options`` go to its factory
    as they are (code's own); a user's go through :func:`make_policy`."""
    return _factory(name)(**options)


def _factory(name: str) -> PolicyFactory:
    _load_builtin()
    try:
        return _POLICIES[name]
    except KeyError:
        raise SpecError(
            f"policy: unknown policy {name!r}{did_you_mean(name, list(_POLICIES))}; "
            f"valid: {', '.join(sorted(_POLICIES))}"
        ) from None


#: The constructor keywords a user may set (a spec's ``policy_options``), per policy: the knobs
#: of its early stopping, each range-checked by the constructor. Left out: the curve
#: predictors (objects, not values) and spotwise's ``margin`` and ``od_exit_factor`` (constants
#: chosen on held-out seeds, docs/simulation.md, which its constructor does not check). Their
#: types are read from the constructor (:func:`user_options`).
USER_OPTIONS: dict[str, tuple[str, ...]] = {
    "asha": ("eta", "min_steps"),
    "spottune": ("theta", "keep_top"),
    "spotwise": ("epsilon", "check_at"),
}


def user_options(name: str) -> dict[str, Any]:
    """The options a user may set on policy ``name``: option → the type its constructor
    declares (``int``, ``float``, ``tuple[float, ...]``), in :data:`USER_OPTIONS`' order."""
    import typing

    factory = _factory(name)
    init = factory.__init__ if isinstance(factory, type) else factory  # type: ignore[misc]
    hints = typing.get_type_hints(init)
    return {k: hints[k] for k in USER_OPTIONS.get(name, ())}


def make_policy(
    name: str,
    options: Mapping[str, object] | None = None,
    *,
    where: str = "spec field 'policy_options'",
    chosen_by: str = "",
) -> Policy:
    """Policy ``name`` built with options a user set: an unknown option names the valid ones,
    a value of the wrong type or one its constructor refuses is one :class:`SpecError` line
    starting with ``where``; ``chosen_by`` says how the policy was picked (``--policy``)."""
    factory, valid = _factory(name), user_options(name)
    who = f"{name}{f' ({chosen_by})' if chosen_by else ''}"
    kwargs: dict[str, object] = {}
    for key, value in (options or {}).items():
        if key not in valid:
            if not valid:
                given = ", ".join(map(str, options or {}))
                raise SpecError(f"{where}: {who} takes no options, got {given}")
            close = did_you_mean(str(key), list(valid))
            raise SpecError(
                f"{where}: {who} has no option {key!r}{close}; valid: {', '.join(valid)}"
            )
        kwargs[key] = _typed(value, valid[key], f"{where}: {who}: {key}")
    try:
        return factory(**kwargs)
    except ValueError as e:
        raise SpecError(f"{where}: {who}: {e}") from None


def _typed(value: object, hint: object, what: str) -> object:
    """``value`` as the constructor's ``hint`` takes it (a YAML list for a tuple), or a
    :class:`SpecError` naming ``what``; an int is never a bool, a float is finite."""
    import math
    import typing

    def number(v: object) -> typing.TypeGuard[int | float]:
        return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)

    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint is float and number(value):
        return float(value)
    if (
        typing.get_origin(hint) is tuple
        and isinstance(value, list | tuple)
        and all(number(v) for v in value)
    ):
        return tuple(float(v) for v in value)
    kinds: dict[object, str] = {int: "an integer", float: "a finite number"}
    kind = kinds.get(hint, "a list of finite numbers")
    raise SpecError(f"{what} must be {kind}, got {_as_yaml(value)}")


def _as_yaml(x: object) -> str:
    """A value as YAML writes it (true, null, "3", .nan), not as Python does."""
    import json
    import math

    if isinstance(x, float) and not math.isfinite(x):
        return ".nan" if x != x else ("-.inf" if x < 0 else ".inf")
    try:
        return json.dumps(x)
    except (TypeError, ValueError):
        return type(x).__name__


def _load_builtin() -> None:
    # importing the package registers every built-in policy; no importlib-by-string dispatch
    import spotwise.planner.policies  # noqa: F401
