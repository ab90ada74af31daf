"""Providers by name, imported lazily (a cloud SDK loads only when its provider is used).

Every cloud module (``aws``, ``gcp``, ``azure``) exposes three functions:

* ``open_catalog(config: ProviderConfig) -> Catalog``
* ``open_provisioner(config: ProviderConfig) -> Provisioner``
* ``check() -> CheckResult`` — is it usable here, and if not why (never prints a secret)

``local`` is built by the orchestrator from the replay market and a clock; see
:mod:`spotwise.providers.local`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import ClassVar

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


@dataclass(frozen=True)
class CheckResult:
    provider: str
    usable: bool
    reason: str  # one line: what works or what is missing, and the fix
    details: Mapping[str, str] = field(default_factory=dict)  # e.g. account id, project; no secrets


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
