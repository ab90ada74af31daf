"""A job spec's options checked against what reads them: each provider's options (the
providers' registry) and the policy's options (the policy registry). Done after the spec model
validates, not in it, so that a job stored by an older spotwise still loads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spotwise.errors import SpecError

if TYPE_CHECKING:
    from spotwise.spec import JobSpec


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
