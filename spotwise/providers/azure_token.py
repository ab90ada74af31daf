"""A bound on the Azure credential's token requests: azure-identity sends them through a
pipeline of its own (3 retries of 300 s), ``az`` or managed identity's backoff, none of which
the ARM client's bounds (:func:`spotwise.providers.azure.client_bounds`) reach. Split from
:mod:`spotwise.providers.azure`."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from functools import cache
from typing import Any


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
    sending another. Nothing here keeps the token once handed to azure-core's policy."""

    def __init__(self, credential: Any, timeout_s: float) -> None:
        self._credential = credential
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._asks: dict[str, Future[Any]] = {}

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

    def _send(self, key: str, ask: Future[Any], method: Any, scopes: Any, kw: Any) -> None:
        try:
            ask.set_result(method(*scopes, **kw))
        except BaseException as e:  # handed to whoever waits
            ask.set_exception(e)
        finally:
            with self._lock:
                self._asks.pop(key, None)

    def __repr__(self) -> str:
        return f"BoundedCredential({type(self._credential).__name__}, {self.timeout_s:g} s)"
