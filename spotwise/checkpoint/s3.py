"""Checkpoints in S3: one trial's checkpoints under ``s3://bucket/prefix/``.

A ``PutObject`` is atomic (readers see the old object or the new one, never a part), which is
all :class:`~spotwise.checkpoint.base.ManifestCheckpointStore` asks of a backend; the data →
manifest → ``LATEST`` order and the checksum verification live there. Only the objects
directly under the prefix are the store's (the agent's ``events-*.jsonl`` and ``agent-*.json``
may sit beside them and are ignored by the manifest logic).

The S3 client comes from :func:`spotwise.providers.aws.s3_client`, so boto3 is imported only
inside ``spotwise/providers`` and only when an S3 store is used.

Register the scheme with the checkpoint registry (done by :func:`register`)::

    register_scheme("s3", open_s3_store)
"""

from __future__ import annotations

from typing import Any

from spotwise.checkpoint.base import DEFAULT_KEEP, CheckpointStore, ManifestCheckpointStore
from spotwise.errors import CheckpointError, ProviderError

_MISSING = ("NoSuchKey", "404", "NotFound")


class S3CheckpointStore(ManifestCheckpointStore):
    """One trial's checkpoints under ``s3://bucket/prefix``."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        client: Any = None,
        region: str | None = None,
        keep: int = DEFAULT_KEEP,
    ) -> None:
        super().__init__(keep)
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._client = client
        self._region = region

    @classmethod
    def from_uri(cls, uri: str, keep: int = DEFAULT_KEEP) -> S3CheckpointStore:
        from spotwise.providers.aws import parse_s3_uri

        try:
            bucket, prefix = parse_s3_uri(uri)
        except ProviderError as e:
            raise CheckpointError(f"checkpoint location: {e.message}") from None
        return cls(bucket, prefix, keep=keep)

    def __repr__(self) -> str:
        return f"S3CheckpointStore({self.uri!r}, keep={self.keep})"

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    @property
    def client(self) -> Any:
        if self._client is None:
            from spotwise.providers.aws import s3_client

            try:
                self._client = s3_client(self._region)
            except ProviderError as e:
                raise CheckpointError(f"cannot open {self.uri}: {e.message}", hint=e.hint) from None
        return self._client

    def _full(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _location(self, key: str) -> str:
        return f"{self.uri}/{key}"

    def _fail(self, exc: Exception, action: str) -> CheckpointError:
        from spotwise.providers.aws import error_code, is_sdk_error, redact

        if not is_sdk_error(exc):
            raise exc
        code = error_code(exc)
        hint = None
        if code == "NoSuchBucket":
            hint = f"create it: aws s3 mb s3://{self.bucket}"
        elif code in ("AccessDenied", "403"):
            hint = (
                "the credentials (or instance profile) need s3:GetObject, s3:PutObject, "
                "s3:ListBucket and s3:DeleteObject"
            )
        why = code or redact(str(exc))
        return CheckpointError(
            f"S3 checkpoint store {self.uri}: {action} failed ({why})", hint=hint
        )

    # ---- the five primitives -----------------------------------------------------------
    def _write(self, key: str, data: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._full(key), Body=data)
        except Exception as e:
            raise self._fail(e, f"writing {key}") from None

    def _read(self, key: str) -> bytes | None:
        from spotwise.providers.aws import error_code

        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=self._full(key))
            return bytes(resp["Body"].read())
        except Exception as e:
            if error_code(e) in _MISSING:
                return None
            raise self._fail(e, f"reading {key}") from None

    def _keys(self) -> list[str]:
        base = f"{self.prefix}/" if self.prefix else ""
        out: list[str] = []
        try:
            pages = self.client.get_paginator("list_objects_v2")
            for page in pages.paginate(Bucket=self.bucket, Prefix=base, Delimiter="/"):
                for obj in page.get("Contents", []):
                    name = obj["Key"][len(base) :]
                    if name and "/" not in name:
                        out.append(name)
        except Exception as e:
            raise self._fail(e, "listing") from None
        return sorted(out)

    def _remove(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._full(key))
        except Exception as e:
            from spotwise.providers.aws import error_code

            if error_code(e) in _MISSING:
                return
            raise self._fail(e, f"deleting {key}") from None


def open_s3_store(uri: str) -> CheckpointStore:
    """The factory the checkpoint registry calls for ``s3://`` locations."""
    return S3CheckpointStore.from_uri(uri)


def register() -> None:
    """Register ``s3://`` with :mod:`spotwise.checkpoint.registry` (idempotent)."""
    from spotwise.checkpoint.registry import register_scheme

    register_scheme("s3", open_s3_store)
