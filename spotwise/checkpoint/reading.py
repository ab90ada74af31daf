"""The read side of a manifest checkpoint store: listing the manifests, verifying a
checkpoint's bytes against its manifest, and loading the newest usable checkpoint with the
fallback to older ones (see :mod:`spotwise.checkpoint.base` for the layout and the rules).

:class:`ManifestReader` asks a backend for three read primitives (``_read``, ``_keys``,
``_location``) and its ``uri``; :class:`~spotwise.checkpoint.base.ManifestCheckpointStore`
adds the write primitives, ``put``, retention and setting aside.
"""

from __future__ import annotations

import hashlib
import json
import re
from abc import ABC, abstractmethod
from typing import Any, TypeGuard

from spotwise.checkpoint.layout import (
    MANIFEST_RE,
    Decoder,
    ForeignCheckpointError,
    Manifest,
    Manifests,
    StepKeys,
    T,
    UnusableCheckpointError,
    checkpoint_name,
    is_data_name,
)
from spotwise.errors import CheckpointError


class ManifestReader(ABC):
    """Verified reads, with fallback to the newest checkpoint that verifies."""

    def __init__(self) -> None:
        self._verified: set[tuple[str, str]] = set()  # (file, sha256) known good in this process

    # -- the read primitives a backend implements -------------------------------------------
    @property
    @abstractmethod
    def uri(self) -> str:
        """Where this store lives."""

    @abstractmethod
    def _read(self, key: str) -> bytes | None:
        """The object's bytes, or None when it does not exist."""

    @abstractmethod
    def _keys(self) -> list[str]:
        """Names of every object in the store (no prefix, no temporary files)."""

    @abstractmethod
    def _location(self, key: str) -> str:
        """The URI of one object, for messages and for ``put``'s return value."""

    # -- loading ------------------------------------------------------------------------------
    def get_latest(self) -> tuple[bytes, Manifest] | None:
        return self.load_latest(_raw)

    def load_latest(self, decode: Decoder[T]) -> tuple[T, Manifest] | None:
        """The newest checkpoint that verifies and that ``decode(data, manifest, location)``
        accepts, as ``(decoded, manifest)``; None when there is no checkpoint at all.

        ``decode`` rejects a checkpoint by raising :class:`UnusableCheckpointError` (one line
        naming the file): it is skipped like a corrupt one. Any other exception propagates, a
        plain :class:`~spotwise.errors.CheckpointError` from reading the store included: a
        checkpoint that could not be read is not known to be bad. Each checkpoint skipped on
        the way is listed in the returned manifest's ``fallback_skipped`` (``step``, ``file``,
        ``reason``, ``foreign``), the newest also in ``fallback_from`` and
        ``fallback_reason``. When none is usable, raises the newest one's error (with its hint,
        or one to remove the folder)."""
        skipped: list[dict[str, Any]] = []
        first_error: UnusableCheckpointError | None = None
        for step, mkey in reversed(self._manifest_keys()):
            try:
                manifest = self._load_manifest(mkey, step)
                data = self.read(manifest)
                name = str(manifest["file"])
                decoded = decode(data, manifest, self._location(name))
            except UnusableCheckpointError as e:
                first_error = first_error or e
                skipped.append(
                    {
                        "step": step,
                        "file": self._data_key(mkey, step),
                        "reason": e.message,
                        "foreign": isinstance(e, ForeignCheckpointError),
                    }
                )
                continue
            if skipped:
                manifest["fallback_from"] = skipped[0]["file"]
                manifest["fallback_reason"] = skipped[0]["reason"]
                manifest["fallback_skipped"] = skipped
            return decoded, manifest
        if first_error is not None:  # a plain CheckpointError: a script's traceback names it
            raise CheckpointError(
                f"{first_error.message}; no older checkpoint in {self.uri} is usable either",
                hint=first_error.hint or f"remove {self.uri} to restart the trial from scratch",
            )
        return None

    def latest_manifest(self) -> Manifest | None:
        for step, mkey in reversed(self._manifest_keys()):
            try:
                return self._load_manifest(mkey, step)
            except CheckpointError:
                continue
        return None

    def list(self) -> Manifests:
        out: Manifests = []
        for step, mkey in self._manifest_keys():
            try:
                out.append(self._load_manifest(mkey, step))
            except CheckpointError:
                continue
        return out

    # -- reading and verifying --------------------------------------------------------------
    def read(self, manifest: Manifest) -> bytes:
        """The bytes a manifest names, after checking their size and SHA-256."""
        name = manifest.get("file")
        if not names_a_file(name):
            raise UnusableCheckpointError(
                f"manifest of step {manifest.get('step')} in {self.uri} names no valid file: "
                f"{name!r}"
            )
        where = self._location(name)
        size, digest = manifest.get("size"), manifest.get("sha256")
        if isinstance(size, bool) or not isinstance(size, int):
            raise UnusableCheckpointError(
                f"checkpoint {where}: its manifest's size is not an integer: {size!r}"
            )
        data = self._read(name)  # a failed read: a plain CheckpointError, not the file's fault
        if data is None:
            raise UnusableCheckpointError(f"checkpoint {where} is missing (its manifest exists)")
        if len(data) != size:
            raise UnusableCheckpointError(
                f"checkpoint {where} is partial or corrupt: size {len(data)} bytes, "
                f"manifest says {size}"
            )
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise UnusableCheckpointError(
                f"checkpoint {where} is corrupt: sha256 {actual[:12]}…, manifest says "
                f"{str(digest)[:12]}…"
            )
        self._verified.add((name, actual))
        return data

    def _verifies(self, mkey: str, step: int) -> bool:
        try:
            manifest = self._load_manifest(mkey, step)
            name, digest = manifest["file"], manifest["sha256"]
            if (
                isinstance(name, str)
                and isinstance(digest, str)
                and (name, digest) in self._verified
            ):
                return True
            self.read(manifest)
        except CheckpointError:
            return False
        return True

    def _manifest_keys(self) -> StepKeys:
        """(step, manifest key) of every manifest, oldest first."""
        found: StepKeys = []
        for key in self._keys():
            m = MANIFEST_RE.match(key)
            if m:
                found.append((int(m.group(1)), key))
        return sorted(found)

    def _load_manifest(self, mkey: str, step: int) -> Manifest:
        where = self._location(mkey)
        raw = self._read(mkey)
        if raw is None:
            raise UnusableCheckpointError(f"checkpoint manifest {where} disappeared while reading")
        try:
            manifest = json.loads(raw.decode())
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise UnusableCheckpointError(
                f"checkpoint manifest {where} is not valid JSON: {e}"
            ) from None
        if not isinstance(manifest, dict):
            raise UnusableCheckpointError(f"checkpoint manifest {where} is not a JSON object")
        missing = [k for k in ("step", "file", "sha256", "size") if k not in manifest]
        if missing:
            raise UnusableCheckpointError(f"checkpoint manifest {where} lacks {missing}")
        if manifest["step"] != step:
            raise UnusableCheckpointError(
                f"checkpoint manifest {where} says step {manifest['step']}, its name says {step}"
            )
        return manifest

    def _data_key(self, mkey: str, step: int) -> str:
        """The data file a manifest names; the step's plain name when it names none that can
        be (or the manifest cannot be read)."""
        try:
            name = self._load_manifest(mkey, step)["file"]
        except CheckpointError:
            return checkpoint_name(step)
        return name if names_a_file(name) else checkpoint_name(step)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def names_a_file(name: object) -> TypeGuard[str]:
    """Whether a manifest's ``file`` may be read: a data name
    (:func:`~spotwise.checkpoint.layout.is_data_name`) without a control character: a NUL made
    the OS refuse the path with ValueError, out of every load and save (review-at AT2)."""
    return isinstance(name, str) and is_data_name(name) and not _CONTROL.search(name)


def _raw(data: bytes, manifest: Manifest, where: str) -> bytes:
    return data
