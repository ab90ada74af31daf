"""What every model of the job spec (:mod:`spotwise.spec`) shares: the strict model config,
the validation context of a spec read back from the store (:data:`STORED`, :func:`stored`)
and the number field that takes no bool (:data:`Number`). Split from :mod:`spotwise.spec`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationInfo

from spotwise.spec_yaml import yaml_text


class _Strict(BaseModel):
    # allow_inf_nan: a bound, speed-up or budget of .inf / .nan means nothing (an infinite
    # budget is written by leaving it out)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


STORED = {"stored": True}  # validation context of a spec read back from the store


def stored(info: ValidationInfo) -> bool:
    """Whether a spec is being read back from the store (:func:`load_stored_spec`): checks
    added after the job was written must not make it unreadable, or `cancel` could not
    release what the job holds."""
    return bool(isinstance(info.context, dict) and info.context.get("stored"))


def _no_bool(v: Any, info: ValidationInfo) -> Any:
    """A number field takes no bool: pydantic read ``low: true`` as 1.0 (helper E, s20)."""
    if isinstance(v, bool) and not stored(info):
        raise ValueError(f"must be a number, got {yaml_text(v)}; write the number meant")
    return v


Number = Annotated[float, BeforeValidator(_no_bool)]  # a float field: never a bool
