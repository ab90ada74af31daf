"""Azure Blob Storage as a :class:`~spotwise.providers.blobs.Blobs` folder.

A location is ``az://<account>/<container>[/<prefix>]``: the storage account is part of the
URI, so a location is self-contained. The service endpoint is
``https://<account>.blob.core.windows.net``; ``SPOTWISE_AZURE_BLOB_ENDPOINT`` overrides it with
a URL template containing ``{account}`` (e.g. ``http://127.0.0.1:10000/{account}`` for the
Azurite emulator).

Credentials: ``azure.identity.DefaultAzureCredential`` (environment, workload or managed
identity, Azure CLI, ...) unless one is passed; spotwise never stores, logs or prints a token
or key. A token request gives up after half of ``api_deadline_s`` (60 s unless the caller
passes another) with a TransientError naming the call and that time, and a call that gets no
token is not retried by the storage SDK (a missing credential is reported at once, as one).
azure-storage-blob refuses bearer tokens over plain ``http://`` (they would travel in
clear text), so for an ``http://`` endpoint a token credential is not used: requests are
signed with the account key in ``AZURE_STORAGE_KEY`` when it is set (Azurite's well-known
``devstoreaccount1`` key), else sent anonymously. A key or SAS credential passed explicitly
is used as given.

``azure-storage-blob`` is imported inside functions only; without it calls raise
:class:`~spotwise.errors.ProviderUnavailable` with ``pip install 'spotwise[azure]'``.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from typing import Any

from spotwise.errors import ProviderError, ProviderUnavailable, ThrottledError, TransientError
from spotwise.providers.azure_token import BoundedCredential, token_timeout
from spotwise.providers.blobs import check_name, join_key
from spotwise.providers.registry import INSTALL_HINT

ENDPOINT_ENV = "SPOTWISE_AZURE_BLOB_ENDPOINT"
KEY_ENV = "AZURE_STORAGE_KEY"
URI_FORM = "az://<account>/<container>[/<prefix>]"
URI_HINT = f"use {URI_FORM}, e.g. az://mystorageacct/checkpoints/job-1"
_ACCOUNT_RE = re.compile(r"[a-z0-9]{3,24}")
_CONTAINER_RE = re.compile(r"(?=.{3,63}$)[a-z0-9]+(?:-[a-z0-9]+)*")
_URI_RE = re.compile(r"^az:/{1,2}([^/]*)/?([^/]*)/?(.*)$")
_PERMISSION_CODES = ("AuthorizationPermissionMismatch", "AuthorizationFailure")
_AUTH_CODES = ("AuthenticationFailed", "InvalidAuthenticationInfo", "NoAuthenticationInformation")
_GET_ATTEMPTS = 3  # a blob replaced between the chunks of one download is read again


def _check_names(account: str, container: str, where: str) -> None:
    if not _ACCOUNT_RE.fullmatch(account):
        raise ProviderError(
            f"azure: {where!r} names storage account {account!r}: use 3-24 lowercase letters "
            "and digits, as the account is named in Azure",
            hint=URI_HINT,
        )
    if not _CONTAINER_RE.fullmatch(container):
        raise ProviderError(
            f"azure: {where!r} names container {container!r}: use 3-63 lowercase letters, digits "
            "and single hyphens, starting with a letter or digit",
            hint=URI_HINT,
        )


def parse_az_uri(uri: str) -> tuple[str, str, str]:
    """``az://acct/container/some/prefix`` → ``("acct", "container", "some/prefix")``; also
    repairs ``az:/acct/...`` (a URI collapsed by ``pathlib``)."""
    m = _URI_RE.match(uri.strip()) if isinstance(uri, str) else None
    if m is None or not m.group(1) or not m.group(2):
        raise ProviderError(
            f"azure: {uri!r} is not an Azure Blob location; expected {URI_FORM}", hint=URI_HINT
        )
    account, container, prefix = m.group(1), m.group(2), m.group(3).strip("/")
    _check_names(account, container, uri)
    return account, container, prefix


def az_uri(account: str, container: str, prefix: str = "") -> str:
    return f"az://{account}/{container}/{prefix.strip('/')}".rstrip("/")


def account_url(account: str) -> str:
    """The Blob service endpoint of ``account`` (``SPOTWISE_AZURE_BLOB_ENDPOINT`` if set)."""
    template = os.environ.get(ENDPOINT_ENV, "").strip()
    if not template:
        return f"https://{account}.blob.core.windows.net"
    if "{account}" not in template or not re.match(r"^https?://[^/?#\s]+", template):
        shown = template.split("?", 1)[0]  # never echo a query string (it could be a SAS)
        raise ProviderError(
            f"azure: {ENDPOINT_ENV}={shown!r} must be an http(s) URL template containing "
            "{account}",
            hint=f"e.g. {ENDPOINT_ENV}=http://127.0.0.1:10000/{{account}} for Azurite",
        )
    return template.replace("{account}", account).rstrip("/")


def _unavailable(what: str) -> ProviderUnavailable:
    return ProviderUnavailable(f"azure: {what} is not installed", hint=INSTALL_HINT["azure"])


def container_client(
    account: str,
    container: str,
    credential: Any = None,
    *,
    token_timeout_s: float | None = None,
    **options: Any,
) -> Any:
    """An ``azure.storage.blob.ContainerClient``; ``options`` go to its constructor
    (``retry_total``, ``max_single_put_size``, ...). A token credential's requests give up
    after ``token_timeout_s`` (default: half the azure provider's default ``api_deadline_s``),
    and a call that gets no token fails at once (:func:`no_token_retry`)."""
    try:
        from azure.storage.blob import ContainerClient
    except ImportError:
        raise _unavailable("azure-storage-blob") from None
    url = account_url(account)
    if url.lower().startswith("https://"):
        from spotwise.providers.azure import DEFAULT_API_DEADLINE_S, default_credential

        if credential is None:
            credential = default_credential()
        if hasattr(credential, "get_token"):
            timeout_s = token_timeout_s or DEFAULT_API_DEADLINE_S / 2
            credential = BoundedCredential(credential, timeout_s)
            options.setdefault("retry_policy", no_token_retry(options))
    elif credential is None or hasattr(credential, "get_token"):  # no bearer token over http
        credential = None
        key = os.environ.get(KEY_ENV, "")
        if key:
            from azure.core.credentials import AzureNamedKeyCredential

            credential = AzureNamedKeyCredential(account, key)
    return ContainerClient(url, container, credential=credential, **options)


def no_token_retry(options: dict[str, Any]) -> Any:
    """The storage SDK's retry policy (``ExponentialRetry`` on ``options``, as it makes its
    own), except that a call whose credential gave no token is not retried: nothing was sent,
    and the SDK would ask the credential again after backing off 15 s, 18 s, 24 s (its default
    3 retries: a minute before a missing credential was reported, 4 times the token timeout
    and that minute for a token endpoint that does not answer). azure-core's ARM retry policy
    does not retry it either; azure-identity retries its own requests."""
    from azure.core.exceptions import ClientAuthenticationError
    from azure.storage.blob import ExponentialRetry

    class NoTokenRetry(ExponentialRetry):  # type: ignore[misc]
        def increment(
            self, settings: dict[str, Any], request: Any, response: Any = None, error: Any = None
        ) -> bool:
            if isinstance(error, ClientAuthenticationError) and error.response is None:
                return False
            return bool(super().increment(settings, request, response=response, error=error))

    return NoTokenRetry(**options)


def error_code(exc: BaseException) -> str:
    """The storage error code of an azure-core error (``""`` when it has none)."""
    code = getattr(exc, "error_code", None)
    if code is None:
        response = getattr(exc, "response", None)
        code = getattr(response, "headers", {}).get("x-ms-error-code") if response else None
    return str(getattr(code, "value", code) or "")


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "message", "") or "").strip().splitlines()
    line = text[0].strip() if text else ""
    # drop query strings (a SAS), of full URLs and of urllib3's "with url: /path?query" too
    line = re.sub(r"(?<=\S)\?[^\s'\")]+", "", line)
    return re.sub(r"(?i)(bearer|sharedkey)\s+\S+", r"\1 <redacted>", line)[:200]


def blob_error(
    exc: BaseException, account: str, container: str, where: str, action: str
) -> ProviderError:
    """An azure-core error as one line naming the location, the action and the service's error
    code, with a hint where the fix is known. Never headers, tokens or query strings. A 429
    (or 503 ``ServerBusy``) is a ThrottledError; a 408/5xx, a read timeout or a dropped
    connection a TransientError."""
    from azure.core.exceptions import (
        ClientAuthenticationError,
        ServiceRequestError,
        ServiceRequestTimeoutError,
        ServiceResponseError,
    )

    status = getattr(exc, "status_code", None)
    code = error_code(exc)
    prefix = f"azure: {action} {where} failed"
    if isinstance(exc, token_timeout()):  # the token endpoint did not answer: it passes
        return TransientError(
            f"{prefix}: {getattr(exc, 'message', exc)} (a passing failure of its token endpoint)",
            hint="nothing to fix if it passes; if it lasts, check that `az account "
            "get-access-token` answers",
        )
    if isinstance(exc, ClientAuthenticationError) and getattr(exc, "response", None) is None:
        return ProviderUnavailable(
            f"{prefix}: no Azure credential could get a token ({type(exc).__name__})",
            hint="az login",
        )
    if isinstance(exc, ServiceResponseError | ServiceRequestTimeoutError):
        # sent (or connecting) but no answer in time, or the connection dropped: it passes
        return TransientError(
            f"{prefix}: no answer from the Blob service ({type(exc).__name__})",
            hint=f"nothing to fix if it passes; if it lasts, check that storage account "
            f"{account} is reachable"
            + (f" at ${ENDPOINT_ENV}" if os.environ.get(ENDPOINT_ENV) else ""),
        )
    if isinstance(exc, ServiceRequestError):  # could not send: a misspelt account's name
        # does not resolve, so this is not taken for a failure that passes
        return ProviderError(
            f"{prefix}: cannot reach the Blob service ({type(exc).__name__})",
            hint=f"check that storage account {account} exists and is reachable"
            + (f" at ${ENDPOINT_ENV}" if os.environ.get(ENDPOINT_ENV) else ""),
        )
    detail = code or type(exc).__name__
    if status:
        detail += f" (HTTP {status})"
    reason = _first_line(exc)
    text = f"{prefix}: {detail}" + (f": {reason}" if reason and reason != code else "")
    if code == "ContainerNotFound":
        return ProviderError(
            text,
            hint=f"create it: az storage container create --account-name {account} "
            f"--name {container} --auth-mode login",
        )
    if status == 401 or code in _AUTH_CODES:
        return ProviderUnavailable(text, hint="az login")
    if status == 403 or code in _PERMISSION_CODES:
        return ProviderError(
            text,
            hint=f"grant your identity the Storage Blob Data Contributor role on container "
            f"{container} of storage account {account}",
        )
    if status == 429 or (code == "ServerBusy" and status == 503):
        return ThrottledError(text)  # the SDK's own retries gave up: the planner backs off
    if status in (408, 500, 502, 503, 504):  # InternalError, OperationTimedOut, ...: it passes
        return TransientError(text)
    return ProviderError(text)


class AzureBlobs:
    """The blobs directly under ``az://<account>/<container>/<prefix>``."""

    def __init__(
        self,
        account: str,
        container: str,
        prefix: str = "",
        *,
        client: Any = None,
        credential: Any = None,
        client_options: dict[str, Any] | None = None,
        api_deadline_s: float | None = None,
    ) -> None:
        """``client_options`` go to the ``ContainerClient`` made on first use (e.g.
        ``retry_total``: the SDK's default retries a failing call for minutes); a token
        request gives up after half of ``api_deadline_s`` (default: the azure provider's)."""
        _check_names(account, container, az_uri(account, container, prefix))
        self.account = account
        self.container = container
        self.prefix = prefix.strip("/")
        self._client = client
        self._credential = credential  # handed to the client on first use, then dropped
        self._options = dict(client_options or {})
        self._token_timeout_s = api_deadline_s / 2 if api_deadline_s else None

    @classmethod
    def from_uri(
        cls,
        uri: str,
        *,
        client: Any = None,
        credential: Any = None,
        client_options: dict[str, Any] | None = None,
        api_deadline_s: float | None = None,
    ) -> AzureBlobs:
        account, container, prefix = parse_az_uri(uri)
        return cls(
            account,
            container,
            prefix,
            client=client,
            credential=credential,
            client_options=client_options,
            api_deadline_s=api_deadline_s,
        )

    def __repr__(self) -> str:
        return f"AzureBlobs({self.uri!r})"

    @property
    def uri(self) -> str:
        return az_uri(self.account, self.container, self.prefix)

    def location(self, name: str) -> str:
        return f"{self.uri}/{name}"

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = container_client(
                self.account,
                self.container,
                self._credential,
                token_timeout_s=self._token_timeout_s,
                **self._options,
            )
            self._credential = None
        return self._client

    @contextlib.contextmanager
    def _mapped(self, action: str, name: str = "") -> Iterator[None]:
        from azure.core.exceptions import AzureError

        try:
            yield
        except AzureError as e:
            where = self.location(name) if name else self.uri
            raise blob_error(e, self.account, self.container, where, action) from None

    def _blob(self, name: str) -> Any:
        return self.client.get_blob_client(join_key(self.prefix, check_name(name)))

    def put(self, name: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        from azure.storage.blob import ContentSettings

        blob = self._blob(name)
        with self._mapped("writing", name):
            blob.upload_blob(
                bytes(data),
                overwrite=True,
                content_settings=ContentSettings(content_type=content_type),
            )

    def get(self, name: str, token: str = "") -> tuple[bytes | None, str]:
        from azure.core import MatchConditions
        from azure.core.exceptions import HttpResponseError

        blob = self._blob(name)
        cond: dict[str, Any] = {}
        if token:
            cond = {"etag": token, "match_condition": MatchConditions.IfModified}
        attempts = 0
        with self._mapped("reading", name):
            while True:
                attempts += 1
                try:
                    stream = blob.download_blob(**cond)
                    return bytes(stream.readall()), str(stream.properties.etag)
                except HttpResponseError as e:
                    if e.status_code == 304 or error_code(e) == "BlobNotFound":
                        return None, token
                    if e.status_code != 412 or attempts >= _GET_ATTEMPTS:
                        raise  # 412: replaced between two chunks; read the new version

    def exists(self, name: str) -> bool:
        from azure.core.exceptions import ResourceNotFoundError

        blob = self._blob(name)
        with self._mapped("checking", name):
            try:
                blob.get_blob_properties()
            except ResourceNotFoundError as e:
                if error_code(e) in ("BlobNotFound", ""):
                    return False
                raise
        return True

    def names(self) -> list[str]:
        from azure.storage.blob import BlobPrefix

        base = f"{self.prefix}/" if self.prefix else ""
        out: list[str] = []
        with self._mapped("listing"):
            for item in self.client.walk_blobs(name_starts_with=base or None, delimiter="/"):
                if isinstance(item, BlobPrefix):
                    continue
                name = str(item.name)[len(base) :]
                if name and "/" not in name:
                    out.append(name)
        return sorted(out)

    def delete(self, name: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        blob = self._blob(name)
        with self._mapped("deleting", name):
            try:
                blob.delete_blob(delete_snapshots="include")
            except ResourceNotFoundError as e:
                if error_code(e) != "BlobNotFound":
                    raise
