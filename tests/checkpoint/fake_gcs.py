"""A stateful in-memory fake of the GCS JSON API, installed with ``responses``.

The real ``google-cloud-storage`` client runs against it (URL building, multipart and resumable
uploads, checksums, retries, pagination, error mapping). Endpoints, under ``base_url``:

* ``POST /upload/storage/v1/b/B/o?uploadType=multipart``: metadata + media; checks the crc32c
  or md5Hash the client sends, answers the object resource.
* ``POST ...?uploadType=resumable`` then ``PUT`` chunks to the session URL (``Content-Range``,
  308 with ``Range`` until the last chunk; the last one's ``x-goog-hash`` is checked).
* ``GET /download/storage/v1/b/B/o/O?alt=media``: ``generation``, ``ifGenerationMatch``,
  ``ifGenerationNotMatch`` (304), ``Range: bytes=N-``; headers ``x-goog-generation`` and
  ``x-goog-hash: crc32c=...,md5=...`` as GCS sends them.
* ``GET /storage/v1/b/B/o/O`` (metadata), ``DELETE /storage/v1/b/B/o/O``.
* ``GET /storage/v1/b/B/o?prefix=&delimiter=&pageToken=``: ``page_size`` entries (objects and
  prefixes together) a page, so pagination is exercised.
* ``GET /storage/v1/b/B`` (bucket metadata).

A bucket that was not created answers 404 "The specified bucket does not exist."; buckets in
``forbidden`` answer 403; :meth:`FakeGcs.fail_next` queues server errors; ``corrupt_downloads``
serves bytes that do not match ``x-goog-hash``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import pytest
import responses
from requests import PreparedRequest

from spotwise.checkpoint.base import ManifestCheckpointStore

BASE_URL = "https://storage.googleapis.com"
BUCKET = "spotwise-ckpt"
PREFIX = "jobs/j1/trial-1"
Reply = tuple[int, dict[str, str], bytes]


def crc32c_b64(data: bytes) -> str:
    import google_crc32c  # comes with google-cloud-storage

    return base64.b64encode(google_crc32c.value(data).to_bytes(4, "big")).decode()


def md5_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


@dataclass
class FakeObject:
    data: bytes
    generation: int
    content_type: str = "application/octet-stream"
    metageneration: int = 1


@dataclass
class Call:
    method: str
    path: str
    query: dict[str, str]
    status: int
    authorization: str = ""


@dataclass
class _Session:
    bucket: str
    name: str
    content_type: str
    total: int | None
    data: bytearray = field(default_factory=bytearray)


class FakeGcs:
    """Buckets of objects in memory, served at ``base_url`` through ``responses``."""

    def __init__(self, base_url: str = BASE_URL, page_size: int = 2) -> None:
        self.base_url = base_url.rstrip("/")
        self.page_size = page_size
        self.buckets: dict[str, dict[str, FakeObject]] = {}
        self.forbidden: set[str] = set()
        self.corrupt_downloads = False
        self.calls: list[Call] = []
        self._failures: list[int] = []
        self._sessions: dict[str, _Session] = {}
        self._generation = 1_700_000_000_000_000
        self._lock = threading.Lock()

    # -- direct access for tests -------------------------------------------------------------
    def create_bucket(self, name: str) -> None:
        self.buckets.setdefault(name, {})

    def put(self, bucket: str, name: str, data: bytes, content_type: str = "") -> FakeObject:
        """Store an object directly (a new generation), as another writer would."""
        with self._lock:
            return self._store(bucket, name, data, content_type or "application/octet-stream")

    def get(self, bucket: str, name: str) -> FakeObject | None:
        return self.buckets.get(bucket, {}).get(name)

    def names(self, bucket: str) -> list[str]:
        return sorted(self.buckets.get(bucket, {}))

    def fail_next(self, status: int = 503, times: int = 1) -> None:
        """The next ``times`` requests answer ``status``."""
        self._failures.extend([status] * times)

    def count(self, method: str, pattern: str, status: int | None = None) -> int:
        """How many calls matched ``method``, a regex on the path, and ``status`` if given."""
        return sum(
            1
            for c in self.calls
            if c.method == method
            and re.search(pattern, c.path)
            and (status is None or c.status == status)
        )

    # -- installing ---------------------------------------------------------------------------
    def install(self, mock: responses.RequestsMock) -> None:
        url = re.compile(re.escape(self.base_url) + r"/.*")
        for method in ("GET", "POST", "PUT", "DELETE"):
            mock.add_callback(method, url, callback=self._handle)

    # -- dispatch -----------------------------------------------------------------------------
    def _handle(self, request: PreparedRequest) -> Reply:
        parts = urlsplit(str(request.url))
        path = parts.path
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        method = str(request.method)
        with self._lock:
            status, headers, body = self._route(method, path, query, request)
            self.calls.append(Call(method, path, query, status, _header(request, "Authorization")))
        return status, headers, body

    def _route(self, method: str, path: str, q: dict[str, str], req: PreparedRequest) -> Reply:
        if self._failures:
            status = self._failures.pop(0)
            return _error(status, "Backend Error (injected)", "backendError")
        m = re.fullmatch(r"/(upload/|download/)?storage/v1/b/([^/]+)(/o(?:/(.+))?)?", path)
        if m is None:
            return _error(404, f"Not Found: {path}", "notFound")
        kind, bucket, objects, obj = m.group(1), unquote(m.group(2)), m.group(3), m.group(4)
        name = unquote(obj) if obj else ""
        if bucket in self.forbidden:
            why = f"tester@example.iam.gserviceaccount.com may not use objects in {bucket}."
            return _error(403, why, "forbidden")
        if bucket not in self.buckets:
            return _error(404, "The specified bucket does not exist.", "notFound")
        if kind == "upload/" and method == "POST":
            if q.get("uploadType") == "multipart":
                return self._multipart(bucket, q, req)
            if q.get("uploadType") == "resumable":
                return self._initiate(bucket, q, req)
        if kind == "upload/" and method == "PUT" and "upload_id" in q:
            return self._chunk(q["upload_id"], req)
        if kind == "download/" and method == "GET" and name:
            return self._download(bucket, name, q, req)
        if kind is None and objects is None and method == "GET":
            return _json({"kind": "storage#bucket", "name": bucket, "location": "US"})
        if kind is None and objects and not name and method == "GET":
            return self._list(bucket, q)
        if kind is None and name and method in ("GET", "DELETE"):
            found = self._lookup(bucket, name, q)
            if not isinstance(found, FakeObject):
                return found
            if method == "GET":
                return _json(self._resource(bucket, name, found))
            del self.buckets[bucket][name]
            return 204, {}, b""
        return _error(400, f"unsupported {method} {path}", "invalid")

    # -- objects ------------------------------------------------------------------------------
    def _store(self, bucket: str, name: str, data: bytes, content_type: str) -> FakeObject:
        self._generation += 1
        obj = FakeObject(bytes(data), self._generation, content_type)
        self.buckets[bucket][name] = obj
        return obj

    def _resource(self, bucket: str, name: str, obj: FakeObject) -> dict[str, Any]:
        return {
            "kind": "storage#object",
            "id": f"{bucket}/{name}/{obj.generation}",
            "bucket": bucket,
            "name": name,
            "generation": str(obj.generation),
            "metageneration": str(obj.metageneration),
            "contentType": obj.content_type,
            "size": str(len(obj.data)),
            "crc32c": crc32c_b64(obj.data),
            "md5Hash": md5_b64(obj.data),
            "etag": f"CK{obj.generation}",
            "storageClass": "STANDARD",
            "mediaLink": f"{self.base_url}/download/storage/v1/b/{bucket}/o/"
            f"{quote(name, safe='')}?generation={obj.generation}&alt=media",
        }

    def _lookup(self, bucket: str, name: str, q: dict[str, str]) -> FakeObject | Reply:
        """The object, or the reply when it is missing or a precondition decides."""
        obj = self.buckets[bucket].get(name)
        if obj is None or ("generation" in q and int(q["generation"]) != obj.generation):
            return _error(404, f"No such object: {bucket}/{name}", "notFound")
        if "ifGenerationMatch" in q and int(q["ifGenerationMatch"]) != obj.generation:
            return _error(412, "Precondition Failed", "conditionNotMet")
        if "ifGenerationNotMatch" in q and int(q["ifGenerationNotMatch"]) == obj.generation:
            return 304, {"x-goog-generation": str(obj.generation)}, b""
        return obj

    def _precondition(self, bucket: str, name: str, q: dict[str, str]) -> Reply | None:
        current = self.buckets[bucket].get(name)
        gen = current.generation if current else 0
        if "ifGenerationMatch" in q and int(q["ifGenerationMatch"]) != gen:
            return _error(412, "At least one of the pre-conditions you specified did not hold.")
        return None

    def _checked_store(
        self, bucket: str, name: str, data: bytes, content_type: str, sent: dict[str, str]
    ) -> Reply:
        if "crc32c" in sent and sent["crc32c"] != crc32c_b64(data):
            return _error(400, "Provided CRC32C doesn't match calculated CRC32C.", "invalid")
        if "md5Hash" in sent and sent["md5Hash"] != md5_b64(data):
            return _error(400, "Provided MD5 hash doesn't match calculated MD5 hash.", "invalid")
        obj = self._store(bucket, name, data, content_type)
        return _json(self._resource(bucket, name, obj))

    def _multipart(self, bucket: str, q: dict[str, str], req: PreparedRequest) -> Reply:
        ctype = _header(req, "Content-Type")
        m = re.search(r'boundary="?([^";]+)"?', ctype)
        body = req.body if isinstance(req.body, bytes) else str(req.body or "").encode()
        if m is None:
            return _error(400, "multipart upload without a boundary", "invalid")
        sep = b"--" + m.group(1).encode()
        parts = [p for p in body.split(sep)[1:] if not p.startswith(b"--")]
        if len(parts) != 2:
            return _error(400, f"multipart upload with {len(parts)} parts", "invalid")
        _, meta = parts[0].split(b"\r\n\r\n", 1)
        media_head, media = parts[1].split(b"\r\n\r\n", 1)
        metadata = json.loads(meta.strip())
        media = media[: -len(b"\r\n")] if media.endswith(b"\r\n") else media
        name = metadata.get("name") or q.get("name", "")
        fail = self._precondition(bucket, name, q)
        if fail:
            return fail
        cm = re.search(rb"content-type: *([^\r\n]+)", media_head, re.I)
        content_type = cm.group(1).decode() if cm else "application/octet-stream"
        return self._checked_store(bucket, name, media, content_type, metadata)

    def _initiate(self, bucket: str, q: dict[str, str], req: PreparedRequest) -> Reply:
        body = req.body if isinstance(req.body, bytes) else str(req.body or "").encode()
        metadata = json.loads(body or b"{}")
        name = metadata.get("name") or q.get("name", "")
        fail = self._precondition(bucket, name, q)
        if fail:
            return fail
        total = _header(req, "x-upload-content-length")
        ctype = _header(req, "x-upload-content-type") or "application/octet-stream"
        upload_id = uuid.uuid4().hex
        self._sessions[upload_id] = _Session(bucket, name, ctype, int(total) if total else None)
        location = (
            f"{self.base_url}/upload/storage/v1/b/{bucket}/o?uploadType=resumable"
            f"&upload_id={upload_id}"
        )
        return 200, {"Location": location}, b""

    def _chunk(self, upload_id: str, req: PreparedRequest) -> Reply:
        session = self._sessions.get(upload_id)
        if session is None:
            return _error(404, "No such upload session", "notFound")
        body = req.body if isinstance(req.body, bytes) else str(req.body or "").encode()
        m = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+|\*)", _header(req, "Content-Range"))
        if m is None:
            return _error(400, "resumable chunk without a byte range", "invalid")
        start, total = int(m.group(1)), m.group(3)
        if start != len(session.data):
            return 308, {"Range": f"bytes=0-{len(session.data) - 1}"}, b""
        session.data.extend(body)
        if total == "*" or len(session.data) < int(total):
            return 308, {"Range": f"bytes=0-{len(session.data) - 1}"}, b""
        del self._sessions[upload_id]
        sent = _hashes(_header(req, "x-goog-hash"))
        meta = {"crc32c": sent["crc32c"]} if "crc32c" in sent else {}
        if "md5" in sent:
            meta["md5Hash"] = sent["md5"]
        data = bytes(session.data)
        return self._checked_store(session.bucket, session.name, data, session.content_type, meta)

    def _download(self, bucket: str, name: str, q: dict[str, str], req: PreparedRequest) -> Reply:
        obj = self._lookup(bucket, name, q)
        if not isinstance(obj, FakeObject):
            return obj
        data = obj.data
        headers = {
            "Content-Type": obj.content_type,
            "ETag": f"CK{obj.generation}",
            "x-goog-generation": str(obj.generation),
            "x-goog-metageneration": str(obj.metageneration),
            "x-goog-hash": f"crc32c={crc32c_b64(data)},md5={md5_b64(data)}",
            "x-goog-stored-content-length": str(len(data)),
            "x-goog-stored-content-encoding": "identity",
            "x-goog-storage-class": "STANDARD",
        }
        if self.corrupt_downloads and data:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        rm = re.fullmatch(r"bytes=(\d+)-", _header(req, "Range"))
        if rm:
            start = int(rm.group(1))
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            return 206, headers, data[start:]
        return 200, headers, data

    def _list(self, bucket: str, q: dict[str, str]) -> Reply:
        prefix, delimiter = q.get("prefix", ""), q.get("delimiter", "")
        entries: dict[str, bool] = {}  # name or prefix -> is a prefix
        for name in sorted(self.buckets[bucket]):
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix) :]
            if delimiter and delimiter in rest:
                entries[prefix + rest.split(delimiter, 1)[0] + delimiter] = True
            else:
                entries[name] = False
        ordered = sorted(entries)
        start = int(base64.urlsafe_b64decode(q["pageToken"]).decode()) if q.get("pageToken") else 0
        size = min(self.page_size, int(q.get("maxResults", self.page_size)))
        page = ordered[start : start + size]
        out: dict[str, Any] = {"kind": "storage#objects"}
        items = [self._resource(bucket, n, self.buckets[bucket][n]) for n in page if not entries[n]]
        prefixes = [n for n in page if entries[n]]
        if items:
            out["items"] = items
        if prefixes:
            out["prefixes"] = prefixes
        if start + size < len(ordered):
            out["nextPageToken"] = base64.urlsafe_b64encode(str(start + size).encode()).decode()
        return _json(out)


def _header(req: PreparedRequest, name: str) -> str:
    value = req.headers.get(name, "")
    return value.decode() if isinstance(value, bytes) else str(value)


def _hashes(header: str) -> dict[str, str]:
    """``crc32c=AAAA,md5=BBBB`` → ``{"crc32c": "AAAA", "md5": "BBBB"}``."""
    return dict(p.strip().split("=", 1) for p in header.split(",") if "=" in p)


def _json(body: dict[str, Any], status: int = 200) -> Reply:
    return status, {"Content-Type": "application/json; charset=UTF-8"}, json.dumps(body).encode()


def _error(status: int, message: str, reason: str = "") -> Reply:
    err: dict[str, Any] = {"code": status, "message": message}
    if reason:
        err["errors"] = [{"message": message, "domain": "global", "reason": reason}]
    return _json({"error": err}, status)


# -- pytest helpers -----------------------------------------------------------------------
def start_fake(request: pytest.FixtureRequest, base_url: str = BASE_URL) -> FakeGcs:
    """A fake with bucket ``BUCKET``, intercepting requests until the test ends."""
    if base_url == BASE_URL:  # a developer's emulator settings would send the client elsewhere
        monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
        monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
        monkeypatch.delenv("API_ENDPOINT_OVERRIDE", raising=False)
    fake = FakeGcs(base_url)
    fake.create_bucket(BUCKET)
    mock = responses.RequestsMock(assert_all_requests_are_fired=False)
    fake.install(mock)
    mock.start()

    def stop() -> None:
        mock.stop()
        mock.reset()

    request.addfinalizer(stop)
    return fake


def fake_client(credentials: Any = None, project: str = "spotwise-test") -> Any:
    """A real ``storage.Client`` that needs no ADC lookup (anonymous unless given)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.storage import Client

    return Client(project=project, credentials=credentials or AnonymousCredentials())


def gcs_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Callable[..., ManifestCheckpointStore]:
    """The contract-suite backend: GCS checkpoint stores on one fake bucket (skipped without
    google-cloud-storage)."""
    pytest.importorskip("google.cloud.storage", reason="google-cloud-storage is not installed")
    from spotwise.checkpoint.gcs import GcsCheckpointStore

    start_fake(request)
    client = fake_client()
    return lambda keep=2: GcsCheckpointStore(BUCKET, PREFIX, client=client, keep=keep)
