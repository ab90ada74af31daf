"""How an Azure SDK failure reads as a spotwise error (:func:`api_error`): throttling, passing
failures, capacity and Spot-price refusals (the offer, not the trial), credentials, quota and
roles, each with the hint that fixes it. Split from :mod:`spotwise.providers.azure`, which
re-exports these names."""

from __future__ import annotations

import re

from spotwise.errors import (
    CapacityError,
    ProviderError,
    ProviderUnavailable,
    QuotaError,
    ThrottledError,
    TransientError,
)
from spotwise.providers.azure_token import token_timeout
from spotwise.providers.bounded import CallDeadlineExceeded

_CAPACITY = {
    "SkuNotAvailable",
    "AllocationFailed",
    "ZonalAllocationFailed",
    "OverconstrainedAllocationRequest",
    "OverconstrainedZonalAllocationRequest",
    "SpotVMCapacityNotAvailable",
    "AllocationTimedOut",
}
# ARM's refusal of a Spot price above options.max_price: SpotPriceGreaterThanProvidedMaxPrice,
# or OperationNotAllowed "... the provided max price '0.05 USD' is lower than the current spot
# price ..."; with AzureSpotIsNotSupportedForThisVMSize, a refusal of the offer, not the trial,
# and a lasting one (the price cap is the job's, the size's Spot support ARM's): the offer is
# avoided for a doubling backoff, not asked again each pass (the catalog keeps its price).
_MAX_PRICE_TEXT = re.compile(r"max price\b.*\blower than the current spot price", re.I | re.S)
MAX_PRICE_HINT = (
    "the Spot price is above providers[].options.max_price: spotwise tries another offer; "
    "raise max_price (or set -1: up to the on-demand price) to use this one"
)
LOGIN_HINT = "run `az login` (or set AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET)"
THROTTLED_HINT = "nothing to fix: spotwise backs off and retries the call later"
TRANSIENT_HINT = (
    "nothing to fix if it passes: spotwise pauses the provider and tries again; if it lasts, "
    "see https://azure.status.microsoft"
)
_TRANSIENT_STATUS = frozenset({500, 502, 503, 504})  # 501 (not implemented) does not pass
_THROTTLED = {"TooManyRequests", "SubscriptionRequestsThrottled", "TenantRequestsThrottled"}
_TOKEN_CODES = {"InvalidAuthenticationToken", "ExpiredAuthenticationToken"}
_QUOTA_NAME = re.compile(r"exceeding approved (\S+(?: Cores)?) quota")
_LOCATION = re.compile(r"Location: ([a-z0-9]+)")
_AADSTS = re.compile(r"\bAADSTS\d+\b")


def _is_credential_error(e: Exception) -> bool:
    try:
        from azure.core.exceptions import ClientAuthenticationError
    except ImportError:
        return False
    return isinstance(e, ClientAuthenticationError)


def quota_error(text: str, msg: str) -> QuotaError:
    """A quota refusal; the hint names the quota and the location when the message has them."""
    name, loc = _QUOTA_NAME.search(msg), _LOCATION.search(msg)
    target = (f" for {name.group(1)}" if name else "") + (f" in {loc.group(1)}" if loc else "")
    return QuotaError(
        text,
        hint=f"request a quota increase{target} (portal: Subscriptions > Usage + quotas), "
        "or choose another region",
    )


def _connection_failure(e: Exception) -> str:
    """``ServiceRequestError`` (the request could not be sent: no connection, a connect
    timeout) or ``ServiceResponseError`` (no answer: a read timeout, a dropped connection) as
    a few words; "" for anything else."""
    try:
        from azure.core.exceptions import ServiceRequestError, ServiceResponseError
    except ImportError:
        return ""
    if isinstance(e, ServiceResponseError):
        return f"no answer from ARM ({type(e).__name__})"
    if isinstance(e, ServiceRequestError):
        return f"could not reach ARM ({type(e).__name__})"
    return ""


def api_error(prefix: str, e: Exception) -> ProviderError:
    """An azure-core HttpResponseError (or a credential failure) as one line: throttling →
    ThrottledError, a 500/502/503/504 or a connection that failed or timed out →
    TransientError, capacity, a Spot price above ``max_price`` or a size without Spot →
    CapacityError (the offer is refused, not the trial; the last two ``lasting``), credentials
    → ``az login``, quota → the quota to raise, 403 → the role to grant; a call out of its
    deadline (CallDeadlineExceeded) → its last retried failure that passes, else a
    TransientError naming the deadline. Never a token."""
    if isinstance(e, CallDeadlineExceeded):
        last = api_error(prefix, e.last) if e.last is not None else None
        if isinstance(last, TransientError):  # ThrottledError too
            return last
        return TransientError(
            f"{prefix}: a passing failure of the Azure API ({e})", hint=TRANSIENT_HINT
        )
    if type(e).__name__ == "TokenTimeout" and isinstance(e, token_timeout()):
        return TransientError(
            f"{prefix}: {getattr(e, 'message', e)} (a passing failure of its token endpoint)",
            hint="nothing to fix if it passes: spotwise pauses the provider and tries again; if "
            "it lasts, check that `az account get-access-token` answers",
        )
    err = getattr(e, "error", None)
    code = str(getattr(err, "code", "") or "")
    msg = str(getattr(err, "message", "") or getattr(e, "message", "") or type(e).__name__)
    status = getattr(e, "status_code", None)
    text = f"{prefix}: {code + ': ' if code else ''}{msg}".splitlines()[0]
    if status == 429 or code in _THROTTLED:
        why = " ".join(x for x in (str(status or ""), code) if x)
        return ThrottledError(
            f"{prefix}: the Azure API is throttling requests ({why})", hint=THROTTLED_HINT
        )
    if code in _CAPACITY:
        return CapacityError(text)
    spot_price = code == "SpotPriceGreaterThanProvidedMaxPrice"
    if spot_price or (code == "OperationNotAllowed" and _MAX_PRICE_TEXT.search(msg)):
        return CapacityError(text, hint=MAX_PRICE_HINT, lasting=True)  # the offer: not the trial
    if code == "AzureSpotIsNotSupportedForThisVMSize":
        hint = "this VM size has no Spot: spotwise tries another offer"
        return CapacityError(text, hint=hint, lasting=True)
    if status == 401 or code in _TOKEN_CODES:
        return ProviderUnavailable(
            f"{prefix}: the credentials were rejected ({status or 401} {code or 'Unauthorized'})"
            + (f": {msg.splitlines()[0]}" if code else ""),
            hint=LOGIN_HINT,
        )
    if _is_credential_error(e):  # raised by the credential itself: no token could be had
        aadsts = _AADSTS.search(str(e))
        why = f" ({aadsts.group(0)})" if aadsts else ""
        return ProviderUnavailable(f"{prefix}: no usable Azure credential{why}", hint=LOGIN_HINT)
    if code == "QuotaExceeded" or (code == "OperationNotAllowed" and "quota" in msg.lower()):
        return quota_error(text, msg)
    if status == 403 or code == "AuthorizationFailed":
        return ProviderUnavailable(
            text, hint="grant the identity the Virtual Machine Contributor role on the group"
        )
    connection = _connection_failure(e)
    if connection or status in _TRANSIENT_STATUS:
        why = connection or " ".join(x for x in (str(status), code) if x)
        return TransientError(
            f"{prefix}: a passing failure of the Azure API ({why})", hint=TRANSIENT_HINT
        )
    return ProviderError(text)
