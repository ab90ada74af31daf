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
fake server), ``operation_timeout_s`` (``600``); for the trial channel (see
:mod:`spotwise.providers.channel`): ``artifacts`` (``gs://bucket/prefix`` or a shared
``file:///path``; default: the trial's checkpoint location, which must then be one of those),
``poll_s`` (seconds between reads of the API and of each trial's files, default
``$SPOTWISE_GCP_POLL_S`` or 2), ``agent_poll_s`` (the instance agent's), ``workdir`` (the
trial's folder on the instance).

Prices: :mod:`spotwise.providers.gcp_prices` (a dated catalog that can be refreshed; GCP has no
spot price history API, so ``GcpCatalog.price_history`` returns the catalog's dated point).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from spotwise.errors import (
    ProviderError,
    ProviderUnavailable,
    QuotaError,
    SpecError,
    ThrottledError,
    TransientError,
)
from spotwise.providers.base import TAG_MANAGED, Market
from spotwise.providers.registry import INSTALL_HINT, CheckResult, OptionsMixin, ProviderConfig

if TYPE_CHECKING:
    pass

NAME = "gcp"
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
        raise ProviderUnavailable(
            "gcp: no Application Default Credentials found",
            hint="run `gcloud auth application-default login`, or set "
            "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file",
        ) from None
    return creds, project


class GcpClients:
    """Lazily built compute_v1 clients sharing one credentials object and endpoint."""

    def __init__(self, credentials: Any, api_endpoint: str = "") -> None:
        self._credentials = credentials
        self._api_endpoint = api_endpoint
        self._cache: dict[str, Any] = {}

    def get(self, name: str) -> Any:
        if name not in self._cache:
            mod = compute_v1()
            kwargs: dict[str, Any] = {"credentials": self._credentials}
            if self._api_endpoint:
                from google.api_core.client_options import ClientOptions

                kwargs["client_options"] = ClientOptions(api_endpoint=self._api_endpoint)
            self._cache[name] = getattr(mod, name)(**kwargs)
        return self._cache[name]

    def __repr__(self) -> str:  # never show the credentials
        return f"GcpClients(api_endpoint={self._api_endpoint!r})"


CREDENTIALS_HINT = (
    "run `gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS to a "
    "service-account key file)"
)
THROTTLED_HINT = "nothing to fix: spotwise backs off and retries the call later"
TRANSIENT_HINT = (
    "nothing to fix if it passes: spotwise pauses the provider and tries again; if it lasts, "
    "see https://status.cloud.google.com"
)
_TRANSIENT_STATUS = frozenset({500, 502, 503, 504})  # 501 (not implemented) does not pass
_TRANSIENT_REASONS = frozenset({"backendError", "internalError"})
_HOST = re.compile(r"host='([^']+)'")
_THROTTLED = frozenset({
    "rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED",
    "RESOURCE_OPERATION_RATE_EXCEEDED", "OPERATION_RATE_EXCEEDED",
})  # fmt: skip
_QUOTA_REASONS = frozenset({"quotaExceeded", "QUOTA_EXCEEDED"})
_QUOTA_TEXT = re.compile(
    r"Quota '([A-Za-z0-9_-]+)' exceeded\.?(?:\s+Limit:\s*([0-9.]+))?"
    r"(?:\s+(?:in region ([a-z0-9-]+)|(globally)))?"
)
_REQUEST = re.compile(r"^[A-Z]+ https?://\S+: ")  # api_core's "POST <url>: " before the text
_OAUTH_CODE = re.compile(r"\b(invalid_grant|invalid_client|invalid_scope|unauthorized_client)\b")


def throttled(prefix: str, why: str) -> ThrottledError:
    """The Compute Engine API refused a call for its request rate: nothing was done."""
    return ThrottledError(
        f"{prefix}: the Compute Engine API is throttling requests ({why})", hint=THROTTLED_HINT
    )


def transient(prefix: str, why: str) -> TransientError:
    """A failure of the Compute Engine API that passes (a 5xx, a timeout, a dropped
    connection): the same call later succeeds."""
    return TransientError(
        f"{prefix}: a passing failure of the Compute Engine API ({why})", hint=TRANSIENT_HINT
    )


def _connection_failure(e: BaseException) -> str:
    """How the request failed to reach Google or to get its answer ("timed out talking to
    compute.googleapis.com"); "" when ``e`` is no such failure."""
    kinds: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)
    with contextlib.suppress(ImportError):
        from google.auth.exceptions import TransportError
        from requests.exceptions import ConnectionError as RequestsConnectionError
        from requests.exceptions import Timeout

        kinds = (*kinds, TransportError, RequestsConnectionError, Timeout)
    if not isinstance(e, kinds):
        return ""
    timeout = isinstance(e, TimeoutError) or type(e).__name__.endswith("Timeout")
    host = _HOST.search(str(e))
    kind = "timed out" if timeout else "could not connect"
    return f"{kind} talking to {host.group(1)}" if host else kind


def quota_error(
    prefix: str, text: str, *, metric: str = "", region: str = "", limit: str = ""
) -> QuotaError:
    """A quota refusal naming the metric and region when ``text`` (else the caller) has them."""
    m = _QUOTA_TEXT.search(text)
    if m:
        metric, limit = m.group(1), m.group(2) or limit
        region = m.group(3) or ("global" if m.group(4) else region)
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", limit):
        limit = f"{float(limit):g}"
    where = {"": "", "global": " globally"}.get(region, f" in {region}")
    if metric:
        what = f"quota {metric} exceeded{where}" + (f" (limit {limit})" if limit else "")
    else:
        what = f"quota exceeded{where}: {text}"
    target = (f" for {metric}" if metric else "") + ("" if region == "global" else where)
    other = "" if region == "global" else ", or choose another region"
    return QuotaError(
        f"{prefix}: {what}",
        hint=f"request a quota increase{target} (console: IAM & Admin > Quotas){other}",
    )


def _reasons(e: Exception) -> set[str]:
    """The error reasons of a GoogleAPICallError (``errors[].reason`` and ErrorInfo's)."""
    out = {
        str(x.get("reason") or "") for x in getattr(e, "errors", None) or () if isinstance(x, dict)
    }
    out.add(str(getattr(e, "reason", None) or ""))
    return out - {""}


def _is_refresh_error(e: Exception) -> bool:
    try:
        from google.auth.exceptions import RefreshError
    except ImportError:
        return False
    return isinstance(e, RefreshError)


def api_error(prefix: str, e: Exception) -> ProviderError:
    """A GoogleAPICallError (or a credentials failure) as a one-line ProviderError: throttling
    → ThrottledError, a 500/502/503/504 or a timeout or dropped connection → TransientError,
    quota → the quota to raise, credentials → how to renew them, 403 → the role to grant.
    Never the request's headers or a token."""
    if _is_refresh_error(e):
        oauth = _OAUTH_CODE.search(str(e))
        why = f" ({oauth.group(1)})" if oauth else ""
        return ProviderUnavailable(
            f"{prefix}: the Google credentials could not be refreshed{why}", hint=CREDENTIALS_HINT
        )
    cause = getattr(e, "cause", None)  # api_core's RetryError: the last attempt's error
    if isinstance(cause, Exception) and cause is not e and getattr(e, "code", None) is None:
        mapped = api_error(prefix, cause)
        if isinstance(mapped, TransientError):
            return mapped
    connection = _connection_failure(e)
    if connection:
        return transient(prefix, connection)
    code = getattr(e, "code", None)
    code = code if isinstance(code, int) else None
    msg = " ".join(_REQUEST.sub("", str(getattr(e, "message", None) or "")).split())
    msg = msg or type(e).__name__
    reasons = _reasons(e)
    throttle = sorted(reasons & _THROTTLED)
    if code == 429 or throttle:
        return throttled(prefix, " ".join([str(code or ""), *throttle[:1]]).strip())
    if reasons & _QUOTA_REASONS or (code == 403 and _QUOTA_TEXT.search(msg)):
        return quota_error(prefix, msg)
    if code in _TRANSIENT_STATUS or reasons & _TRANSIENT_REASONS:
        return transient(prefix, f"{code} {msg}" if code else msg)
    if code == 401:
        return ProviderUnavailable(
            f"{prefix}: the credentials were rejected (401): {msg}", hint=CREDENTIALS_HINT
        )
    if code == 403:
        return ProviderUnavailable(
            f"{prefix}: permission denied (403): {msg}",
            hint="check the account in `gcloud auth application-default print-access-token` "
            "has roles/compute.instanceAdmin.v1 on the project",
        )
    return ProviderError(f"{prefix}: {code} {msg}" if code else f"{prefix}: {msg}")


def operation_error(prefix: str, errors: list[Any]) -> ProviderError | None:
    """Throttling or quota among a zone operation's ``error.errors`` (else None)."""
    for x in errors:
        if x.code in _THROTTLED:
            return throttled(prefix, x.code)
    for x in errors:
        if x.code in _QUOTA_REASONS:
            info = next((d.quota_info for d in x.error_details if d.quota_info), None)
            metric = info.metric_name.rsplit("/", 1)[-1].upper() if info else ""
            region = dict(info.dimensions).get("region", "") if info else ""
            return quota_error(prefix, " ".join(x.message.split()), metric=metric, region=region)
    return None


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
    return settings, GcpClients(credentials, settings.opt("api_endpoint"))


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


def check() -> CheckResult:
    """Which ADC source would be used and whether it resolves; never raises, never shows secrets."""
    chain = _chain_in_use()
    try:
        compute_v1()
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
