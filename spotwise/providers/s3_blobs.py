"""A :class:`~spotwise.providers.blobs.Blobs` folder in S3: ``s3://bucket/prefix``.

Every call goes through one boto3 S3 client (:func:`spotwise.providers.aws.s3_client`, made on
first use unless one is given), so boto3 is imported only when S3 is really used. The version
token of :meth:`S3Blobs.get` is the object's ETag: a read that names it is a conditional
``GET`` (``IfNoneMatch``), answered ``304`` without the body while the object is unchanged.
botocore errors become :class:`~spotwise.errors.ProviderError` through
:func:`spotwise.providers.aws.provider_error` (one line, no credentials), with the fix as hint
for a missing bucket or denied access.

One ``PutObject`` holds at most 5 GB, so :meth:`S3Blobs.put` sends an object larger than
:data:`MULTIPART_THRESHOLD` as a multipart upload (parts of :data:`PART_SIZE`, a few at a time):
S3 shows it only once the upload is completed, replacing the old object at once, so the write
is as atomic as a single ``PutObject``; an upload that fails is aborted (its parts are not left
to be billed) and fails with the same error as a failed ``PutObject``.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from spotwise.providers import aws
from spotwise.providers.blobs import check_name, join_key

_UNCHANGED = ("304", "NotModified")
_MISSING = ("NoSuchKey", "404", "NotFound")
MIB = 1024 * 1024
MULTIPART_THRESHOLD = 256 * MIB  # larger objects go up in parts (one PutObject: 5 GB at most)
PART_SIZE = 64 * MIB  # S3: at least 5 MiB (but the last), at most 10,000 parts
MAX_PARTS = 10_000
UPLOAD_THREADS = 4  # parts in flight at once (each one a copy of PART_SIZE bytes)


class S3Blobs:
    """The objects directly under ``s3://bucket/prefix``."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: Any = None,
        region: str | None = None,
        profile: str | None = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._client = client
        self._region = region
        self._profile = profile

    @classmethod
    def from_uri(
        cls, uri: str, *, client: Any = None, region: str | None = None, profile: str | None = None
    ) -> S3Blobs:
        """``s3://bucket/prefix`` (also the ``s3:/bucket/...`` that ``pathlib`` collapses)."""
        bucket, prefix = aws.parse_s3_uri(uri)
        return cls(bucket, prefix, client=client, region=region, profile=profile)

    def __repr__(self) -> str:
        return f"S3Blobs({self.uri!r})"

    @property
    def uri(self) -> str:
        return aws.s3_uri(self.bucket, self.prefix)

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = aws.s3_client(self._region, self._profile)
        return self._client

    def location(self, name: str) -> str:
        return f"{self.uri}/{check_name(name)}"

    def _key(self, name: str) -> str:
        return join_key(self.prefix, check_name(name))

    def _error(self, e: Exception, action: str) -> Exception:
        if not aws.is_sdk_error(e):
            return e
        err = aws.provider_error(e, f"{action} {self.uri}")
        code = aws.error_code(e)
        if code == "NoSuchBucket":
            err.hint = f"create it: aws s3 mb s3://{self.bucket}"
        elif code in ("AccessDenied", "403"):
            err.hint = (
                "the credentials (or instance profile) need s3:GetObject, s3:PutObject, "
                "s3:ListBucket and s3:DeleteObject"
            )
        return err

    def put(self, name: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        """Write ``data`` as ``name``: one ``PutObject``, or a multipart upload above
        :data:`MULTIPART_THRESHOLD` bytes; readers see the old object or the new one, whole."""
        if len(data) > MULTIPART_THRESHOLD:
            self._put_in_parts(name, data, content_type)
            return
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=self._key(name), Body=data, ContentType=content_type
            )
        except Exception as e:
            raise self._error(e, f"writing {name} to") from None

    def _put_in_parts(self, name: str, data: bytes, content_type: str) -> None:
        """One multipart upload of ``data`` to ``name``: visible only once completed, aborted
        when a part fails; a botocore error becomes the same error as a failed ``PutObject``."""
        client, action = self.client, f"writing {name} to"
        where = {"Bucket": self.bucket, "Key": self._key(name)}
        try:
            upload = client.create_multipart_upload(**where, ContentType=content_type)["UploadId"]
        except Exception as e:
            raise self._error(e, action) from None
        size = max(PART_SIZE, -(-len(data) // MAX_PARTS))
        view = memoryview(data)

        def part(number: int, start: int) -> dict[str, Any]:
            body = bytes(view[start : start + size])
            resp = client.upload_part(**where, UploadId=upload, PartNumber=number, Body=body)
            return {"PartNumber": number, "ETag": resp["ETag"]}

        pool = ThreadPoolExecutor(max_workers=UPLOAD_THREADS, thread_name_prefix="s3-part")
        try:
            futures: list[Future[dict[str, Any]]] = [
                pool.submit(part, n, start)
                for n, start in enumerate(range(0, len(data), size), start=1)
            ]
            parts = [f.result() for f in futures]  # the first failure raises here
            client.complete_multipart_upload(
                **where, UploadId=upload, MultipartUpload={"Parts": parts}
            )
        except BaseException as e:
            pool.shutdown(wait=True, cancel_futures=True)
            with contextlib.suppress(Exception):  # else S3 keeps (and bills) the parts
                client.abort_multipart_upload(**where, UploadId=upload)
            if isinstance(e, Exception):
                raise self._error(e, action) from None
            raise
        finally:
            pool.shutdown(wait=True)

    def get(self, name: str, token: str = "") -> tuple[bytes | None, str]:
        args = {"Bucket": self.bucket, "Key": self._key(name)}
        if token:
            args["IfNoneMatch"] = token
        try:
            resp = self.client.get_object(**args)
            data = bytes(resp["Body"].read())
        except Exception as e:
            if aws.error_code(e) in _UNCHANGED + _MISSING:
                return None, token
            raise self._error(e, f"reading {name} from") from None
        return data, str(resp.get("ETag", ""))

    def exists(self, name: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(name))
        except Exception as e:
            if aws.error_code(e) in _MISSING:
                return False
            raise self._error(e, f"looking for {name} in") from None
        return True

    def names(self) -> list[str]:
        base = f"{self.prefix}/" if self.prefix else ""
        out: list[str] = []
        try:
            pages = self.client.get_paginator("list_objects_v2")
            for page in pages.paginate(Bucket=self.bucket, Prefix=base, Delimiter="/"):
                for obj in page.get("Contents", []):
                    name = str(obj["Key"])[len(base) :]
                    if name and "/" not in name:
                        out.append(name)
        except Exception as e:
            raise self._error(e, "listing") from None
        return sorted(out)

    def delete(self, name: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(name))
        except Exception as e:
            if aws.error_code(e) in _MISSING:
                return
            raise self._error(e, f"deleting {name} from") from None
