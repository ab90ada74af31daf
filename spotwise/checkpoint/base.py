"""The checkpoint storage interface, and the manifest logic every backend shares.

One store instance is one trial's checkpoint folder (or bucket prefix). Its layout::

    ckpt-00000005.pt      the checkpoint bytes (whatever the SDK serialised)
    ckpt-00000005.json    its manifest: {"step", "file", "sha256", "size", "created_at", ...meta}
    ckpt-00000010.pt
    ckpt-00000010.json
    LATEST                the name of the newest manifest ("ckpt-00000010.json")

Writes go in that order — data, then manifest, then ``LATEST`` — each one atomic, so a crash
leaves at worst a data file without a manifest, which readers ignore. A checkpoint *exists*
once its manifest does; ``LATEST`` is the commit marker for people and tools that look at the
folder, while readers list the manifests (a manifest newer than ``LATEST`` means the writer
died just before updating the pointer: the checkpoint is complete and is used). Once the
manifest is written the put has succeeded: a failure to write ``LATEST`` or of retention after
it is not raised but kept in :attr:`~ManifestCheckpointStore.put_problems`.

No write overwrites bytes a manifest names. A step saved again (its manifest exists) with other
bytes writes its data under a content name, ``ckpt-00000005-<12 hex of its SHA-256>.pt``, then
the manifest naming it (which replaces the old one), and only then removes the old data file;
a crash in between leaves the step's earlier checkpoint whole. The same bytes saved again go
where they are. A step's first save keeps the plain name.

Reads verify the size and SHA-256 named by the manifest. When the newest checkpoint fails,
:meth:`ManifestCheckpointStore.get_latest` falls back to the newest one that verifies and says
so in the returned manifest (``fallback_from``, ``fallback_reason`` for the newest that failed,
``fallback_skipped`` for each of them) rather than through ``warnings``; when none verifies it
raises :class:`~spotwise.errors.CheckpointError`. :meth:`~ManifestCheckpointStore.load_latest`
does the same with a caller's decoder (the SDK's ``torch.load``): a checkpoint it rejects is
skipped like a corrupt one. The caller decides what to tell the user, and may then
:meth:`~ManifestCheckpointStore.set_aside` each skipped checkpoint: its files are renamed
``<name>.corrupt`` (``.foreign`` for another trial's; never deleted), out of the way of the
next save of that step, which would otherwise overwrite the evidence.

Only a checkpoint that is itself unusable is skipped: one whose bytes or manifest fail their
checks, or that the decoder rejects, raises :class:`UnusableCheckpointError`. A read that fails
(the store cannot be reached, an I/O error, a throttled request: a plain
:class:`~spotwise.errors.CheckpointError` from the backend) or a decoder's failure that is not
the file's (out of memory, no such device) propagates: the checkpoint may be fine, and the
next attempt loads it.

Steps may go back: a relaunched script that retrains from scratch instead of resuming saves
steps older than the checkpoints its earlier attempt left. :meth:`~ManifestCheckpointStore.put`
writes such a step like any other and ``LATEST`` names it (``LATEST`` is the checkpoint written
last); retention keeps it, and leaves the newer ones until the script's later saves pass them
(the newest ``keep`` steps are kept, as always). :attr:`~ManifestCheckpointStore.newer_at_put`
says what the save found, from the listing it makes anyway. Readers go by step, not by
``LATEST``: they load the highest step that verifies (a newer checkpoint of the earlier
attempt while there is one), which retention never deletes.

Backends implement the blob primitives of :class:`ManifestCheckpointStore` (each write atomic
per key) and inherit the rest; ``local.py`` is the reference implementation. The names of the
layout and the errors are in :mod:`spotwise.checkpoint.layout`, the read side (verification,
fallback, listing) in :mod:`spotwise.checkpoint.reading`; both are re-exported here.
:meth:`ManifestCheckpointStore.probe` checks that a location can be written before a job
relies on it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import time
from abc import abstractmethod
from typing import Protocol, runtime_checkable

from spotwise.checkpoint.layout import (
    CORRUPT_SUFFIX,
    DATA_RE,
    DEFAULT_KEEP,
    FOREIGN_SUFFIX,
    LATEST,
    MANIFEST_RE,
    RESERVED_KEYS,
    Decoder,
    ForeignCheckpointError,
    Manifest,
    Manifests,
    T,
    UnusableCheckpointError,
    check_step,
    checkpoint_name,
    content_name,
    is_data_name,
    manifest_name,
)
from spotwise.checkpoint.put_cleanup import drop_unnamed
from spotwise.checkpoint.reading import ManifestReader
from spotwise.errors import CheckpointError

__all__ = [  # the names other modules import from here (some now defined in layout/reading)
    "CORRUPT_SUFFIX",
    "DEFAULT_KEEP",
    "FOREIGN_SUFFIX",
    "LATEST",
    "RESERVED_KEYS",
    "CheckpointStore",
    "Decoder",
    "ForeignCheckpointError",
    "Manifest",
    "ManifestCheckpointStore",
    "ManifestReader",
    "Manifests",
    "UnusableCheckpointError",
    "checkpoint_name",
    "manifest_name",
]

PROBE_TEXT = b"spotwise checks that it can write here; safe to delete\n"


@runtime_checkable
class CheckpointStore(Protocol):
    """One trial's checkpoints. Every backend (local folder, S3, GCS, Azure Blob) is one."""

    newer_at_put: int | None
    """After :meth:`put`: the newest step newer than the one it wrote that the store held
    (left by an earlier attempt), or None."""

    put_problems: dict[str, CheckpointError]
    """After :meth:`put`: what failed once the checkpoint was saved (its manifest written),
    which the put did not raise: ``"latest"`` (the ``LATEST`` pointer was not updated) and
    ``"retention"`` (older checkpoints were not all removed). Empty when all went well."""

    @property
    def uri(self) -> str:
        """Where this store keeps its checkpoints (folder path or URI)."""
        ...

    def put(self, name: str, data: bytes, meta: Manifest) -> str:
        """Store one checkpoint atomically; ``meta["step"]`` is required. Return the URI of
        its data (a content name when the step is saved again with other bytes). Raises only
        when the checkpoint was not saved; sets :attr:`newer_at_put` and :attr:`put_problems`."""
        ...

    def get_latest(self) -> tuple[bytes, Manifest] | None:
        """The newest checkpoint that verifies, with its manifest; None when there is none."""
        ...

    def load_latest(self, decode: Decoder[T]) -> tuple[T, Manifest] | None:
        """The newest checkpoint that verifies and that ``decode`` accepts, decoded."""
        ...

    def set_aside(self, step: int, suffix: str = CORRUPT_SUFFIX) -> str | None:
        """Rename the files of the checkpoint of ``step`` to ``*<suffix>``; its new location."""
        ...

    def latest_manifest(self) -> Manifest | None:
        """The newest manifest, without reading (or verifying) its data."""
        ...

    def list(self) -> Manifests:
        """Every readable manifest, oldest first."""
        ...

    def delete_older_than(self, keep: int) -> None:
        """Keep the newest ``keep`` checkpoints, the one this store wrote last, and always one
        that verifies; drop the rest."""
        ...


class ManifestCheckpointStore(ManifestReader):
    """The shared manifest, verification, fallback and retention logic over the primitives:
    the read ones of :class:`~spotwise.checkpoint.reading.ManifestReader` (``uri``, ``_read``,
    ``_keys``, ``_location``) and ``_write`` and ``_remove`` here."""

    def __init__(self, keep: int = DEFAULT_KEEP) -> None:
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be an int >= 1, got {keep=}")
        super().__init__()
        self.keep = keep
        self._written_last: str | None = None  # the manifest of the last put: retention keeps it
        self.newer_at_put: int | None = None
        self.put_problems: dict[str, CheckpointError] = {}

    # -- the write primitives a backend implements ------------------------------------------
    @abstractmethod
    def _write(self, key: str, data: bytes) -> None:
        """Write one object atomically: readers see the old bytes or the new, never a part."""

    @abstractmethod
    def _remove(self, key: str) -> None:
        """Delete one object; a missing one is not an error."""

    def _move(self, src: str, dst: str) -> None:
        """Rename one object (``dst`` does not exist): copy, then delete the source. A backend
        with a real rename (a file system) overrides it."""
        data = self._read(src)
        if data is None:
            return
        self._write(dst, data)
        self._remove(src)

    # -- the CheckpointStore protocol -------------------------------------------------------
    def put(self, name: str, data: bytes, meta: Manifest) -> str:
        if not name or "/" in name or "\\" in name or name.startswith(".") or name == LATEST:
            raise ValueError(f"checkpoint name must be a plain file name, got {name!r}")
        if name.endswith(".json"):
            raise ValueError(f"checkpoint name must not end in .json (manifests do), got {name!r}")
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"checkpoint data must be bytes, got {type(data).__name__}")
        step = check_step(meta.get("step"))
        clash = sorted(k for k in RESERVED_KEYS if k in meta)
        if clash:
            raise ValueError(f"meta must not set {clash}: the store writes them")
        data = bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        manifest: Manifest = {
            **meta,
            "step": step,
            "file": name,
            "sha256": digest,
            "size": len(data),
            "created_at": time.time(),
        }
        try:
            json.dumps(manifest, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ValueError(f"checkpoint meta must be JSON-serialisable: {e}") from None
        mkey = manifest_name(step)
        try:
            keys: list[str] | None = self._keys()
        except CheckpointError:  # left to the writes to report (their errors name the object)
            keys = None
        self.newer_at_put = _newest_after(keys or [], step)
        target, replaced = self._target(name, mkey, digest, keys)
        manifest["file"] = target
        text = json.dumps(manifest, sort_keys=True, allow_nan=False)
        self._write(target, data)  # 1. the data, never over bytes a manifest names
        try:
            self._write(mkey, (text + "\n").encode())  # 2. the manifest: the checkpoint exists
        except Exception:
            drop_unnamed(self, target, mkey, keys)
            raise
        self._verified.add((target, digest))
        self._written_last = mkey
        self.put_problems = {}
        try:  # the checkpoint is saved: what follows fails it no more (put_problems says so)
            self._write(LATEST, (mkey + "\n").encode())  # 3. the pointer
        except CheckpointError as e:
            self.put_problems["latest"] = e
        try:
            self._retain(self.keep, replaced)  # keeps mkey, even when newer steps exist
        except CheckpointError as e:
            self.put_problems["retention"] = e
        return self._location(target)

    def _target(
        self, name: str, mkey: str, digest: str, keys: list[str] | None
    ) -> tuple[str, str | None]:
        """Where a put writes its data, and the data file of the step's earlier checkpoint that
        it replaces (removed once the new manifest exists), given the store's listing (None
        when it failed). A step's first save writes ``name``. Saved again, the step's manifest
        names bytes that must survive until the new manifest replaces it: the same bytes go
        where they are (rewriting them changes nothing), other bytes under
        :func:`~spotwise.checkpoint.layout.content_name`."""
        if keys is not None and mkey not in keys:
            return name, None
        try:
            raw = self._read(mkey)
        except CheckpointError:
            raw = b""  # it may exist: unknown, so nothing it names is touched
        if raw is None:
            return name, None
        try:
            old = json.loads(raw.decode())
        except (UnicodeDecodeError, ValueError):
            old = None
        old_file = old.get("file") if isinstance(old, dict) else None
        if not isinstance(old, dict) or not isinstance(old_file, str) or not is_data_name(old_file):
            return content_name(name, digest), None
        if old.get("sha256") == digest and old_file in (name, content_name(name, digest)):
            return old_file, None  # the same bytes under the same name: nothing changes
        target = content_name(name, digest)
        if target == old_file:  # the same 12 hex digits, other bytes
            target = content_name(name, digest, full=True)
        return target, old_file

    def set_aside(self, step: int, suffix: str = CORRUPT_SUFFIX) -> str | None:
        """Move the checkpoint of ``step`` out of the way, keeping its bytes: its data file
        and manifest are renamed ``<name><suffix>`` (``<suffix>-2``, ... when that exists), so
        readers and retention no longer see it and the next save of that step does not
        overwrite it. ``LATEST`` then names the newest checkpoint left. Returns the new
        location of the data file (of the manifest when there was no data), or None when
        the checkpoint does not exist. Nothing is ever deleted."""
        if not re.fullmatch(r"\.[a-z][a-z0-9-]*", suffix):
            raise ValueError(f"suffix must look like '.corrupt', got {suffix!r}")
        mkey = manifest_name(step)
        keys = set(self._keys())
        if mkey not in keys:
            return None
        data_key = self._data_key(mkey, step)
        shared = any(  # another checkpoint's manifest names the same data file: leave it
            m != mkey and self._data_key(m, s) == data_key for s, m in self._manifest_keys()
        )
        moved: str | None = None
        if data_key in keys and not shared:  # the evidence first, then its manifest
            dst = _free_name(data_key, suffix, keys)
            self._move(data_key, dst)
            keys.add(dst)
            moved = self._location(dst)
        dst = _free_name(mkey, suffix, keys)
        self._move(mkey, dst)
        moved = moved or self._location(dst)
        try:
            latest = (self._read(LATEST) or b"").decode(errors="replace").strip()
        except UnusableCheckpointError:  # not a file (a folder): rewritten below
            latest = ""
        if latest == mkey or latest not in self._keys():
            remaining = self._manifest_keys()
            if remaining:
                self._write(LATEST, (remaining[-1][1] + "\n").encode())
            else:
                self._remove(LATEST)
        return moved

    def delete_older_than(self, keep: int) -> None:
        """Keep the newest ``keep`` steps, the checkpoint this store wrote last (an older step
        than those when a relaunched script retrains instead of resuming), and always one that
        verifies; drop the rest. What a reader resumes from, the highest step that verifies,
        is always kept."""
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be an int >= 1, got {keep=}")
        self._retain(keep, None)

    def _retain(self, keep: int, replaced: str | None) -> None:
        """:meth:`delete_older_than`; also removes ``replaced`` (the data file of a checkpoint
        a put just replaced) unless a kept manifest names it."""
        entries = self._manifest_keys()[::-1]  # newest first
        kept: set[str] = set()
        has_verified = False  # never delete the only checkpoint that verifies
        for i, (step, mkey) in enumerate(entries):
            if i < keep or mkey == self._written_last:
                kept.add(mkey)
                has_verified = has_verified or self._verifies(mkey, step)
            elif has_verified:
                continue  # the one written last may still be further down
            elif self._verifies(mkey, step):
                kept.add(mkey)
                has_verified = True
        files_kept: set[str] = set()
        for step, mkey in entries:
            if mkey in kept:
                files_kept.add(self._data_key(mkey, step))
        oldest_kept = min((s for s, m in entries if m in kept), default=None)
        for step, mkey in entries:
            if mkey in kept:
                continue
            data_key = self._data_key(mkey, step)
            self._remove(mkey)  # the manifest first: no manifest ever names a missing file
            if data_key not in files_kept:
                self._remove(data_key)
        if replaced is not None and replaced not in files_kept:
            self._remove(replaced)
        if oldest_kept is None:
            return
        for key in self._keys():  # data left by a crash between the data and its manifest
            m = DATA_RE.match(key)
            if m and int(m.group(1)) < oldest_kept and key not in files_kept:
                self._remove(key)

    def probe(self, name: str) -> None:
        """Write the small object ``name`` (a dot name: no reader lists it as a checkpoint),
        read it back and delete it: proof that this process can keep checkpoints here. A
        write or a read that fails raises the backend's :class:`CheckpointError` (it names the
        object); bytes that do not read back raise one naming the location. A delete that
        fails is let be: whoever may write there need not be allowed to delete, and the
        object is ignored by every reader."""
        if not re.fullmatch(r"\.[A-Za-z0-9][A-Za-z0-9._-]*", name):
            raise ValueError(f"probe name must be a dot name like '.probe-1', got {name!r}")
        self._write(name, PROBE_TEXT)
        try:
            back = self._read(name)
            if back != PROBE_TEXT:
                got = "nothing" if back is None else f"{len(back)} other bytes"
                raise CheckpointError(
                    f"checkpoint location {self.uri}: wrote {self._location(name)} but read "
                    f"back {got}"
                )
        finally:
            with contextlib.suppress(CheckpointError):
                self._remove(name)


def _newest_after(keys: list[str], step: int) -> int | None:
    """The highest step above ``step`` among the manifests in ``keys``, or None."""
    steps = [int(m.group(1)) for k in keys if (m := MANIFEST_RE.match(k))]
    newest = max(steps, default=-1)
    return newest if newest > step else None


def _free_name(key: str, suffix: str, taken: set[str]) -> str:
    """``key.corrupt``, or ``key.corrupt-2``, ``-3``, ... when that name is taken."""
    name, n = f"{key}{suffix}", 1
    while name in taken:
        n += 1
        name = f"{key}{suffix}-{n}"
    return name
