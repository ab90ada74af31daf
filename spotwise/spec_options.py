"""A job spec's checks that read more than its fields, done after the spec model validates (not
in it, so that a job stored by an older spotwise still loads): ``env`` names and values (and
``command`` arguments) the OS can pass on, ``budget.start_timeout_minutes`` above 0,
each provider's options (the
providers' registry), the policy's name and options (the policy registry), the size of a
finite search space and, for the et/rf optimizers, its real ranges within float32; and
:func:`cost_cap_note`, the warning for a cloud job with no cost cap.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from spotwise.errors import SpecError, did_you_mean

if TYPE_CHECKING:
    from collections.abc import Mapping

    from spotwise.spec import CategoricalParam, IntParam, JobSpec, RealParam


def check_parsed(spec: JobSpec, source: str) -> None:
    """The checks of a spec that passed its model, in this order (SpecError naming
    ``source``)."""
    _check_env(spec, source)
    _check_start_timeout(spec, source)
    _check_options(spec, source)
    _check_policy(spec, source)
    _check_policy_options(spec, source)
    _check_space_size(spec, source)
    _check_float32_ranges(spec, source)


def _check_env(spec: JobSpec, source: str) -> None:
    """``env`` names and values the OS can set, and a ``command`` it can pass: a name that is
    empty or holds '=', or a NUL byte anywhere, made every trial fail to start (locally an
    internal error, exit 70; on a cloud the agent died without reporting: review-at AT4).
    Checked here, not in the model: a job recorded before this check must still load."""
    for key, value in spec.env.items():
        shown = key.replace("\0", "\\0").replace("\r", "\\r").replace("\n", "\\n")
        if not key or "=" in key or "\0" in key:
            raise SpecError(
                f"{source}: spec field 'env.{shown}': an environment variable's name must be "
                "non-empty, without '=' or a NUL byte; rename it (e.g. MY_VAR)"
            )
        if "\0" in value:
            raise SpecError(
                f"{source}: spec field 'env.{shown}': a value cannot hold a NUL byte (\\0); "
                "remove it"
            )
    for i, arg in enumerate(spec.command):
        if "\0" in arg:
            raise SpecError(
                f"{source}: spec field 'command.{i}': an argument cannot hold a NUL byte "
                "(\\0); remove it"
            )


def _check_start_timeout(spec: JobSpec, source: str) -> None:
    """``budget.start_timeout_minutes`` (:mod:`spotwise.planner.no_word`) is a number of
    minutes above 0: pydantic's own bounds said "Input should be greater than 0", or "leave it
    out for no limit" of an infinite one, where leaving it out sets the default."""
    from spotwise.spec_yaml import yaml_text

    v = spec.budget.start_timeout_minutes
    if v is not None and not 0 < v < math.inf:
        shown = f"{v:g}" if math.isfinite(v) else yaml_text(v)
        raise SpecError(
            f"{source}: spec field 'budget.start_timeout_minutes': must be a number of minutes "
            f"above 0, got {shown}; set how long an instance may run without a word from its "
            "trial (e.g. 45), or leave it out for the default (30, or 3x the start-up the job "
            "measured)"
        )


FLOAT32_MAX = 3.4028234663852886e38  # a linear real range's bound (et/rf cast points to it)


def _check_float32_ranges(spec: JobSpec, source: str) -> None:
    """The et and rf optimizers' trees read points as float32: a linear real range past its
    largest value made the second trial's ``tell`` fail mid-job (review-aq AQ8; a log range is
    read as its log10, and gp reads float64)."""
    if spec.search.optimizer not in ("et", "rf"):
        return
    for name, p in spec.search_space.items():
        if getattr(p, "type", None) != "real" or getattr(p, "log", False):
            continue
        for end in ("low", "high"):
            if abs(getattr(p, end)) > FLOAT32_MAX:
                raise SpecError(
                    f"{source}: spec field 'search': optimizer {spec.search.optimizer} reads "
                    f"points as float32: search_space.{name}.{end} must be within "
                    f"±{FLOAT32_MAX:.4g}, got {getattr(p, end):g}; narrow the range, set log: "
                    "true, or use optimizer: gp"
                )


def _check_policy(spec: JobSpec, source: str) -> None:
    """An unknown ``policy`` is refused when the spec is read, naming the file (before: only
    at `tune`, as ``policy: unknown policy ...``; review-ak M5)."""
    from spotwise.planner.policy import policy_names

    names = policy_names()
    if spec.policy not in names:
        raise SpecError(
            f"{source}: spec field 'policy': unknown policy {spec.policy!r}"
            f"{did_you_mean(spec.policy, names)}; valid: {', '.join(names)}"
        )


def _check_policy_options(spec: JobSpec, source: str) -> None:
    """``policy_options`` against those ``policy`` takes (names, types, values); `tune
    --policy OTHER` checks them against OTHER."""
    if not spec.policy_options:
        return
    from spotwise.planner.policy import make_policy

    try:
        make_policy(spec.policy, spec.policy_options)
    except SpecError as e:
        raise SpecError(f"{source}: {e.message}", hint=e.hint) from None
    check_rungs(spec.policy, spec, source)


def check_rungs(policy: str, spec: JobSpec, source: str) -> None:
    """When ``policy`` is asha (the spec's, or `tune --policy asha`'s, which takes the spec's
    ``policy_options``): asha judges a trial at its rungs, ``min_steps · eta^k`` below
    ``steps``; with ``min_steps >= steps`` there is none, and asha would stop no trial,
    silently (review-ak M7). Refused rather than warned: the job would run every trial to the
    end, paying for what the policy named was chosen to stop."""
    min_steps, steps = spec.policy_options.get("min_steps"), spec.steps
    if policy == "asha" and isinstance(min_steps, int) and min_steps >= steps:
        fix = (
            f"set min_steps below {steps}, or leave it out (the first rung is then step 1)"
            if steps > 1
            else "with steps: 1 no trial can be stopped early: raise steps, or pick another policy"
        )
        raise SpecError(
            f"{source}: spec field 'policy_options.min_steps': asha's first rung ({min_steps}) "
            f"is not before the last step (steps: {steps}), so asha would stop no trial; {fix}"
        )


def _check_options(spec: JobSpec, source: str) -> None:
    """Each provider's options against those it reads (unknown names, bad values). Done here
    rather than in the model: a job stored by an older spotwise, read back by `cancel`, must
    still load, whatever options it named."""
    from spotwise.providers.registry import check_options

    for i, p in enumerate(spec.providers):
        try:
            check_options(p.name, p.options, field=f"providers.{i}.options")
        except SpecError as e:
            raise SpecError(f"{source}: {e.message}", hint=e.hint) from None


def _check_space_size(spec: JobSpec, source: str) -> None:
    """More trials than a finite space has points would run the same configuration twice,
    billed twice for the same result. Checked here, not in the model: a job recorded before
    this check must still load."""
    from spotwise.spec import IntParam

    counts = space_points(spec.search_space)
    size = math.prod(counts.values()) if counts is not None else 0
    if counts is not None and spec.trials > size:
        kinds = {
            n: "value" if isinstance(spec.search_space[n], IntParam) else "choice" for n in counts
        }
        parts = " × ".join(f"{n}: {c} {kinds[n]}{'s' if c > 1 else ''}" for n, c in counts.items())
        raise SpecError(
            f"{source}: spec field 'trials': {spec.trials} but the search space has only {size} "
            f"distinct point{'s' if size > 1 else ''} ({parts}); set trials <= {size}, or widen "
            "the space"
        )


def space_points(
    space: Mapping[str, RealParam | IntParam | CategoricalParam],
) -> dict[str, int] | None:
    """How many values each parameter takes when every one is int or categorical (the space
    then has their product of distinct points); None when one is real."""
    from spotwise.spec import IntParam, RealParam

    counts: dict[str, int] = {}
    for name, p in space.items():
        if isinstance(p, RealParam):
            return None
        counts[name] = p.high - p.low + 1 if isinstance(p, IntParam) else len(p.choices)
    return counts


def cost_cap_note(spec: JobSpec) -> str:
    """A warning for a job on a cloud with no ``budget.max_cost_usd``: nothing stops its spend
    (review-ak M6); "" for a local job (replayed dollars) or one with a cap."""
    clouds = sorted({p.name for p in spec.providers if p.name != "local"})
    if not clouds or spec.budget.max_cost_usd is not None:
        return ""
    return (
        f"the spec sets no budget.max_cost_usd: nothing caps what this job spends on "
        f"{' and '.join(clouds)}; add budget: {{max_cost_usd: N}} to stop it at N dollars"
    )
