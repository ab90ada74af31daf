"""An in-memory Azure Blob Storage account, served to the REAL azure-storage-blob client.

azure-core's default transport sends through ``requests``, so ``responses`` callbacks on
``https://<account>.blob.core.windows.net`` (or any base URL, e.g. an Azurite-style
``http://127.0.0.1:10000/<account>``) answer it and the client's own code runs: URL building,
the bearer-token policy, block uploads, the ranged downloader, list paging, error parsing.

Supported REST operations: Put Blob; Put Block + Put Block List; Get Blob (whole or
``x-ms-range``/``Range``; ``If-Match`` → 412, ``If-None-Match`` → 304; 416 for a range on an
empty blob, as the service does); Get Blob Properties (HEAD); List Blobs (``prefix``,
``delimiter`` → ``BlobPrefix`` entries, ``marker``/``NextMarker`` pages of at most
``page_size`` entries); Delete Blob; Create Container. A missing container answers 404
``ContainerNotFound``; :meth:`FakeBlobService.fail` injects any status and error code
(403 ``AuthorizationPermissionMismatch``, 500 ``InternalError``, ...).
"""

from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

import pytest
import responses

from spotwise.checkpoint.azure_blob import AzureBlobCheckpointStore
from spotwise.checkpoint.base import ManifestCheckpointStore

ACCOUNT = "spotwisetest"
CONTAINER = "checkpoints"
TOKEN = "fake-bearer-token-for-tests"
# Small sizes so a few KB already goes through Put Block / Put Block List and ranged GETs.
CLIENT_OPTIONS: dict[str, Any] = {
    "retry_total": 0,
    "max_single_put_size": 1024,
    "max_block_size": 512,
    "max_single_get_size": 1024,
    "max_chunk_get_size": 512,
}
Reply = tuple[int, dict[str, str], bytes]
Query = dict[str, str]


class FakeCredential:
    """Anything with ``get_token`` serves azure-core's bearer-token policy."""

    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.calls = 0

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        self.calls += 1
        return AccessToken(self.token, 4_102_444_800)


@dataclass
class FakeBlob:
    data: bytes
    etag: str
    last_modified: str
    content_type: str = "application/octet-stream"


Container = dict[str, FakeBlob]  # blob name → blob


@dataclass
class Seen:
    """One request the fake answered: method, operation, container, blob name, headers
    (lower-case names), query parameters and the status it got."""

    method: str
    op: str
    container: str
    blob: str
    headers: dict[str, str]
    query: Query
    status: int = 0


@dataclass
class _Failure:
    status: int
    code: str
    times: int | None
    methods: tuple[str, ...]


@dataclass
class FakeBlobService:
    """One storage account: ``containers[name][blob name] = FakeBlob``."""

    account: str = ACCOUNT
    base_url: str = ""
    page_size: int = 2
    containers: dict[str, dict[str, FakeBlob]] = field(default_factory=dict)
    requests: list[Seen] = field(default_factory=list)
    hooks: list[Callable[[Seen], None]] = field(default_factory=list)
    _blocks: dict[tuple[str, str], dict[str, bytes]] = field(default_factory=dict)
    _failures: list[_Failure] = field(default_factory=list)
    _version: int = 0

    def __post_init__(self) -> None:
        default = f"https://{self.account}.blob.core.windows.net"
        self.base_url = (self.base_url or default).rstrip("/")

    # -- test helpers -----------------------------------------------------------------------
    def install(self, rsps: responses.RequestsMock) -> None:
        pattern = re.compile(re.escape(self.base_url) + r"(/.*)?$")
        for method in ("GET", "PUT", "HEAD", "DELETE"):
            rsps.add_callback(method, pattern, callback=self._handle)

    def create_container(self, name: str = CONTAINER) -> dict[str, FakeBlob]:
        return self.containers.setdefault(name, {})

    def write(self, container: str, name: str, data: bytes, content_type: str = "") -> FakeBlob:
        """Store a blob directly (a new ETag), as another writer would."""
        self._version += 1
        blob = FakeBlob(
            bytes(data),
            f'"0x8DD{self._version:013X}"',
            formatdate(1_767_225_600 + self._version, usegmt=True),
            content_type or "application/octet-stream",
        )
        self.containers[container][name] = blob
        return blob

    def fail(
        self, status: int, code: str, *, times: int | None = None, methods: tuple[str, ...] = ()
    ) -> None:
        """Answer the next ``times`` requests (all, when None) with ``status`` and ``code``."""
        self._failures.append(_Failure(status, code, times, methods))

    def ops(self, op: str) -> list[Seen]:
        return [s for s in self.requests if s.op == op]

    def listing_pages(self) -> list[int]:
        """How many pages each listing so far took (a listing starts without a marker)."""
        pages: list[int] = []
        for seen in self.ops("list-blobs"):
            if seen.query.get("marker"):
                pages[-1] += 1
            else:
                pages.append(1)
        return pages

    # -- the REST API -----------------------------------------------------------------------
    def _handle(self, request: Any) -> Reply:
        parts = urlsplit(request.url)
        path = unquote(parts.path[len(urlsplit(self.base_url).path) :]).lstrip("/")
        container, _, blob = path.partition("/")
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        headers = {k.lower(): str(v) for k, v in request.headers.items()}
        op = _operation(request.method, query, blob)
        seen = Seen(request.method, op, container, blob, headers, query)
        self.requests.append(seen)
        for hook in list(self.hooks):
            hook(seen)
        reply = self._dispatch(seen, query, _body(request.body))
        seen.status = reply[0]
        return reply

    def _dispatch(self, seen: Seen, query: dict[str, str], body: bytes) -> Reply:
        for failure in self._failures:
            if failure.times != 0 and (not failure.methods or seen.method in failure.methods):
                if failure.times is not None:
                    failure.times -= 1
                return _error(failure.status, failure.code, seen.method)
        if seen.op == "create-container":
            if seen.container in self.containers:
                return _error(409, "ContainerAlreadyExists", seen.method)
            self.create_container(seen.container)
            return 201, _common(), b""
        blobs = self.containers.get(seen.container)
        if blobs is None:
            return _error(404, "ContainerNotFound", seen.method)
        handler = {
            "put-blob": self._put_blob,
            "put-block": self._put_block,
            "put-block-list": self._put_block_list,
            "get-blob": self._get_blob,
            "get-properties": self._get_blob,
            "delete-blob": self._delete_blob,
            "list-blobs": self._list_blobs,
        }.get(seen.op)
        if handler is None:
            return _error(501, "NotImplementedByFake", seen.method)
        return handler(seen, blobs, query, body)

    def _written(self, seen: Seen, data: bytes) -> Reply:
        content_type = seen.headers.get("x-ms-blob-content-type", "")
        blob = self.write(seen.container, seen.blob, data, content_type)
        return 201, {**_common(), "ETag": blob.etag, "Last-Modified": blob.last_modified}, b""

    def _put_blob(self, seen: Seen, blobs: Container, q: Query, body: bytes) -> Reply:
        if seen.headers.get("x-ms-blob-type") != "BlockBlob":
            return _error(400, "InvalidHeaderValue", seen.method)
        if seen.headers.get("if-none-match") == "*" and seen.blob in blobs:
            return _error(409, "BlobAlreadyExists", seen.method)
        return self._written(seen, body)

    def _put_block(self, seen: Seen, blobs: Container, q: Query, body: bytes) -> Reply:
        self._blocks.setdefault((seen.container, seen.blob), {})[q["blockid"]] = body
        return 201, _common(), b""

    def _put_block_list(self, seen: Seen, blobs: Container, q: Query, body: bytes) -> Reply:
        staged = self._blocks.pop((seen.container, seen.blob), {})
        ids = [el.text or "" for el in ET.fromstring(body) if el.tag in ("Latest", "Uncommitted")]
        if any(i not in staged for i in ids):
            return _error(400, "InvalidBlockList", seen.method)
        return self._written(seen, b"".join(staged[i] for i in ids))

    def _get_blob(self, seen: Seen, blobs: Container, q: Query, body: bytes) -> Reply:
        blob = blobs.get(seen.blob)
        if blob is None:
            return _error(404, "BlobNotFound", seen.method)
        if_match, if_none = seen.headers.get("if-match"), seen.headers.get("if-none-match")
        if if_match and if_match not in ("*", blob.etag):
            return _error(412, "ConditionNotMet", seen.method)
        if if_none and if_none in ("*", blob.etag):
            return _error(304, "ConditionNotMet", "HEAD")  # a 304 has no body
        props = {
            **_common(),
            "ETag": blob.etag,
            "Last-Modified": blob.last_modified,
            "Content-Type": blob.content_type,
            "x-ms-blob-type": "BlockBlob",
            "Accept-Ranges": "bytes",
        }
        if seen.op == "get-properties":
            return 200, {**props, "Content-Length": str(len(blob.data))}, b""
        wanted = seen.headers.get("x-ms-range") or seen.headers.get("range")
        if not wanted:
            return 200, props, blob.data
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted)
        size = len(blob.data)
        if m is None or int(m.group(1)) >= size:
            return _error(416, "InvalidRange", seen.method)
        start = int(m.group(1))
        end = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
        props["Content-Range"] = f"bytes {start}-{end}/{size}"
        return 206, props, blob.data[start : end + 1]

    def _delete_blob(self, seen: Seen, blobs: Container, q: Query, body: bytes) -> Reply:
        if blobs.pop(seen.blob, None) is None:
            return _error(404, "BlobNotFound", seen.method)
        return 202, _common(), b""

    def _list_blobs(self, seen: Seen, blobs: Container, q: Query, body: bytes) -> Reply:
        prefix, delimiter = q.get("prefix", ""), q.get("delimiter", "")
        entries: dict[str, FakeBlob | None] = {}  # name → blob, or None for a BlobPrefix
        for name in blobs:
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix) :]
            if delimiter and delimiter in rest:
                entries[prefix + rest[: rest.index(delimiter) + len(delimiter)]] = None
            else:
                entries[name] = blobs[name]
        names = sorted(entries)
        marker = base64.urlsafe_b64decode(q["marker"]).decode() if q.get("marker") else ""
        names = [n for n in names if n >= marker]
        size = min(int(q.get("maxresults") or 5000), self.page_size)
        page, rest_names = names[:size], names[size:]
        items = []
        for name in page:
            blob = entries[name]
            if blob is None:
                items.append(f"<BlobPrefix><Name>{escape(name)}</Name></BlobPrefix>")
            else:
                items.append(
                    f"<Blob><Name>{escape(name)}</Name><Properties>"
                    f"<Creation-Time>{blob.last_modified}</Creation-Time>"
                    f"<Last-Modified>{blob.last_modified}</Last-Modified>"
                    f"<Etag>{escape(blob.etag)}</Etag>"
                    f"<Content-Length>{len(blob.data)}</Content-Length>"
                    f"<Content-Type>{escape(blob.content_type)}</Content-Type>"
                    "<BlobType>BlockBlob</BlobType><LeaseStatus>unlocked</LeaseStatus>"
                    "<LeaseState>available</LeaseState><ServerEncrypted>true</ServerEncrypted>"
                    "</Properties><OrMetadata /></Blob>"
                )
        next_marker = (
            base64.urlsafe_b64encode(rest_names[0].encode()).decode() if rest_names else ""
        )
        xml = (
            '<?xml version="1.0" encoding="utf-8"?>'
            f'<EnumerationResults ServiceEndpoint="{escape(self.base_url)}/" '
            f'ContainerName="{escape(seen.container)}">'
            f"<Prefix>{escape(prefix)}</Prefix><Marker>{escape(q.get('marker', ''))}</Marker>"
            f"<MaxResults>{size}</MaxResults><Delimiter>{escape(delimiter)}</Delimiter>"
            f"<Blobs>{''.join(items)}</Blobs>"
            + (f"<NextMarker>{next_marker}</NextMarker>" if next_marker else "<NextMarker />")
            + "</EnumerationResults>"
        )
        return 200, {**_common(), "Content-Type": "application/xml"}, xml.encode()


def _operation(method: str, query: dict[str, str], blob: str) -> str:
    comp, restype = query.get("comp", ""), query.get("restype", "")
    if restype == "container":
        if method == "GET" and comp == "list":
            return "list-blobs"
        return "create-container" if method == "PUT" and not comp else f"container-{comp}"
    if not blob:
        return f"unsupported-{method.lower()}"
    return {
        ("PUT", ""): "put-blob",
        ("PUT", "block"): "put-block",
        ("PUT", "blocklist"): "put-block-list",
        ("GET", ""): "get-blob",
        ("HEAD", ""): "get-properties",
        ("DELETE", ""): "delete-blob",
    }.get((method, comp), f"unsupported-{method.lower()}-{comp}")


def _body(body: Any) -> bytes:
    """The request body as bytes (the client may send bytes, str, a stream or chunks)."""
    if body is None or isinstance(body, bytes):
        return body or b""
    if isinstance(body, str):
        return body.encode()
    if hasattr(body, "read"):
        return bytes(body.read())
    return b"".join(bytes(chunk) for chunk in body)


def _common() -> dict[str, str]:
    return {"x-ms-request-id": "00000000-0000-0000-0000-000000000000", "x-ms-version": "2026-10-06"}


_MESSAGES = {
    "ContainerNotFound": "The specified container does not exist.",
    "BlobNotFound": "The specified blob does not exist.",
    "AuthorizationPermissionMismatch": "This request is not authorized to perform this "
    "operation using this permission.",
    "InternalError": "The server encountered an internal error. Please retry the request.",
    "ConditionNotMet": "The condition specified using HTTP conditional header(s) is not met.",
}


def _error(status: int, code: str, method: str) -> Reply:
    """The service's error reply: the code in ``x-ms-error-code`` and, but for HEAD, an XML
    body with the code and a message (its second line a request id, like the real one)."""
    headers = {**_common(), "x-ms-error-code": code}
    if method == "HEAD":
        return status, headers, b""
    message = f"{_MESSAGES.get(code, code)}\nRequestId:00000000-0000\nTime:2026-01-01T00:00:00Z"
    body = (
        '<?xml version="1.0" encoding="utf-8"?>'
        f"<Error><Code>{code}</Code><Message>{escape(message)}</Message></Error>"
    )
    return status, {**headers, "Content-Type": "application/xml"}, body.encode()


# -- wiring for tests -------------------------------------------------------------------------
def start_fake(request: pytest.FixtureRequest, **kwargs: Any) -> FakeBlobService:
    """A fake account (with container ``checkpoints``) answering until the test ends; the
    endpoint override and storage key are cleared from the environment for the test."""
    monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    monkeypatch.delenv("SPOTWISE_AZURE_BLOB_ENDPOINT", raising=False)
    monkeypatch.delenv("AZURE_STORAGE_KEY", raising=False)
    fake = FakeBlobService(**kwargs)
    fake.create_container(CONTAINER)
    mock = responses.RequestsMock(assert_all_requests_are_fired=False)
    fake.install(mock)
    mock.start()
    request.addfinalizer(mock.stop)
    return fake


def fake_client(
    fake: FakeBlobService, container: str = CONTAINER, credential: Any = None, **options: Any
) -> Any:
    """A real ``ContainerClient`` on the fake: fake token, no retries, tiny block sizes."""
    from spotwise.providers.azure_blobs import container_client

    cred = credential if credential is not None else FakeCredential()
    return container_client(fake.account, container, cred, **{**CLIENT_OPTIONS, **options})


def azure_blob_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Callable[..., ManifestCheckpointStore]:
    """For the contract suite (``BACKENDS``): stores under ``jobs/trial-1`` in a fake."""
    fake = start_fake(request)
    return lambda keep=2: AzureBlobCheckpointStore(
        fake.account, CONTAINER, "jobs/trial-1", client=fake_client(fake), keep=keep
    )
