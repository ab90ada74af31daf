"""The job spec: YAML validated with pydantic; every error names the field and the fix.

A minimal spec::

    name: digits-mlp
    command: [python, train.py]        # argv list, run in the spec's folder; never a shell string
    metric: {name: val_accuracy, direction: maximize}
    steps: 30
    trials: 8
    parallel: 2
    search_space:
      lr: {type: real, low: 0.001, high: 0.3, log: true}
      hidden: {type: int, low: 16, high: 128}
      activation: {type: categorical, choices: [relu, tanh]}
    providers:                           # required: spotwise never picks a cloud for you
      - name: local
        replay: {speedup: 600}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from spotwise.errors import SpecError, did_you_mean
from spotwise.spec_base import STORED as STORED  # costs reads it here
from spotwise.spec_base import Number, _no_bool, _Strict, stored
from spotwise.spec_options import check_parsed
from spotwise.spec_options import space_points as space_points  # planner.search reads it here
from spotwise.spec_yaml import INF, error_line, number_example, read_spec_document, yaml_text
from spotwise.spec_yaml12 import Loc, refuse_changed

PROVIDERS = ("local", "aws", "gcp", "azure")
BUILTIN_TRACE = "builtin:skynomad-v100-2023"

INT64 = (-(2**63), 2**63 - 1)  # the bounds of an int parameter (numpy's, the optimizer's)
SEEDS = 2**32  # a seed is 0 <= seed < 2**32 (numpy's RandomState)


class RealParam(_Strict):
    type: Literal["real"]
    low: Number
    high: Number
    log: bool = False

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> RealParam:
        if not self.low < self.high:
            raise ValueError(f"low must be < high, got low={self.low}, high={self.high}")
        if self.log and self.low <= 0:
            raise ValueError(f"log scale needs low > 0, got low={self.low}")
        if not math.isfinite(self.high - self.low) and not stored(info):  # review-ak M4
            raise ValueError(  # the optimizer scales by the width: inf, then NaN points
                f"high - low must be a finite number, got low={self.low:g}, high={self.high:g} "
                "(their difference overflows); narrow the range"
            )
        return self


class IntParam(_Strict):
    type: Literal["int"]
    low: int
    high: int
    log: bool = False

    @field_validator("low", "high", mode="before")
    @classmethod
    def _int64(cls, v: Any, info: ValidationInfo) -> Any:
        v = _no_bool(v, info)
        big = isinstance(v, int | float) and v == v
        if big and not stored(info) and not INT64[0] <= v <= INT64[1]:
            raise ValueError(
                f"an int parameter's bounds must be between {INT64[0]} and {INT64[1]}, got {v:g}"
            )
        return v

    @model_validator(mode="after")
    def _check(self) -> IntParam:
        if not self.low < self.high:
            raise ValueError(f"low must be < high, got low={self.low}, high={self.high}")
        if self.log and self.low <= 0:
            raise ValueError(f"log scale needs low > 0, got low={self.low}")
        return self


class CategoricalParam(_Strict):
    type: Literal["categorical"]
    choices: list[str | int | float | bool] = Field(min_length=1)

    @field_validator("choices", mode="before")
    @classmethod
    def _scalars(cls, v: Any) -> Any:
        for i, x in enumerate(v if isinstance(v, list) else []):
            if not isinstance(x, str | int | float) or x != x or x in (INF, -INF):
                got = yaml_text(x)
                raise ValueError(
                    f"choice {i} must be a string, a finite number or true/false, got {got}"
                )
        return v

    @field_validator("choices")
    @classmethod
    def _unique(cls, v: list[Any], info: ValidationInfo) -> list[Any]:
        if stored(info):  # a job that already ran: read back as it was written
            return v
        for i, a in enumerate(v):
            for b in v[:i]:
                if a != b:
                    continue
                x, y = yaml_text(b), yaml_text(a)
                if x == y:
                    raise ValueError(f"choices must be unique, got {x} twice")
                raise ValueError(  # 1, 1.0 and true: one value to Python and the optimizer
                    f"choices must be unique, but {x} and {y} are the same value; "
                    f"quote them to keep them apart, e.g. '{x}' and '{y}'"
                )
        return v


Param = Annotated[RealParam | IntParam | CategoricalParam, Field(discriminator="type")]


class Metric(_Strict):
    name: str = Field(min_length=1)
    direction: Literal["maximize", "minimize"] = "maximize"


class ReplaySpec(_Strict):
    """Drive the local provider from a real spot trace."""

    trace: str = BUILTIN_TRACE  # builtin:<name>, or a path (SkyNomad CSV / Can't Be Late folder)
    start: Number = Field(default=0.0, ge=0.0)  # hours into the trace where the job starts
    speedup: Number = Field(default=600.0, gt=0.0)  # market seconds per wall second
    notice_floor_s: Number = Field(default=1.0, ge=0.0)  # shortest notice in wall seconds
    billing: Literal["aws", "gcp", "azure"] = "aws"  # which provider's billing rule to replay
    forecast: str = "pretrained"  # pretrained | none | a revocation model (see open_backend)

    @model_validator(mode="before")
    @classmethod
    def _old_seed(cls, data: Any, info: ValidationInfo) -> Any:
        """``seed`` was a field here that nothing read (a replay is deterministic); jobs
        recorded with it still read back, a new spec naming it is refused."""
        if stored(info) and isinstance(data, dict):
            return {k: v for k, v in data.items() if k != "seed"}
        return data

    @field_validator("forecast")
    @classmethod
    def _forecast(cls, v: str, info: ValidationInfo) -> str:
        """A misspelt forecast is refused when the spec is read, whatever the policy (one that
        reads no forecast would run, and the mistake surface on the next job). A stored spec
        is read back as recorded: opening its market checks it again."""
        from spotwise.predictors.revocation import FORECAST_NAMES

        if not stored(info) and v not in FORECAST_NAMES:
            valid = ", ".join(FORECAST_NAMES)
            raise ValueError(f"unknown {v!r}{did_you_mean(v, FORECAST_NAMES)}; valid: {valid}")
        return v


_BOTH_MARKETS: list[Literal["spot", "on-demand"]] = ["spot", "on-demand"]


class ProviderSpec(_Strict):
    name: Literal["local", "aws", "gcp", "azure"]
    regions: list[str] = Field(default_factory=list)  # empty: every region the catalog knows
    zones: list[str] = Field(default_factory=list)
    instance_types: list[str] = Field(default_factory=list)
    markets: list[Literal["spot", "on-demand"]] = Field(default_factory=lambda: _BOTH_MARKETS[:])
    replay: ReplaySpec | None = None  # local only
    # provider-specific (image, subnet, ...): each provider's are declared in
    # spotwise.providers.registry.PROVIDER_OPTIONS and checked by parse_spec
    options: dict[str, str] = Field(default_factory=dict)

    @field_validator("options", mode="before")
    @classmethod
    def _scalars(cls, v: Any) -> Any:
        """``poll_s: 0.5`` and ``offline: true`` as YAML writes them: kept as the strings
        the providers read (``"0.5"``, ``"true"``)."""
        if not isinstance(v, dict):
            return v
        return {k: _option_text(x) for k, x in v.items()}

    @model_validator(mode="after")
    def _check(self) -> ProviderSpec:
        if self.name != "local" and self.replay is not None:
            raise ValueError("replay is only valid for the local provider")
        if not self.markets:
            raise ValueError("markets must name at least one of spot, on-demand")
        return self


def _option_text(x: Any) -> Any:
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int | float):
        return str(x)
    return x  # a string, or something pydantic refuses with its own message


def load_stored_spec(spec_json: str) -> JobSpec:
    """The spec of a job already recorded (``job.spec_json``), as it was accepted then."""
    return JobSpec.model_validate_json(spec_json, context=STORED)


class CheckpointSpec(_Strict):
    location: str = "checkpoints"  # folder (relative to the spec) or s3://, gs://, az:// URI
    # steps between checkpoints (policies may adapt it)
    every: int = Field(default=5, ge=1, strict=True)

    @field_validator("location")
    @classmethod
    def _location(cls, v: str, info: ValidationInfo) -> str:
        from spotwise.checkpoint.registry import check_location

        if stored(info):  # a job that already ran: read back as it was written
            return v
        try:
            check_location(v)
        except SpecError as e:  # the field is named by the caller; keep the fix
            raise ValueError(e.message + (f"; {e.hint}" if e.hint else "")) from None
        return v


class SearchSpec(_Strict):
    optimizer: Literal["gp", "rf", "et", "random"] = "gp"
    initial_points: int = Field(default=4, ge=1, strict=True)
    seed: int = Field(default=0, strict=True)

    @field_validator("seed")
    @classmethod
    def _seed(cls, v: int, info: ValidationInfo) -> int:
        if not stored(info) and not 0 <= v < SEEDS:
            raise ValueError(f"must be between 0 and {SEEDS - 1} (2**32 - 1), got {v}")
        return v


_UNITS = {"max_cost_usd": ("dollars", "10"), "deadline_hours": ("hours", "1.5")}


class BudgetSpec(_Strict):
    max_cost_usd: float | None = Field(default=None, gt=0)
    deadline_hours: float | None = Field(default=None, gt=0)
    # planner.no_word; > 0, finite: spec_options; unset, left out of a stored spec (which then
    # reads as before, in an older spotwise too)
    start_timeout_minutes: float | None = Field(
        default=None, allow_inf_nan=True, exclude_if=lambda v: v is None
    )

    @field_validator("max_cost_usd", "deadline_hours", "start_timeout_minutes", mode="before")
    @classmethod
    def _number(cls, v: Any, info: ValidationInfo) -> Any:
        """A number (or a string of one, ``"10"``), never a bool (``max_cost_usd: true`` was a
        $1 cap) nor text (``1:30``, ``on``: strings in YAML 1.2, base 60 and true in 1.1)."""
        if v is None or stored(info):
            return v
        what, example = _UNITS.get(info.field_name or "", ("minutes", "45"))
        if isinstance(v, bool):
            unset = "the default" if what == "minutes" else "no limit"
            raise ValueError(
                f"must be a number, got {yaml_text(v)}; write {what} as a number, e.g. "
                f"{example} (or leave it out for {unset})"
            )
        if isinstance(v, str):
            try:
                float(v)
            except ValueError:
                example = number_example(v, example, hours=what == "hours")
                raise ValueError(
                    f"{v!r} is not a number; write {what} as a number, e.g. {example}"
                ) from None
        return v


_SECTIONS = ("budget", "checkpoint", "search", "env", "policy_options")  # null: left out


class JobSpec(_Strict):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    command: list[str] = Field(min_length=1)
    metric: Metric
    steps: int = Field(ge=1, strict=True)
    trials: int = Field(default=8, ge=1, le=10_000, strict=True)
    parallel: int = Field(default=1, ge=1, le=256, strict=True)
    search_space: dict[str, Param] = Field(min_length=1)
    providers: list[ProviderSpec] = Field(min_length=1)
    policy: str = "spot-greedy"
    # the policy's options ({min_steps: 3} for asha); parse_spec checks them: a stored job loads
    policy_options: dict[str, Any] = Field(default_factory=dict)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    search: SearchSpec = Field(default_factory=SearchSpec)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str = ""  # where the command runs; default: the spec's folder

    @model_validator(mode="before")
    @classmethod
    def _empty_sections(cls, data: Any) -> Any:
        """``budget:`` with its fields commented out is YAML's null: the same as leaving the
        section out (review-ak M2), for each section that has defaults."""
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if not (v is None and k in _SECTIONS)}
        return data

    @field_validator("command")
    @classmethod
    def _argv(cls, v: list[str]) -> list[str]:
        if not v[0].strip():
            raise ValueError("the first element must be a program, e.g. [python, train.py]")
        return v

    @field_validator("search_space")
    @classmethod
    def _names(cls, v: dict[str, Any]) -> dict[str, Any]:
        for k in v:
            if not k.isidentifier():
                raise ValueError(f"parameter name {k!r} must be an identifier")
        return v

    @model_validator(mode="after")
    def _check(self) -> JobSpec:
        names = [p.name for p in self.providers]
        if len(set(names)) != len(names):
            raise ValueError(f"providers: each provider may appear once, got {names}")
        if "local" in names and len(names) > 1:
            raise ValueError(
                "providers: local (the replayed market, on its own clock) cannot be mixed with "
                "a cloud; name only clouds, or run the local job on its own"
            )
        return self

    def base_dir(self, spec_path: Path | None) -> Path:
        if self.workdir:
            wd = Path(self.workdir)
            return wd if wd.is_absolute() or spec_path is None else spec_path.parent / wd
        return spec_path.parent if spec_path is not None else Path.cwd()


def parse_spec(
    data: Any, source: str = "spec", sources: Mapping[Loc, str] | None = None
) -> JobSpec:
    """Validate a spec's data (read from ``source``); SpecError (one line) on any problem.
    ``sources``: the text of its plain scalars read as no string (error messages show it)."""
    if data is None:
        raise SpecError(f"{source}: the spec is empty; see examples/digits/job.yaml for one")
    if not isinstance(data, dict):
        kind = {"list": "a list", "str": "a plain string"}.get(type(data).__name__, "a value")
        raise SpecError(f"{source}: the spec must be a YAML mapping of fields, got {kind}")
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(f"{source}: {error_line(err, JobSpec, sources)}") from None
    check_parsed(spec, source)
    return spec


def load_spec(path: str | Path) -> JobSpec:
    """Read and validate a YAML job spec; raise :class:`SpecError` with one line on any problem."""
    p = Path(path)
    doc = read_spec_document(p)
    spec = parse_spec(doc.data, str(p), doc.sources)
    refuse_changed(spec, doc, str(p))  # what YAML 1.1 (spotwise before) read otherwise
    if any(q.name == "local" for q in spec.providers):
        from spotwise.spec_local import check_local

        check_local(spec, p)
    return spec
