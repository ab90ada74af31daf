"""Providers by name, imported lazily (a cloud SDK loads only when its provider is used).

Every cloud module (``aws``, ``gcp``, ``azure``) exposes three functions:

* ``open_catalog(config: ProviderConfig) -> Catalog``
* ``open_provisioner(config: ProviderConfig) -> Provisioner``
* ``check() -> CheckResult`` — is it usable here, and if not why (never prints a secret)

``local`` is built by the orchestrator from the replay market and a clock; see
:mod:`spotwise.providers.local`.

The options each provider reads from ``providers[].options`` are declared here too
(:data:`PROVIDER_OPTIONS`: name, allowed form, whether a launch needs it), so a job spec is
checked against them without importing any cloud SDK (:func:`check_options`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import ClassVar, Literal

from spotwise.errors import ProviderUnavailable, SpecError, did_you_mean

PROVIDER_NAMES = ("local", "aws", "gcp", "azure")
INSTALL_HINT = {
    "aws": "pip install 'spotwise[aws]'",
    "gcp": "pip install 'spotwise[gcp]'",
    "azure": "pip install 'spotwise[azure]'",
}


@dataclass(frozen=True)
class ProviderConfig:
    name: str
    regions: tuple[str, ...] = ()
    zones: tuple[str, ...] = ()
    instance_types: tuple[str, ...] = ()
    markets: tuple[str, ...] = ("spot", "on-demand")
    options: Mapping[str, str] = field(default_factory=dict)


class OptionsMixin:
    """``opt``/``require`` over a provider settings dataclass holding ``options``."""

    provider_label: ClassVar[str] = ""
    options: Mapping[str, str]

    def opt(self, key: str, default: str = "") -> str:
        return str(self.options.get(key, default))

    def require(self, key: str, example: str) -> str:
        value = self.opt(key)
        if not value:
            raise SpecError(
                f"providers[].options.{key}: required for {self.provider_label}",
                hint=f"add `{key}: {example}` under the {self.provider_label} provider's options",
            )
        return value

    def seconds(self, key: str, default: float) -> float:
        """Option ``key`` as a number of seconds > 0 (finite), else ``default``."""
        raw = self.opt(key, str(default))
        try:
            value = float(raw)
        except ValueError:
            value = 0.0
        if not 0 < value < float("inf"):
            raise SpecError(f"providers[].options.{key}: {raw!r} is not a number > 0")
        return value


@dataclass(frozen=True)
class CheckResult:
    provider: str
    usable: bool
    reason: str  # one line: what works or what is missing, and the fix
    details: Mapping[str, str] = field(default_factory=dict)  # e.g. account id, project; no secrets


# ---- provider options ---------------------------------------------------------------------------
OptionKind = Literal["text", "number", "int", "bool", "choice"]


@dataclass(frozen=True)
class OptionSpec:
    """One provider option and the form of its value (every value is a string in the spec).

    ``required`` options are those a launch needs: they are checked before a job starts
    (:mod:`spotwise.planner.preflight`), not when a spec is loaded."""

    kind: OptionKind = "text"
    choices: tuple[str, ...] = ()  # kind "choice"
    minimum: float | None = None  # kinds "number" and "int"
    exclusive: bool = False  # the minimum itself is refused
    also: tuple[float, ...] = ()  # numbers allowed below the minimum (Azure max_price -1)
    ignore_case: bool = False  # kind "choice" ("bool" always ignores case)
    required: bool = False
    example: str = ""  # a value to suggest when a required option is missing

    def __post_init__(self) -> None:
        if (self.kind == "choice") != bool(self.choices):
            raise ValueError(
                f"choices go with kind 'choice' only, got {self.kind=}, {self.choices=}"
            )

    def form(self) -> str:
        """The allowed values, for messages: ``one of stop, ignore``, ``a number >= 0``."""
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        if self.kind == "bool":
            return "true or false"
        if self.kind == "text":
            return "text"
        what = "a whole number" if self.kind == "int" else "a number"
        if self.minimum is None:
            return what
        bound = f"{what} {'>' if self.exclusive else '>='} {_number(self.minimum)}"
        return " or ".join([*(_number(x) for x in self.also), bound])

    def accepts(self, value: str) -> bool:
        """Whether the provider reads ``value`` as this option means it (as its code does:
        booleans are ``true``/``false`` in any case, numbers what ``float``/``int`` parse)."""
        if self.kind == "text":
            return True
        if self.kind == "bool":
            return value.lower() in ("true", "false")
        if self.kind == "choice":
            if self.ignore_case:
                return value.lower() in {c.lower() for c in self.choices}
            return value in self.choices
        try:
            x = float(int(value)) if self.kind == "int" else float(value)
        except ValueError:
            return False
        if not math.isfinite(x):
            return False
        if x in self.also or self.minimum is None:
            return True
        return x > self.minimum if self.exclusive else x >= self.minimum


def _number(x: float) -> str:
    return str(int(x)) if x == int(x) else str(x)


_TEXT = OptionSpec()
_BOOL = OptionSpec("bool")
_SIZE_GB = OptionSpec("int", minimum=1)
# the orchestrator's reads of the API and of each trial's files (0: every read fresh)
_POLL_S = OptionSpec("number", minimum=0)
# the options of the trial channel (spotwise.providers.channel), the same on every cloud
_CHANNEL: dict[str, OptionSpec] = {
    "artifacts": _TEXT,  # where the trial's events go; its form is checked by channel
    "workdir": _TEXT,
    "poll_s": _POLL_S,
    "agent_poll_s": OptionSpec("number", minimum=0, exclusive=True),  # the instance agent's
}

PROVIDER_OPTIONS: dict[str, dict[str, OptionSpec]] = {
    "local": {},
    "aws": {
        **_CHANNEL,
        "image": OptionSpec(
            required=True,
            example="ami-0123456789abcdef0 (or resolve:ssm:<parameter>; its Python must run "
            "spotwise)",
        ),
        "setup": _TEXT,
        "python": _TEXT,
        "instance_profile": _TEXT,
        "subnet": _TEXT,
        "security_groups": _TEXT,  # comma separated
        "key_name": _TEXT,
        "profile": _TEXT,
        "rebalance": OptionSpec("choice", choices=("stop", "ignore")),
        "pricing": OptionSpec("choice", choices=("auto", "api", "offline")),
    },
    "gcp": {
        **_CHANNEL,
        "project": _TEXT,
        "image": OptionSpec(
            required=True, example="projects/debian-cloud/global/images/family/debian-12"
        ),
        "network": _TEXT,
        "subnetwork": _TEXT,
        "external_ip": _BOOL,
        "service_account": _TEXT,
        "disk_size_gb": _SIZE_GB,
        "termination_action": OptionSpec("choice", choices=("DELETE", "STOP"), ignore_case=True),
        "prices": _TEXT,
        "offline": _BOOL,
        "api_endpoint": _TEXT,
        "operation_timeout_s": OptionSpec("number", minimum=0, exclusive=True),
        "api_deadline_s": OptionSpec("number", minimum=0, exclusive=True),
    },
    "azure": {
        **_CHANNEL,
        "subscription_id": _TEXT,
        "resource_group": OptionSpec(required=True, example="spotwise-rg"),
        "subnet_id": OptionSpec(
            required=True,
            example="/subscriptions/<sub>/resourceGroups/<rg>/providers/"
            "Microsoft.Network/virtualNetworks/<vnet>/subnets/<subnet>",
        ),
        "image": OptionSpec(required=True, example="Canonical:ubuntu-24_04-lts:server:latest"),
        "ssh_public_key": OptionSpec(required=True, example="ssh-ed25519 AAAA... you@host"),
        "admin_username": _TEXT,
        "eviction_policy": OptionSpec("choice", choices=("Delete", "Deallocate")),
        "max_price": OptionSpec("number", minimum=0, exclusive=True, also=(-1,)),
        "os_disk_size_gb": _SIZE_GB,
        "public_ip": _BOOL,
        "prices_source": OptionSpec("choice", choices=("live", "catalog")),
        "prices": _TEXT,
        "retail_prices_url": _TEXT,
        "base_url": _TEXT,
        "polling_interval": OptionSpec("number", minimum=0),
        "operation_timeout_s": OptionSpec("number", minimum=0, exclusive=True),
        "api_deadline_s": OptionSpec("number", minimum=0, exclusive=True),
        "offline": _BOOL,
    },
}


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


def check_options(provider: str, options: Mapping[str, str], field: str = "options") -> None:
    """SpecError (one line, naming ``<field>.<option>``) for an option ``provider`` does not
    read, with "did you mean", or a value outside the option's form. Missing required options
    are not checked here (see :func:`missing_required`)."""
    known = PROVIDER_OPTIONS[validate_name(provider)]
    for name, value in options.items():
        spec = known.get(name)
        if spec is None:
            if not known:
                raise SpecError(
                    _one_line(
                        f"spec field '{field}.{name}': the {provider} provider takes no "
                        "options; remove it"
                    )
                )
            raise SpecError(
                _one_line(
                    f"spec field '{field}.{name}': unknown {provider} option"
                    f"{did_you_mean(name, sorted(known))}; valid: {', '.join(sorted(known))}"
                )
            )
        if not spec.accepts(value):
            raise SpecError(
                _one_line(f"spec field '{field}.{name}': {value!r} is not {spec.form()}")
            )


def missing_required(provider: str, options: Mapping[str, str]) -> list[tuple[str, OptionSpec]]:
    """The options a launch on ``provider`` needs that ``options`` leaves out or empty."""
    known = PROVIDER_OPTIONS[validate_name(provider)]
    return [
        (name, spec)
        for name, spec in known.items()
        if spec.required and not str(options.get(name, "")).strip()
    ]


def _aws() -> ModuleType:
    from spotwise.providers import aws

    return aws


def _gcp() -> ModuleType:
    from spotwise.providers import gcp

    return gcp


def _azure() -> ModuleType:
    from spotwise.providers import azure

    return azure


_CLOUDS: dict[str, Callable[[], ModuleType]] = {"aws": _aws, "gcp": _gcp, "azure": _azure}


def validate_name(name: str) -> str:
    if name not in PROVIDER_NAMES:
        raise SpecError(
            f"provider: unknown provider {name!r}{did_you_mean(name, list(PROVIDER_NAMES))}; "
            f"valid: {', '.join(PROVIDER_NAMES)}"
        )
    return name


def cloud_module(name: str) -> ModuleType:
    """The adapter module of a cloud; a missing SDK becomes ProviderUnavailable with the hint."""
    validate_name(name)
    if name not in _CLOUDS:
        raise SpecError(f"provider {name!r} is not a cloud; valid clouds: {', '.join(_CLOUDS)}")
    try:
        return _CLOUDS[name]()
    except ImportError as e:
        raise ProviderUnavailable(
            f"{name}: its SDK is not installed ({e.name or e})",
            hint=INSTALL_HINT[name],
        ) from None
