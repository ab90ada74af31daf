"""Google Cloud Storage as a :class:`~spotwise.providers.blobs.Blobs` folder: ``gs://bucket/prefix``.

An upload is atomic (GCS makes a new generation visible only once it is complete); the
generation is the version token, so :meth:`GcsBlobs.get` with an earlier token sends
``ifGenerationNotMatch`` and an unchanged object costs a 304 without a transfer. Downloads are
checked against the crc32c GCS sends in ``x-goog-hash``; uploads send theirs for GCS to check.

``google-cloud-storage`` is imported inside functions. Credentials come from Application
Default Credentials (:func:`spotwise.providers.gcp.default_credentials`) and are never stored
beyond the client, logged or printed; with ``STORAGE_EMULATOR_HOST`` set the client talks to
that emulator with anonymous credentials and needs no ADC.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from spotwise.errors import ProviderError, ProviderUnavailable, ThrottledError, TransientError
from spotwise.providers.blobs import check_name, join_key
from spotwise.providers.registry import INSTALL_HINT

URI_HINT = "use gs://BUCKET or gs://BUCKET/PREFIX, e.g. gs://my-bucket/checkpoints/job-1"
BUCKET_RULE = (
    "use 3-63 lowercase letters, digits, '-', '_' or '.', starting and ending with a letter "
    "or digit"
)
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]")
_URI_RE = re.compile(r"^gs:/{1,2}([^/]*)/?(.*)$", re.IGNORECASE)
_URL_PREFIX = re.compile(r"^(GET|POST|PUT|PATCH|DELETE|HEAD) \S+: ")
_SECRET = re.compile(r"(ya29\.[\w.-]+|Bearer\s+\S+|[?&]key=[\w-]+)")
#: A URL's query string (with or without its scheme and host: urllib3 writes "with url:
#: /upload/...?uploadType=resumable&upload_id=..."): a resumable upload's session id is a
#: capability to write to the bucket for a week (review-at AT5), a signed URL's a signature.
QUERY = re.compile(r"(?<=\S)\?[^\s'\")]+")


def parse_gs_uri(uri: str) -> tuple[str, str]:
    """``gs://bucket/some/prefix`` → ``("bucket", "some/prefix")`` (no slashes at the ends).
    Also repairs ``gs:/bucket/...`` (a URI collapsed by ``pathlib``)."""
    m = _URI_RE.match(uri.strip()) if isinstance(uri, str) else None
    if m is None or not m.group(1):
        raise ProviderError(f"gcs: {uri!r} is not a GCS location", hint=URI_HINT)
    bucket, prefix = m.group(1), m.group(2).strip("/")
    if not _BUCKET_RE.fullmatch(bucket) or ".." in bucket or bucket.startswith("goog"):
        raise ProviderError(
            f"gcs: {uri!r} has an invalid bucket name {bucket!r}: {BUCKET_RULE}", hint=URI_HINT
        )
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise ProviderError(
            f"gcs: {uri!r} has an empty, '.' or '..' folder in its prefix: remove it",
            hint=URI_HINT,
        )
    return bucket, prefix


def gs_uri(bucket: str, prefix: str = "") -> str:
    return f"gs://{bucket}/{prefix}".rstrip("/")


def storage_client(project: str | None = None) -> Any:
    """A ``google.cloud.storage.Client`` on Application Default Credentials (or, with
    ``STORAGE_EMULATOR_HOST`` set, on that emulator with anonymous credentials)."""
    try:
        from google.cloud.storage import Client
    except ImportError:
        raise ProviderUnavailable(
            "gcs: google-cloud-storage is not installed", hint=INSTALL_HINT["gcp"]
        ) from None
    if os.environ.get(EMULATOR_ENV):
        from google.auth.credentials import AnonymousCredentials

        return Client(project=project, credentials=AnonymousCredentials())
    from spotwise.providers.gcp import default_credentials

    credentials, adc_project = default_credentials()
    # an explicit None stops the client from looking the project up again; objects need none
    return Client(project=project or adc_project or None, credentials=credentials)


def quiet(client: Any) -> Any:
    """Turn off the client's background bucket-metadata fetch (google-cloud-storage 3.17 starts
    a thread per bucket that GETs the bucket for trace attributes, an extra call that
    ``roles/storage.objectAdmin`` is not allowed and that outlives the operation)."""
    if getattr(client, "_bucket_metadata_cache", None) is not None:
        client._bucket_metadata_cache = None
    return client


def is_sdk_error(exc: BaseException) -> bool:
    """True for failures of GCS, the network or the credentials (not programming errors)."""
    try:
        from google.api_core.exceptions import GoogleAPIError
        from google.auth.exceptions import GoogleAuthError
        from google.cloud.storage.exceptions import DataCorruption, InvalidResponse
        from requests.exceptions import RequestException
    except ImportError:
        return False
    sdk = (GoogleAPIError, GoogleAuthError, DataCorruption, InvalidResponse, RequestException)
    return isinstance(exc, (*sdk, ConnectionError, TimeoutError))


def status(exc: BaseException) -> int | None:
    """The HTTP status of an SDK error (of the last attempt, for a RetryError), if any."""
    code = getattr(exc, "code", None)
    if isinstance(code, int) and code >= 400:
        return code
    status_code = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(status_code, int) and status_code >= 400:
        return status_code
    cause = getattr(exc, "cause", None)
    return status(cause) if isinstance(cause, BaseException) and cause is not exc else None


_TRANSIENT_STATUS = frozenset({408, 500, 502, 503, 504})


def passes(exc: BaseException) -> bool:
    """True for a failure that passes: a 408/5xx answer, a timeout, a dropped connection (of
    the last attempt, for a RetryError)."""
    from google.auth.exceptions import TransportError
    from requests.exceptions import ConnectionError as RequestsConnectionError
    from requests.exceptions import Timeout

    if status(exc) in _TRANSIENT_STATUS:
        return True
    kinds = (TransportError, RequestsConnectionError, Timeout, ConnectionError, TimeoutError)
    if isinstance(exc, kinds):
        return True
    cause = getattr(exc, "cause", None)
    return isinstance(cause, BaseException) and cause is not exc and passes(cause)


def reason(exc: BaseException) -> str:
    """The one-line reason of an SDK error: the API's message, no URL, no credentials."""
    from google.cloud.storage.exceptions import DataCorruption

    if isinstance(exc, DataCorruption):
        return "checksum mismatch: the bytes received differ from the bytes GCS holds"
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException) and cause is not exc:  # a RetryError
        return f"gave up retrying: {reason(cause)}"
    response: Any = getattr(exc, "response", None)
    try:
        text = str(response.json()["error"]["message"])
    except Exception:  # not JSON, no response, or no message: fall back to the exception's text
        text = str(getattr(exc, "message", None) or exc)
    text = _URL_PREFIX.sub("", " ".join(text.split()))
    text = _SECRET.sub("<redacted>", QUERY.sub("", text))
    return text[:200].rstrip() or type(exc).__name__


class GcsBlobs:
    """The objects directly under ``gs://bucket/prefix``."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: Any = None,
        project: str | None = None,
        retry_s: float | None = None,
    ) -> None:
        """``retry_s``: how long transient failures (429, 5xx, network) are retried; None is
        the client's default (120 s), 0 turns retries off."""
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._client = quiet(client) if client is not None else None
        self._project = project
        self._retry_s = retry_s

    @classmethod
    def from_uri(
        cls,
        uri: str,
        *,
        client: Any = None,
        project: str | None = None,
        retry_s: float | None = None,
    ) -> GcsBlobs:
        bucket, prefix = parse_gs_uri(uri)
        return cls(bucket, prefix, client=client, project=project, retry_s=retry_s)

    def __repr__(self) -> str:  # never the client: it holds the credentials
        return f"GcsBlobs({self.uri!r})"

    @property
    def uri(self) -> str:
        return gs_uri(self.bucket, self.prefix)

    def location(self, name: str) -> str:
        return f"{self.uri}/{check_name(name)}"

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                self._client = quiet(storage_client(self._project))
            except ProviderError as e:
                raise type(e)(f"GCS {self.uri}: {e.message}", hint=e.hint) from None
        return self._client

    # -- the Blobs protocol -------------------------------------------------------------------
    def put(self, name: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        blob = self._blob(name)
        with self._mapped("writing", name):
            blob.upload_from_string(bytes(data), content_type=content_type, retry=self._retry())

    def get(self, name: str, token: str = "") -> tuple[bytes | None, str]:
        if token and not token.isdigit():
            raise ValueError(f"a GCS version token is a generation number, got {token!r}")
        blob = self._blob(name)
        from google.api_core.exceptions import NotFound, NotModified

        with self._mapped("reading", name):
            try:
                data = blob.download_as_bytes(
                    if_generation_not_match=int(token) if token else None, retry=self._retry()
                )
            except (NotFound, NotModified):
                return None, token
        return data, str(blob.generation or "")

    def exists(self, name: str) -> bool:
        blob = self._blob(name)
        with self._mapped("checking", name):
            return bool(blob.exists(retry=self._retry()))

    def names(self) -> list[str]:
        base = f"{self.prefix}/" if self.prefix else ""
        client = self.client
        with self._mapped("listing"):
            found = [
                b.name[len(base) :]
                for b in client.list_blobs(
                    self.bucket,
                    prefix=base,
                    delimiter="/",
                    fields="items(name),nextPageToken",
                    retry=self._retry(),
                )
            ]
        return sorted(n for n in found if n and "/" not in n)

    def delete(self, name: str) -> None:
        blob = self._blob(name)
        from google.api_core.exceptions import NotFound

        with self._mapped("deleting", name):
            try:
                blob.delete(retry=self._retry())
            except NotFound:
                return

    # -- helpers ------------------------------------------------------------------------------
    def _blob(self, name: str) -> Any:
        key = join_key(self.prefix, check_name(name))
        return self.client.bucket(self.bucket).blob(key)

    def _retry(self) -> Any:
        from google.cloud.storage.retry import DEFAULT_RETRY

        if self._retry_s is None:
            return DEFAULT_RETRY
        return DEFAULT_RETRY.with_timeout(self._retry_s) if self._retry_s > 0 else None

    @contextmanager
    def _mapped(self, action: str, name: str = "") -> Iterator[None]:
        """SDK failures → ProviderError; anything else (a bug) propagates unchanged."""
        try:
            yield
        except Exception as e:
            if not is_sdk_error(e):
                raise
            raise self.error(e, action, name) from None

    def error(self, exc: BaseException, action: str, name: str = "") -> ProviderError:
        """A one-line ProviderError for a failed call, with the fix as hint where obvious:
        ThrottledError for a 429, TransientError for a failure that passes (:func:`passes`)."""
        from google.auth.exceptions import GoogleAuthError, TransportError

        code = status(exc)
        what = f"{action} {name}".strip()
        label = f"{code} {type(exc).__name__}" if code else type(exc).__name__
        message = f"GCS {self.uri}: {what} failed ({label}: {reason(exc)})"
        if code == 401 or (
            isinstance(exc, GoogleAuthError) and not isinstance(exc, TransportError)
        ):
            return ProviderUnavailable(
                message, hint="renew the credentials: gcloud auth application-default login"
            )
        if code == 403:
            return ProviderUnavailable(
                message,
                hint=f"grant the account roles/storage.objectAdmin on the bucket: gcloud storage "
                f"buckets add-iam-policy-binding gs://{self.bucket} --member=MEMBER "
                "--role=roles/storage.objectAdmin",
            )
        if code == 404 and action in ("writing", "listing"):
            return ProviderError(
                message, hint=f"create it: gcloud storage buckets create gs://{self.bucket}"
            )
        if code == 429:  # the client's own retries gave up: the planner backs off
            return ThrottledError(message)
        if passes(exc):
            return TransientError(message)
        return ProviderError(message)
