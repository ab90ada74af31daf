"""How a Compute Engine API call fails, and how long it may take: the mapping of a
``GoogleAPICallError`` (or a credentials failure) to spotwise's errors (:func:`api_error`,
:func:`operation_error`), the ``retry``/``timeout`` every call passes (:func:`call_bounds`,
bounded by the provider option ``api_deadline_s``), and :class:`BoundedClient`, which holds a
whole call (a listing: all its pages) to that deadline. Split from
:mod:`spotwise.providers.gcp`, which re-exports these names."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import re
import time
from collections.abc import Callable
from typing import Any

from spotwise.errors import (
    CapacityError,
    ProviderError,
    ProviderUnavailable,
    QuotaError,
    ThrottledError,
    TransientError,
)
from spotwise.providers.bounded import CallDeadlineExceeded, call_within

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
# a machine type the zone does not offer (gcloud reads this text of instances.insert's 400 as
# an argument error: "Invalid value for field 'resource.machineType': '...'. Machine type with
# name 'X' does not exist in zone 'Z'."): a refusal of the offer, not the trial, and a lasting
# one (the orchestrator avoids the offer for a doubling backoff, not a pass)
_NO_MACHINE_TYPE = re.compile(r"Machine type with name '[^']+' does not exist in zone '[^']+'")
NO_MACHINE_TYPE_HINT = "the zone does not offer this machine type: spotwise tries another offer"
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
    quota → the quota to raise, credentials → how to renew them, 403 → the role to grant, a
    machine type the zone does not offer → a ``lasting`` CapacityError (the offer's); a
    call out of its deadline (:class:`CallDeadlineExceeded`) → its last retried failure, else
    a TransientError saying so. Never the request's headers or a token."""
    if isinstance(e, CallDeadlineExceeded):
        last = api_error(prefix, e.last) if e.last is not None else None
        return last if isinstance(last, TransientError) else transient(prefix, str(e))
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
    if code in (None, 400) and _NO_MACHINE_TYPE.search(msg):
        why = f"{code} {msg}" if code else msg
        return CapacityError(f"{prefix}: {why}", hint=NO_MACHINE_TYPE_HINT, lasting=True)
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


# ---- bounded calls ---------------------------------------------------------------------------
CAPACITY_CODES = (
    "ZONE_RESOURCE_POOL_EXHAUSTED", "RESOURCE_POOL_EXHAUSTED", "STOCKOUT", "RESOURCE_NOT_AVAILABLE",
)  # fmt: skip


_RETRIED_STATUS = frozenset({502, 503, 504})  # UNAVAILABLE, DEADLINE_EXCEEDED; not 500 INTERNAL


def retryable(e: Exception) -> bool:
    """What a call retries within its deadline: a 502/503/504 naming no capacity shortage (a
    stockout answered 503 goes to the planner at once), throttling or quota. Not a 500 (INTERNAL
    is no failure to repeat at once, AIP-194; spotwise pauses the provider on the TransientError
    it is), a 429 or another rate limit (spotwise backs off from a ThrottledError itself), nor a
    timeout or dropped connection (it already took its per-request timeout)."""
    code = getattr(e, "code", None)
    if not isinstance(code, int) or code not in _RETRIED_STATUS:
        return False
    text = f"{getattr(e, 'message', '')} {e}"
    if any(c in text for c in CAPACITY_CODES):
        return False
    return not _reasons(e) & (_THROTTLED | _QUOTA_REASONS)


def call_bounds(deadline_s: float) -> dict[str, Any]:
    """``retry`` and ``timeout`` for a compute_v1 call, in place of the generated client's
    defaults (compute_v1/services/*/transports/base.py: reads retry 503/504 for up to 600 s,
    any request may take 600 s): :func:`retryable` failures retried until ``deadline_s``, then
    api_core's RetryError (:func:`api_error` maps its cause); each request may take half of
    ``deadline_s``. :class:`BoundedClient` shrinks both, for a listing's later pages, to what
    is left of the listing's deadline."""
    from google.api_core.retry import Retry

    retry = Retry(
        predicate=retryable,
        initial=min(1.0, deadline_s / 10),
        maximum=min(10.0, deadline_s / 4),
        multiplier=2.0,
        timeout=deadline_s,
        on_error=_note_retried,
    )
    return {"retry": retry, "timeout": deadline_s / 2}


# ---- one deadline per call, all its pages included -------------------------------------------
_RETRIED: contextvars.ContextVar[list[Exception] | None] = contextvars.ContextVar(
    "spotwise_gcp_retried", default=None
)


def _note_retried(e: Exception) -> None:
    """Retry's ``on_error``: keeps the failure a call retried, for the error it ends with."""
    seen = _RETRIED.get()
    if seen is not None:
        seen.append(e)


class BoundedClient:
    """A compute_v1 client whose every call gives up ``deadline_s`` after it began, with
    :class:`CallDeadlineExceeded`, whatever the server does:

    - the pages of a listing share the deadline of its first request: a later page is sent
      with the retry's timeout and the request's timeout cut to what is left (api_core's
      pagers send each page as a call of its own, with the first one's ``retry``/``timeout``);
    - each request runs in a daemon thread that the caller waits for until the deadline
      (:func:`spotwise.providers.bounded.call_within`): requests' ``timeout`` bounds each
      socket read, not the answer, so a server that trickles its answer would hold the caller
      for as long as it likes. The thread is left to finish (its request times out or ends)
      on its own; launches and deletes carry a requestId, so sending them again is safe.
    """

    def __init__(self, client: Any, deadline_s: float) -> None:
        self._client = client
        self._deadline_s = deadline_s

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name.startswith("_") or not callable(attr):
            return attr
        return functools.partial(self._call, attr)

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        end, retried = time.monotonic() + self._deadline_s, list[Exception]()
        result = self._send(end, retried, method, *args, **kwargs)
        if type(result).__name__.endswith("Pager") and "_method" in vars(result):
            result._method = functools.partial(self._send, end, retried, result._method)
        return result

    def _send(
        self,
        end: float,
        retried: list[Exception],
        method: Callable[..., Any],
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        left = end - time.monotonic()
        if left <= 0:
            raise CallDeadlineExceeded(self._deadline_s, retried[-1] if retried else None)
        retry: Any = kwargs.get("retry")
        timeout = kwargs.get("timeout")
        if hasattr(retry, "with_timeout"):
            kwargs["retry"] = retry.with_timeout(left)
        if isinstance(timeout, int | float):
            kwargs["timeout"] = min(float(timeout), left)
        context = contextvars.copy_context()
        context.run(_RETRIED.set, retried)
        return call_within(
            end,
            self._deadline_s,
            functools.partial(context.run, method, *args, **kwargs),
            last=lambda: retried[-1] if retried else None,
            name="spotwise-gcp-call",
        )

    def __repr__(self) -> str:
        return f"BoundedClient({type(self._client).__name__}, deadline_s={self._deadline_s:g})"


def read_timed_out(e: BaseException) -> bool:
    """The request was sent; no answer came within its timeout."""
    try:
        from requests.exceptions import ReadTimeout
    except ImportError:
        return False
    return isinstance(e, ReadTimeout)


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
