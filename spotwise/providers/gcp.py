"""Google Compute Engine: machine types, Spot VMs, zone operations, labels as tags.

Entry points (see :mod:`spotwise.providers.registry`): :func:`open_catalog`,
:func:`open_provisioner`, :func:`check`. ``google-cloud-compute`` is imported lazily inside
functions (``spotwise --help`` never loads it); when it is missing the call raises
:class:`~spotwise.errors.ProviderUnavailable` with ``pip install 'spotwise[gcp]'``.

Credentials come only from Google's Application Default Credentials chain
(``google.auth.default``: ``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's ADC file, the metadata
server); spotwise never stores, logs or prints them. Tests inject a credentials object.

Options (``providers[].options``): ``project`` (else the ADC project), ``image`` (boot image,
needed to launch), ``network`` (default ``global/networks/default``), ``subnetwork``,
``external_ip`` (``true``), ``service_account`` (``default``), ``disk_size_gb`` (``50``),
``termination_action`` (``DELETE`` or ``STOP``), ``prices`` (a price CSV, default the shipped
one), ``offline`` (``true``: hardware from the price CSV, no API calls), ``api_endpoint`` (a
fake server), ``operation_timeout_s`` (``600``), ``api_deadline_s`` (``60``: how long one API
call may take, its retries included; see :func:`~spotwise.providers.gcp_errors.call_bounds`);
for the trial channel (see
:mod:`spotwise.providers.channel`): ``artifacts`` (``gs://bucket/prefix`` or a shared
``file:///path``; default: the trial's checkpoint location, which must then be one of those),
``poll_s`` (seconds between reads of the API and of each trial's files, default
``$SPOTWISE_GCP_POLL_S`` or 2), ``agent_poll_s`` (the instance agent's), ``workdir`` (the
trial's folder on the instance).

Every API call passes its own ``retry`` and ``timeout``
(:func:`~spotwise.providers.gcp_errors.call_bounds`), and the clients hold each call, a listing
with all its pages, to ``api_deadline_s`` of wall time even when the server trickles its answer
(:class:`~spotwise.providers.gcp_errors.BoundedClient`), so that in an outage it gives up with a
TransientError naming the action, instead of holding the orchestrator for the client's default
600 s (per page). Refreshing the credentials' token happens inside the call, so it is bounded too.

Prices: :mod:`spotwise.providers.gcp_prices` (a dated catalog that can be refreshed; GCP has no
spot price history API, so ``GcpCatalog.price_history`` returns the catalog's dated point).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from spotwise.errors import (
    ProviderUnavailable,
    SpecError,
)
from spotwise.providers.base import TAG_MANAGED, Market
from spotwise.providers.gcp_errors import BoundedClient, call_bounds
from spotwise.providers.registry import INSTALL_HINT, CheckResult, OptionsMixin, ProviderConfig

if TYPE_CHECKING:
    pass

NAME = "gcp"
DEFAULT_API_DEADLINE_S = 60.0
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
LABEL_PREFIX = "spotwise-"
_LABEL_OK = re.compile(r"[^a-z0-9_-]")


# ---- settings -------------------------------------------------------------------------------
@dataclass(frozen=True)
class GcpSettings(OptionsMixin):
    provider_label: ClassVar[str] = "gcp"

    project: str
    regions: tuple[str, ...] = ()
    zones: tuple[str, ...] = ()
    instance_types: tuple[str, ...] = ()
    markets: tuple[Market, ...] = (Market.SPOT, Market.ON_DEMAND)
    options: Mapping[str, str] = field(default_factory=dict)


def settings_from(config: ProviderConfig, *, project: str | None = None) -> GcpSettings:
    opts = dict(config.options)
    proj = opts.get("project") or project or ""
    if not proj:
        raise SpecError(
            "providers[].options.project: required for gcp (no project in the options or in the "
            "application-default credentials)",
            hint="add `project: my-project-id` under the gcp provider's options",
        )
    try:
        markets = tuple(Market(m) for m in config.markets)
    except ValueError:
        raise SpecError(
            f"providers[].markets: {list(config.markets)} must be among {[m.value for m in Market]}"
        ) from None
    return GcpSettings(
        project=proj,
        regions=tuple(config.regions),
        zones=tuple(config.zones),
        instance_types=tuple(config.instance_types),
        markets=markets,
        options=opts,
    )


def api_deadline_s(settings: GcpSettings) -> float:
    """Option ``api_deadline_s``: the most seconds one API call may take, retries included."""
    return settings.seconds("api_deadline_s", DEFAULT_API_DEADLINE_S)


# ---- SDK access ----------------------------------------------------------------------------
def compute_v1() -> Any:
    """The ``google.cloud.compute_v1`` module, or ProviderUnavailable with the install hint."""
    try:
        from google.cloud import compute_v1 as mod
    except ImportError:
        raise ProviderUnavailable(
            "gcp: google-cloud-compute is not installed", hint=INSTALL_HINT[NAME]
        ) from None
    return mod


def default_credentials() -> tuple[Any, str | None]:
    """Application Default Credentials and their project; ProviderUnavailable with the fix."""
    try:
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError
    except ImportError:
        raise ProviderUnavailable(
            "gcp: google-auth is not installed", hint=INSTALL_HINT[NAME]
        ) from None
    try:
        creds, project = google.auth.default(scopes=list(SCOPES))
    except DefaultCredentialsError:
        raise _no_credentials() from None
    return creds, project


def _no_credentials() -> ProviderUnavailable:
    """What to fix when Application Default Credentials are not found: with
    GOOGLE_APPLICATION_CREDENTIALS set, its file (named, never read here: missing, or not a key
    google-auth can use), not "set it" (review-am F8); else how to get some."""
    path = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS", "").strip()
    if not path:
        return ProviderUnavailable(
            "gcp: no Application Default Credentials found",
            hint="run `gcloud auth application-default login`, or set "
            "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file",
        )
    what = "no such file" if not os.path.isfile(path) else "not a key google-auth can use"
    return ProviderUnavailable(
        f"gcp: GOOGLE_APPLICATION_CREDENTIALS={path} could not be used ({what})",
        hint="point it at a service-account key file (JSON, downloaded from IAM), or unset it "
        "and run `gcloud auth application-default login`",
    )


class GcpClients:
    """Lazily built compute_v1 clients sharing one credentials object and endpoint."""

    def __init__(
        self,
        credentials: Any,
        api_endpoint: str = "",
        api_deadline_s: float = DEFAULT_API_DEADLINE_S,
    ) -> None:
        self._credentials = credentials
        self._api_endpoint = api_endpoint
        self.api_deadline_s = api_deadline_s
        self._cache: dict[str, Any] = {}
        self._bounds: dict[str, Any] | None = None

    @property
    def bounds(self) -> dict[str, Any]:
        """``retry=`` and ``timeout=`` for every call (:func:`call_bounds`)."""
        if self._bounds is None:
            self._bounds = call_bounds(self.api_deadline_s)
        return self._bounds

    def get(self, name: str) -> Any:
        """The ``compute_v1`` client ``name``, its calls held to ``api_deadline_s``."""
        if name not in self._cache:
            mod = compute_v1()
            kwargs: dict[str, Any] = {"credentials": self._credentials}
            if self._api_endpoint:
                from google.api_core.client_options import ClientOptions

                kwargs["client_options"] = ClientOptions(api_endpoint=self._api_endpoint)
            client = getattr(mod, name)(**kwargs)
            self._cache[name] = BoundedClient(client, self.api_deadline_s)
        return self._cache[name]

    def __repr__(self) -> str:  # never show the credentials
        return f"GcpClients(api_endpoint={self._api_endpoint!r})"


# ---- labels <-> tags -----------------------------------------------------------------------
def label_key(tag_key: str) -> str:
    """``spotwise:job`` → ``spotwise-job``; any key → a valid GCP label key."""
    k = _LABEL_OK.sub("_", tag_key.lower().replace(":", "-"))
    if not k or not k[0].isalpha():
        k = "k" + k
    return k[:63]


def label_value(value: str) -> str:
    """A valid label value; values changed by the mapping get a hash suffix to stay distinct."""
    v = _LABEL_OK.sub("_", value.lower())
    if v == value and len(v) <= 63:
        return v
    digest = hashlib.sha1(value.encode()).hexdigest()[:8]
    return f"{v[:54]}-{digest}"


def tags_to_labels(tags: Mapping[str, str]) -> dict[str, str]:
    return {label_key(k): label_value(v) for k, v in tags.items()}


def labels_to_tags(labels: Mapping[str, str]) -> dict[str, str]:
    """Inverse for keys we wrote (``spotwise-job`` → ``spotwise:job``); exact values live in
    the ``spotwise-tags`` metadata item, labels only serve the server-side filter."""
    out = {}
    for k, v in labels.items():
        out["spotwise:" + k[len(LABEL_PREFIX) :] if k.startswith(LABEL_PREFIX) else k] = v
    return out


def label_filter(tags: Mapping[str, str]) -> str:
    """The ``instances.aggregatedList`` filter selecting our instances with these tags."""
    want = {TAG_MANAGED: "true", **dict(tags)}
    return " AND ".join(
        f'(labels.{label_key(k)} = "{label_value(v)}")' for k, v in sorted(want.items())
    )


# ---- catalog -------------------------------------------------------------------------------
def zone_region(zone: str) -> str:
    """``us-central1-a`` → ``us-central1``."""
    return zone.rsplit("-", 1)[0] if zone.count("-") >= 2 else zone


@cache
def shipped_regions() -> frozenset[str]:
    from spotwise.providers.gcp_prices import load

    return frozenset(load().regions())


# ---- registry entry points -----------------------------------------------------------------
def _resolve(
    config: ProviderConfig, credentials: Any | None
) -> tuple[GcpSettings, GcpClients | None]:
    offline = str(config.options.get("offline", "")).lower() == "true"
    project = None
    if credentials is None and not offline:
        compute_v1()  # install hint before credentials
        credentials, project = default_credentials()
    settings = settings_from(config, project=project or ("offline" if offline else None))
    if offline:
        return settings, None
    deadline = api_deadline_s(settings)
    return settings, GcpClients(credentials, settings.opt("api_endpoint"), deadline)


def open_catalog(config: ProviderConfig, *, credentials: Any | None = None) -> Any:
    """A :class:`~spotwise.providers.gcp_catalog.GcpCatalog` for this provider config."""
    from spotwise.providers.gcp_catalog import GcpCatalog
    from spotwise.providers.gcp_prices import load

    settings, clients = _resolve(config, credentials)
    return GcpCatalog(settings, clients, load(settings.opt("prices") or None))


def open_provisioner(config: ProviderConfig, *, credentials: Any | None = None) -> Any:
    """A :class:`~spotwise.providers.gcp_provisioner.GcpProvisioner` for this provider config."""
    from spotwise.providers.gcp_prices import load
    from spotwise.providers.gcp_provisioner import GcpProvisioner

    settings, clients = _resolve(config, credentials)
    if clients is None:
        raise SpecError("providers[].options.offline: gcp cannot launch instances offline")
    settings.require("image", "projects/debian-cloud/global/images/family/debian-12")
    return GcpProvisioner(settings, clients, load(settings.opt("prices") or None))


def _chain_in_use() -> str:
    if os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return "GOOGLE_APPLICATION_CREDENTIALS (credentials file)"
    cfg = os.environ.get("CLOUDSDK_CONFIG") or str(Path.home() / ".config" / "gcloud")
    if (Path(cfg) / "application_default_credentials.json").exists():
        return "gcloud application-default credentials"
    return "GCE metadata server"


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported, found without importing it."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def check() -> CheckResult:
    """Which ADC source would be used and whether it resolves; never raises, never shows secrets."""
    chain = _chain_in_use()
    try:
        if not _installed("google.cloud.compute_v1"):  # importing it takes seconds
            compute_v1()  # ProviderUnavailable with the install hint
        creds, project = default_credentials()
    except ProviderUnavailable as e:
        return CheckResult(NAME, False, f"{e.message}; {e.hint}", {"chain": chain})
    details = {"chain": chain, "credential_type": type(creds).__name__, "project": project or ""}
    if not project:
        return CheckResult(
            NAME,
            True,
            f"credentials resolve via {chain}; no default project: set providers[].options.project",
            details,
        )
    return CheckResult(NAME, True, f"credentials resolve via {chain}; project {project}", details)


__all__ = [
    "GcpClients",
    "GcpSettings",
    "check",
    "label_filter",
    "labels_to_tags",
    "open_catalog",
    "open_provisioner",
    "tags_to_labels",
]
