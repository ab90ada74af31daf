"""Bounds on the Azure compute client beyond azure-core's own: its credential's token requests
(:class:`BoundedCredential`: azure-identity sends them through a pipeline of its own, 3
retries of 300 s, or ``az``, or managed identity's backoff, none of which the ARM client's
retry policy reaches), and each ARM call as a whole (:class:`BoundedARM`: a listing with all
its pages, an answer however slowly it trickles), with the retry policy
(:func:`retry_policy`) that ends what such a call's abandoned thread may still send. Split
from :mod:`spotwise.providers.azure`."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from functools import cache
from typing import Any

from spotwise.providers.bounded import CallDeadlineExceeded, call_within


@cache
def token_timeout() -> type[Exception]:
    """No token in time, no request sent: azure-core's retry policy passes a
    ClientAuthenticationError up at once; :func:`spotwise.providers.azure.api_error` makes it
    a TransientError."""
    from azure.core.exceptions import ClientAuthenticationError

    return type("TokenTimeout", (ClientAuthenticationError,), {})


class BoundedCredential:
    """``credential`` whose ``get_token``/``get_token_info`` give up after ``timeout_s``: a
    hung token endpoint (azure-identity's own pipeline: 3 retries of 300 s; ``az``; managed
    identity's backoff) hung every ARM call. The request runs in a daemon thread waited for
    until then; the next call for the same scopes waits for one still under way instead of
    sending another, and takes the token of one that answered after its caller had given up
    (while that token has ``LATE_TOKEN_S`` left). Nothing here keeps a token once handed to
    azure-core's policy, nor a failure."""

    LATE_TOKEN_S = 300.0

    def __init__(self, credential: Any, timeout_s: float) -> None:
        self._credential = credential
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._asks: dict[str, Future[Any]] = {}

    @property
    def credential(self) -> Any:
        """The credential whose token requests this bounds."""
        return self._credential

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        return self._ask("get_token", scopes, kwargs)

    def __getattr__(self, name: str) -> Any:  # get_token_info only where the credential has it
        if name == "get_token_info" and hasattr(self.__dict__.get("_credential"), name):
            return lambda *scopes, **kwargs: self._ask(name, scopes, kwargs)
        raise AttributeError(name)

    def _ask(self, method: str, scopes: tuple[str, ...], kwargs: dict[str, Any]) -> Any:
        key = repr((method, scopes, sorted(kwargs.items())))
        with self._lock:
            ask = self._asks.get(key)
            if ask is not None and ask.done() and not self._fresh(ask):
                ask = None  # a late token near its expiry: ask again
            if ask is None:
                ask = self._asks[key] = Future()
                args = (key, ask, getattr(self._credential, method), scopes, kwargs)
                threading.Thread(target=self._send, args=args, daemon=True).start()
        try:
            return ask.result(timeout=self.timeout_s)
        except FutureTimeout:
            raise token_timeout()(
                f"no token from the Azure credential within {self.timeout_s:g} s"
            ) from None
        finally:
            if ask.done():  # handed over (or failed): not kept for the next call
                self._drop(key, ask)

    def _fresh(self, ask: Future[Any]) -> bool:
        if ask.exception() is not None:
            return False
        expires = getattr(ask.result(), "expires_on", None)
        return isinstance(expires, int | float) and expires - time.time() > self.LATE_TOKEN_S

    def _send(self, key: str, ask: Future[Any], method: Any, scopes: Any, kw: Any) -> None:
        try:
            ask.set_result(method(*scopes, **kw))
        except BaseException as e:  # handed to whoever waits
            ask.set_exception(e)
            self._drop(key, ask)

    def _drop(self, key: str, ask: Future[Any]) -> None:
        with self._lock:
            if self._asks.get(key) is ask:
                del self._asks[key]

    def __repr__(self) -> str:
        return f"BoundedCredential({type(self._credential).__name__}, {self.timeout_s:g} s)"


# ---- one deadline per ARM call, all its pages included --------------------------------------
SDK_SHARE = 0.9  # of a call's deadline, for azure-core's own bounds within it (see BoundedARM)
_CALL = threading.local()  # in a BoundedARM call's thread: ``end`` (its SDK_SHARE), ``retried``


def _time_left() -> float | None:
    """What is left of the SDK's share of the deadline of the BoundedARM call this thread runs
    (None: no such call)."""
    end = getattr(_CALL, "end", None)
    return None if end is None else end - time.monotonic()


def cut_to_deadline(request: Any) -> None:
    """A ``raw_request_hook`` (run before each request azure-core sends, its retries included):
    inside a BoundedARM call, the request's read timeout is cut to what is left of the SDK's
    share of the call's deadline, so that a request that gets no answer ends with the call
    (azure-core cuts only the connection timeout)."""
    left = _time_left()
    if left is None:
        return
    per_request = request.context.options  # the transport's keyword arguments
    config = getattr(request.context.transport, "connection_config", None)
    read = per_request.get("read_timeout") or getattr(config, "read_timeout", None)
    if isinstance(read, int | float) and left < read:
        per_request["read_timeout"] = max(left, 0.001)


def _note_retried(response: Any, error: Exception | None) -> None:
    """The failure a BoundedARM call's retry policy retries, kept for the error it ends with."""
    retried: list[Exception] | None = getattr(_CALL, "retried", None)
    if retried is None:
        return
    left = _time_left()
    if error is not None and _timed_out(error) and left is not None and left <= 0.001:
        return  # a request cut by the deadline (cut_to_deadline): the deadline's, not a failure
    if error is None:  # a status it retries (503, ...): the error the SDK would have raised
        from azure.core.exceptions import HttpResponseError

        try:
            from azure.mgmt.core.exceptions import ARMErrorFormat

            error = HttpResponseError(response=response.http_response, error_format=ARMErrorFormat)
        except Exception:  # an answer it cannot parse: the status alone
            error = HttpResponseError(response=getattr(response, "http_response", None))
    retried.append(error)


def retry_policy(deadline_s: float) -> Any:
    """azure-core's RetryPolicy bounded by ``deadline_s`` (see
    :func:`spotwise.providers.azure.client_bounds`); inside a :class:`BoundedARM` call, each
    request (a listing's later page) may retry only for what is left of the SDK's share of the
    call's deadline, so that the call's thread sends nothing once it is given up on, and the
    failures it retries are kept for the error the call ends with."""
    from azure.core.pipeline.policies import RetryPolicy

    cap = deadline_s / 4

    class BoundedRetryPolicy(RetryPolicy):
        def configure_retries(self, options: dict[str, Any]) -> dict[str, Any]:
            settings: dict[str, Any] = super().configure_retries(options)
            left = _time_left()
            if left is not None:  # <= 0: azure-core raises ServiceResponseTimeoutError at once
                settings["timeout"] = min(settings["timeout"], left)
            return settings

        def is_retry(self, settings: dict[str, Any], response: Any) -> bool:
            if not super().is_retry(settings, response):
                return False
            after = self.get_retry_after(response)
            return after is None or after <= cap

        def increment(
            self, settings: dict[str, Any], response: Any = None, error: Any = None
        ) -> bool:
            _note_retried(response, error)
            return bool(super().increment(settings, response=response, error=error))

    return BoundedRetryPolicy(timeout=deadline_s, retry_backoff_max=cap)


class BoundedARM:
    """A management client (``ComputeManagementClient``) whose every call, through its
    operation groups (``client.virtual_machines.list(...)``), gives up ``deadline_s`` after it
    began with :class:`~spotwise.providers.bounded.CallDeadlineExceeded`, whatever ARM does:

    - a listing (an ``ItemPaged``: azure-core sends each page as a request of its own, with a
      retry timeout of its own) is read whole within the call, and returned as a list;
    - the call runs in a daemon thread waited for until the deadline
      (:func:`~spotwise.providers.bounded.call_within`): requests' read timeout bounds each
      socket read, not the answer, so ARM trickling its answer held the caller as long as it
      trickled. The thread is left to end on its own. A launch names its VM after its client
      token (a launch sent again finds it), and a delete may be sent again.

    Within the call, azure-core's own bounds (:func:`retry_policy`, :func:`cut_to_deadline`)
    run to ``SDK_SHARE`` of the deadline: it retries, and waits for each answer, only until
    then, and so reports its own failure (a 503, no answer) before the call is given up on,
    and sends nothing once it is. A timeout that ends the call then is the deadline's.
    The long-running operation a ``begin_*`` call returns is waited for by its caller, as
    before (its polls run in azure-core's own thread)."""

    def __init__(self, client: Any, deadline_s: float) -> None:
        self._client = client
        self._deadline_s = deadline_s

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name.startswith("_"):
            return attr
        if type(attr).__name__.endswith("Operations"):  # an operation group
            return BoundedARM(attr, self._deadline_s)
        if callable(attr):
            return functools.partial(self._call, attr)
        return attr

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        start, retried = time.monotonic(), list[Exception]()
        end, sdk_end = start + self._deadline_s, start + SDK_SHARE * self._deadline_s

        def work() -> Any:
            from azure.core.paging import ItemPaged

            _CALL.end, _CALL.retried = sdk_end, retried
            result = method(*args, **kwargs)
            return list(result) if isinstance(result, ItemPaged) else result

        def last() -> Exception | None:
            return retried[-1] if retried else None

        try:
            return call_within(end, self._deadline_s, work, last=last, name="spotwise-azure-call")
        except Exception as e:
            if time.monotonic() >= sdk_end - 0.001 and _timed_out(e):  # time.time()'s clock
                raise CallDeadlineExceeded(self._deadline_s, last()) from None
            raise

    def __repr__(self) -> str:
        return f"BoundedARM({type(self._client).__name__}, deadline_s={self._deadline_s:g})"


def _timed_out(e: Exception) -> bool:
    from azure.core.exceptions import ServiceRequestTimeoutError, ServiceResponseTimeoutError

    return isinstance(e, ServiceRequestTimeoutError | ServiceResponseTimeoutError)
