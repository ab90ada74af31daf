"""The preflight's check of a job's checkpoint location (:mod:`spotwise.planner.preflight`): one
small object written, read back and deleted under it, and a failure turned into a one-line
SpecError naming ``checkpoint.location``, or the provider's TransientError when it passes.
"""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

from spotwise.errors import (
    CheckpointError,
    ProviderError,
    SpecError,
    SpotwiseError,
    TransientError,
)

PROBE_PREFIX = ".spotwise-probe-"  # a dot name: never listed as a checkpoint


def probe_checkpoint_root(root: str, location: str = "", aws_profile: str | None = None) -> None:
    """Write, read back and delete one small object under the job's checkpoint ``root``
    (:meth:`~spotwise.checkpoint.base.ManifestCheckpointStore.probe`); SpecError naming
    ``checkpoint.location`` (as written: ``location``) with the reason when the write or the
    read fails: a read-only folder, a path through a file, a missing bucket; the provider's
    TransientError (exit 1, "try again") when it failed for a reason that passes: a 5xx, a
    timeout, throttling. (A delete that fails is let be: the orchestrator never deletes there,
    and no reader lists a dot-named object as a checkpoint.)

    This proves the *orchestrator's* access, from this machine with its credentials. It does
    not prove the instances': on a cloud they write with their own identity (an instance
    profile, a service account, a managed identity), which may be allowed less. Local folders
    this probe had to create are removed again, so a refused job leaves nothing behind. An
    ``s3://`` root is written with ``aws_profile`` (the AWS provider's ``profile`` option), as
    the orchestrator reads the trials' files there."""
    from spotwise.checkpoint.base import ManifestCheckpointStore
    from spotwise.checkpoint.local import LocalCheckpointStore
    from spotwise.checkpoint.registry import open_checkpoint_store

    where = location or root
    try:
        if aws_profile and root.lower().startswith("s3://"):
            from spotwise.checkpoint.blobstore import BlobCheckpointStore
            from spotwise.providers.s3_blobs import S3Blobs

            store: object = BlobCheckpointStore(S3Blobs.from_uri(root, profile=aws_profile))
        else:
            store = open_checkpoint_store(root)
    except (CheckpointError, ProviderError) as e:
        raise _unwritable(where, e) from None
    if not isinstance(store, ManifestCheckpointStore):
        return  # a store registered by someone else: it has no probe
    created = _missing_folders(store.root) if isinstance(store, LocalCheckpointStore) else []
    try:
        store.probe(f"{PROBE_PREFIX}{uuid.uuid4().hex[:12]}")
    except (CheckpointError, ProviderError) as e:
        folder = created[-1].parent if created else getattr(store, "root", None)
        raise _unwritable(where, e, folder) from None
    finally:
        for folder in created:  # deepest first; one that is not empty is left alone
            with contextlib.suppress(OSError):
                folder.rmdir()


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and its ancestors that do not exist yet, deepest first."""
    out: list[Path] = []
    for f in [folder, *folder.parents]:
        if f.exists() or f.is_symlink():
            break
        out.append(f)
    return out


def _transient(e: BaseException) -> TransientError | None:
    """``e`` or the error it was raised from or while handling (a checkpoint store re-raises a
    provider's error as a CheckpointError ``from None``, which keeps it as the context), when
    that is a TransientError."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, TransientError):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def _could_not_check(where: str, e: SpotwiseError, transient: TransientError) -> TransientError:
    """The checkpoint location could not be checked for a reason that passes: the provider's
    error (its class, exit 1), naming the field and saying to try again."""
    reason = e.message.removeprefix("checkpoint store: ")
    lasts = (transient.hint or "").partition("if it lasts, ")[2]  # where to look: the provider's
    return type(transient)(
        f"checkpoint.location: could not reach {where!r} to check that spotwise can write "
        f"checkpoints there ({reason}): try again".replace("\n", " "),
        hint="nothing to fix if it passes: run the same command again"
        + (f"; if it lasts, {lasts}" if lasts else ""),
    )


def _unwritable(
    where: str, e: CheckpointError | ProviderError, folder: Path | None = None
) -> SpotwiseError:
    """``folder``: for a local store, the deepest folder (or file) of the path that exists,
    the one the system refused to write into. A failure that passes (a TransientError, also
    when the checkpoint store wrapped it in a CheckpointError) is not the spec's fault: it
    becomes the TransientError :func:`_could_not_check` returns."""
    transient = _transient(e)
    if transient is not None:
        return _could_not_check(where, e, transient)
    cause = e.__cause__
    if isinstance(cause, OSError) and cause.strerror:  # a local folder: the system's reason
        reason = f"{folder}: {cause.strerror}" if folder else cause.strerror
    else:  # an object store: the provider's one line (object, action, reason)
        reason = e.message.removeprefix("checkpoint store: ")
    return SpecError(
        f"spec field 'checkpoint.location': spotwise cannot write checkpoints under {where!r} "
        f"({reason})".replace("\n", " "),
        hint=e.hint or "choose a location this machine can write, or fix its permissions",
    )
