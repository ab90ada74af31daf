"""Microsoft Azure: VM sizes from resource SKUs, Spot VMs, tags, Retail Prices API.

Entry points (see :mod:`spotwise.providers.registry`): :func:`open_catalog`,
:func:`open_provisioner`, :func:`check`. ``azure-mgmt-compute`` / ``azure-identity`` are
imported lazily inside functions; when missing, calls raise
:class:`~spotwise.errors.ProviderUnavailable` with ``pip install 'spotwise[azure]'``.

Credentials come only from ``azure.identity.DefaultAzureCredential`` (environment variables,
workload identity, managed identity, Azure CLI, ...); spotwise never stores, logs or prints a
token. Tests inject any object with ``get_token``.

Options (``providers[].options``): ``subscription_id`` (else ``$AZURE_SUBSCRIPTION_ID``); to
launch also ``resource_group``, ``subnet_id`` (a subnet resource id), ``image`` (URN
``Publisher:Offer:Sku:Version`` or an image resource id), ``ssh_public_key``; optional
``admin_username`` (``spotwise``), ``eviction_policy`` (``Delete`` or ``Deallocate``),
``max_price`` (``-1``: up to the on-demand price; Spot offers above it are not offered),
``os_disk_size_gb`` (``64``),
``public_ip`` (``false``), ``prices_source`` (``live``: Retail Prices API, or ``catalog``),
``prices`` (a catalog CSV), ``offline`` (``true``: the catalog without ARM calls),
``retail_prices_url`` (the Retail Prices API's address, for a fake server), ``base_url`` (an
ARM endpoint for a fake server), ``polling_interval`` (seconds between LRO polls, ``5``),
``operation_timeout_s`` (``600``: how long a launch waits for ARM to create its VM; a VM still
being created then is a failed launch, which the orchestrator looks for by its launch tag and
deletes), ``api_deadline_s`` (``60``: how long one ARM call may take, its retries included; see
:func:`client_bounds`); for the trial channel (see
:mod:`spotwise.providers.channel`): ``artifacts`` (``az://account/container/prefix`` or a shared
``file:///path``; default: the trial's checkpoint location, which must then be one of those),
``poll_s`` (seconds between reads of the API and of each trial's files, default
``$SPOTWISE_AZURE_POLL_S`` or 2), ``agent_poll_s`` (the VM agent's), ``workdir`` (the trial's
folder on the VM).

ARM calls are bounded (:func:`client_bounds`): azure-core's default retry policy would let one
call block for about 20 minutes when ARM stops answering (4 tries of 300 s each), or 3 times a
``Retry-After`` of any length; spotwise gives up after about ``api_deadline_s`` instead, with a
TransientError (or ThrottledError) naming the action. The deadline holds for a call as a whole
(:class:`~spotwise.providers.azure_token.BoundedARM`): a listing with all its pages, an answer
ARM trickles. The credential's token requests, which azure-identity sends through a pipeline
of its own (or ``az``), get half of it
(:class:`~spotwise.providers.azure_token.BoundedCredential`), as do those of :func:`check` and
of the blob store (:mod:`spotwise.providers.azure_blobs`). The Retail Prices API's pages, read
for live prices, share one ``api_deadline_s`` too (else the shipped catalog's prices are used).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar

from spotwise.errors import (
    ProviderUnavailable,
    SpecError,
)

# re-exported: callers and tests name them from here
from spotwise.providers.azure_errors import LOGIN_HINT as LOGIN_HINT
from spotwise.providers.azure_errors import MAX_PRICE_HINT as MAX_PRICE_HINT
from spotwise.providers.azure_errors import THROTTLED_HINT as THROTTLED_HINT
from spotwise.providers.azure_errors import TRANSIENT_HINT as TRANSIENT_HINT
from spotwise.providers.azure_errors import api_error as api_error
from spotwise.providers.azure_errors import quota_error as quota_error
from spotwise.providers.azure_token import (
    BoundedARM,
    BoundedCredential,
    cut_to_deadline,
    retry_policy,
    token_timeout,
)
from spotwise.providers.base import Market
from spotwise.providers.registry import INSTALL_HINT, CheckResult, OptionsMixin, ProviderConfig

NAME = "azure"
DEFAULT_API_DEADLINE_S = 60.0
ARM_SCOPE = "https://management.azure.com/.default"


@dataclass(frozen=True)
class AzureSettings(OptionsMixin):
    provider_label: ClassVar[str] = "azure"

    subscription_id: str
    regions: tuple[str, ...] = ()
    zones: tuple[str, ...] = ()
    instance_types: tuple[str, ...] = ()
    markets: tuple[Market, ...] = (Market.SPOT, Market.ON_DEMAND)
    options: Mapping[str, str] = field(default_factory=dict)


def settings_from(config: ProviderConfig) -> AzureSettings:
    opts = dict(config.options)
    sub = opts.get("subscription_id") or os.environ.get("AZURE_SUBSCRIPTION_ID", "")
    if not sub:
        raise SpecError(
            "providers[].options.subscription_id: required for azure",
            hint="add `subscription_id: 00000000-0000-0000-0000-000000000000` under the azure "
            "provider's options (or set AZURE_SUBSCRIPTION_ID)",
        )
    try:
        markets = tuple(Market(m) for m in config.markets)
    except ValueError:
        raise SpecError(
            f"providers[].markets: {list(config.markets)} must be spot/on-demand"
        ) from None
    return AzureSettings(
        sub, tuple(config.regions), tuple(config.zones), tuple(config.instance_types), markets, opts
    )


def max_price(settings: AzureSettings) -> float | None:
    """Option ``max_price``: the most USD/h a Spot VM may cost (ARM's ``billingProfile``), or
    None for ``-1`` / unset (up to the on-demand price). SpecError if not a number."""
    try:
        cap = float(settings.opt("max_price", "-1"))
    except ValueError:
        raise SpecError("providers[].options.max_price: a number (USD/h), or -1") from None
    return None if cap < 0 else cap


def api_deadline_s(settings: AzureSettings) -> float:
    """Option ``api_deadline_s``: the most seconds one ARM call may take, retries included."""
    return settings.seconds("api_deadline_s", DEFAULT_API_DEADLINE_S)


# ---- SDK access ----------------------------------------------------------------------------
def client_bounds(deadline_s: float) -> dict[str, Any]:
    """Keyword arguments for a management client that bound each call to about ``deadline_s``.

    azure-core's defaults (azure/core/pipeline/policies/_retry.py, RetryPolicyBase.__init__:
    3 retries per kind, backoff 0.8 s doubling up to 120 s, no overall timeout to speak of;
    azure/core/configuration.py: 300 s to connect and 300 s per read) keep retrying what they
    retry today (408/429/500/502/503/504, connection failures), but: the retries stop once
    ``deadline_s`` has passed since the call began (azure-core then raises
    ServiceResponseTimeoutError), each request may take half of it to connect and as long per
    read, a backoff sleep at most a quarter, and an answer whose ``Retry-After`` asks for more
    than a quarter is not retried: it is the call's answer (a 429 → ThrottledError, and
    spotwise waits). :class:`~spotwise.providers.azure_token.BoundedARM` holds each call as a
    whole, a listing's pages included, to ``deadline_s``."""
    return {
        "retry_policy": retry_policy(deadline_s),
        "raw_request_hook": cut_to_deadline,
        "connection_timeout": deadline_s / 2,
        "read_timeout": deadline_s / 2,
    }


def _unavailable(what: str) -> ProviderUnavailable:
    return ProviderUnavailable(f"azure: {what} is not installed", hint=INSTALL_HINT[NAME])


def compute_client(credential: Any, settings: AzureSettings) -> Any:
    """A ``ComputeManagementClient`` on ``credential`` (ARM endpoint from ``options.base_url``),
    each of its calls as a whole (a listing: all its pages) and its token requests bounded by
    ``api_deadline_s`` (:class:`~spotwise.providers.azure_token.BoundedARM`)."""
    try:
        from azure.mgmt.compute import ComputeManagementClient
    except ImportError:
        raise _unavailable("azure-mgmt-compute") from None
    deadline = api_deadline_s(settings)
    kwargs = client_bounds(deadline)
    if settings.opt("base_url"):
        kwargs["base_url"] = settings.opt("base_url")
    bounded = BoundedCredential(credential, deadline / 2)
    client = ComputeManagementClient(bounded, settings.subscription_id, **kwargs)
    return BoundedARM(client, deadline)


def default_credential() -> Any:
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError:
        raise _unavailable("azure-identity") from None
    if not os.environ.get("SPOTWISE_DEBUG"):
        # its chain warns a page per source that failed (13 lines before our one-line error,
        # which says what to do); SPOTWISE_DEBUG=1 shows them
        logging.getLogger("azure.identity").setLevel(logging.ERROR)
    return DefaultAzureCredential()


# ---- regions --------------------------------------------------------------------------------
@cache
def shipped_regions() -> frozenset[str]:
    from spotwise.providers.azure_prices import load

    return frozenset(load().regions())


# ---- registry entry points -----------------------------------------------------------------
def open_catalog(config: ProviderConfig, *, credential: Any | None = None) -> Any:
    """An :class:`~spotwise.providers.azure_catalog.AzureCatalog` (SKUs need a credential)."""
    from spotwise.providers.azure_catalog import AzureCatalog
    from spotwise.providers.azure_prices import load

    settings = settings_from(config)
    offline = settings.opt("offline").lower() == "true"
    client = None
    if not offline:
        client = compute_client(credential or default_credential(), settings)
    return AzureCatalog(settings, client, load(settings.opt("prices") or None))


def open_provisioner(config: ProviderConfig, *, credential: Any | None = None) -> Any:
    """An :class:`~spotwise.providers.azure_provisioner.AzureProvisioner`."""
    from spotwise.providers.azure_prices import load
    from spotwise.providers.azure_provisioner import AzureProvisioner

    settings = settings_from(config)
    settings.require("resource_group", "spotwise-rg")
    settings.require(
        "subnet_id",
        "/subscriptions/<sub>/resourceGroups/<rg>/providers/"
        "Microsoft.Network/virtualNetworks/<vnet>/subnets/<subnet>",
    )
    settings.require("image", "Canonical:ubuntu-24_04-lts:server:latest")
    settings.require("ssh_public_key", "ssh-ed25519 AAAA... you@host")
    if settings.opt("eviction_policy", "Delete") not in ("Delete", "Deallocate"):
        raise SpecError("providers[].options.eviction_policy: must be Delete or Deallocate")
    max_price(settings)  # a number, or SpecError before anything is launched
    client = compute_client(credential or default_credential(), settings)
    return AzureProvisioner(settings, client, load(settings.opt("prices") or None))


def _chain_in_use() -> str:
    env = os.environ
    if env.get("AZURE_CLIENT_ID") and env.get("AZURE_TENANT_ID"):
        if env.get("AZURE_CLIENT_SECRET") or env.get("AZURE_CLIENT_CERTIFICATE_PATH"):
            return "EnvironmentCredential (service principal from AZURE_* variables)"
        if env.get("AZURE_FEDERATED_TOKEN_FILE"):
            return "WorkloadIdentityCredential (AZURE_FEDERATED_TOKEN_FILE)"
    if env.get("IDENTITY_ENDPOINT") or env.get("MSI_ENDPOINT"):
        return "ManagedIdentityCredential"
    if shutil.which("az"):
        return "AzureCliCredential (az login), after managed identity"
    return "DefaultAzureCredential chain (no environment, CLI or managed identity found)"


def check(*, credential: Any | None = None, api_deadline_s: float | None = None) -> CheckResult:
    """Which credential would be used and whether it yields an ARM token (never shown) within
    half of ``api_deadline_s`` (default ``DEFAULT_API_DEADLINE_S``), as an ARM call's token
    request (a token endpoint that does not answer is said to be one, not a missing
    credential)."""
    timeout_s = (api_deadline_s or DEFAULT_API_DEADLINE_S) / 2
    chain = _chain_in_use()
    details = {"chain": chain}
    sub = os.environ.get("AZURE_SUBSCRIPTION_ID", "")
    if sub:
        details["subscription_id"] = sub
    try:
        from azure.mgmt.compute import ComputeManagementClient  # noqa: F401

        cred = BoundedCredential(credential or default_credential(), timeout_s)
        quiet = logging.getLogger("azure.identity")  # its chain logs a page per failed source
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)
        try:
            cred.get_token(ARM_SCOPE)  # the token itself is dropped at once
        finally:
            quiet.setLevel(level)
    except ProviderUnavailable as e:
        return CheckResult(NAME, False, f"{e.message}; {e.hint}", details)
    except ImportError:
        return CheckResult(
            NAME, False, f"azure-mgmt-compute is not installed; {INSTALL_HINT[NAME]}", details
        )
    except Exception as e:  # ClientAuthenticationError and friends: report the class only
        if isinstance(e, token_timeout()):
            return CheckResult(
                NAME,
                False,
                f"{getattr(e, 'message', e)} via {chain} (its token endpoint did not answer): "
                "nothing to fix if it passes; if it lasts, check that `az account "
                "get-access-token` answers",
                details,
            )
        if chain.startswith(("EnvironmentCredential", "WorkloadIdentityCredential")):
            return CheckResult(  # set, and refused: not "set them" (review-am F8)
                NAME,
                False,
                f"{chain} got no token ({type(e).__name__}): check AZURE_TENANT_ID and the "
                "client's secret, certificate or token file (wrong, expired, or another "
                "tenant's), and that login.microsoftonline.com is reachable",
                details,
            )
        return CheckResult(
            NAME,
            False,
            f"no Azure credential resolved ({type(e).__name__}); run `az login`, or set "
            "AZURE_CLIENT_ID, AZURE_TENANT_ID and AZURE_CLIENT_SECRET for a service principal",
            details,
        )
    reason = f"credentials resolve via {chain}"
    if not sub:
        reason += "; set providers[].options.subscription_id (or AZURE_SUBSCRIPTION_ID)"
    return CheckResult(NAME, True, reason, details)
