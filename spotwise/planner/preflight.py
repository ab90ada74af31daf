"""Checks a job passes after its market is opened and before anything is recorded or bought.

:func:`~spotwise.planner.backend.open_backend` already refuses what opening the market shows
to be wrong (a missing trace, an unknown replay zone or region, no matching offer, a checkpoint
location a cloud's instances cannot reach). :func:`preflight` adds what a job would otherwise
only find out after :meth:`Store.create_job` — some of it only after instances were bought:

* an option a launch needs (AWS ``image``; :data:`~spotwise.providers.registry.PROVIDER_OPTIONS`);
* a region its cloud does not have (where the catalog or the cloud module can tell:
  ``check_region``);
* an instance type its catalog does not know (where the catalog can tell:
  ``check_instance_type``), in each region the job names;
* a checkpoint location the orchestrator cannot write (:func:`probe_checkpoint_root`).

Each failure is a one-line :class:`~spotwise.errors.SpecError` (exit 2) naming the spec field.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping
from pathlib import Path

from spotwise.errors import CheckpointError, NotFoundError, ProviderError, SpecError
from spotwise.planner.backend import Backend
from spotwise.providers.base import Catalog
from spotwise.providers.registry import cloud_module, missing_required
from spotwise.spec import JobSpec, ProviderSpec

PROBE_PREFIX = ".spotwise-probe-"  # a dot name: never listed as a checkpoint


def preflight(spec: JobSpec, backend: Backend, checkpoint_root: str) -> None:
    """Refuse the job (SpecError, one line) before it is recorded; see the module docstring.
    ``checkpoint_root`` is the job's own checkpoint folder or URI prefix (under
    ``checkpoint.location``)."""
    catalogs = _catalogs(backend)
    for i, p in enumerate(spec.providers):
        if p.name == "local":
            continue  # open_backend checked the replayed market's regions, zones and offers
        _required_options(i, p)
        catalog = catalogs.get(p.name)
        _regions(i, p, catalog)
        if catalog is not None:
            _instance_types(i, p, catalog)
    aws_profile = next(
        (
            q.options["profile"]
            for q in spec.providers
            if q.name == "aws" and q.options.get("profile")
        ),
        None,
    )
    probe_checkpoint_root(checkpoint_root, spec.checkpoint.location, aws_profile=aws_profile)


def _catalogs(backend: Backend) -> dict[str, Catalog]:
    members = getattr(backend.catalog, "members", None)  # a job on several clouds
    if isinstance(members, Mapping):
        return dict(members)
    return {backend.provider: backend.catalog}


def _required_options(i: int, p: ProviderSpec) -> None:
    for name, option in missing_required(p.name, p.options):
        raise SpecError(
            f"spec field 'providers.{i}.options.{name}': required to launch on {p.name}; "
            f"add `{name}: {option.example}` under the {p.name} provider's options"
        )


def _regions(i: int, p: ProviderSpec, catalog: Catalog | None) -> None:
    """The job's catalog checks its regions when it can (GCP, Azure: their prices and API),
    else the cloud module (AWS)."""
    check = getattr(catalog, "check_region", None) or getattr(
        cloud_module(p.name), "check_region", None
    )
    if not callable(check):
        return  # this cloud's regions are known only to its API: offers show what exists
    for j, region in enumerate(p.regions):
        try:
            check(region)
        except NotFoundError as e:
            raise SpecError(f"spec field 'providers.{i}.regions.{j}': {e.message}") from None


def _instance_types(i: int, p: ProviderSpec, catalog: Catalog) -> None:
    check = getattr(catalog, "check_instance_type", None)
    if not callable(check):
        return
    regions: list[str | None] = list(p.regions) or [None]  # None: the catalog's default
    for region in regions:
        for j, name in enumerate(p.instance_types):
            try:
                check(name, region)
            except NotFoundError as e:
                where = f" in {region}" if region else ""
                raise SpecError(
                    f"spec field 'providers.{i}.instance_types.{j}': {e.message}{where}"
                ) from None


def probe_checkpoint_root(root: str, location: str = "", aws_profile: str | None = None) -> None:
    """Write, then delete, one small object under the job's checkpoint ``root`` with the
    checkpoint store's own primitives; SpecError naming ``checkpoint.location`` (as written:
    ``location``) with the reason when the write fails: a read-only folder, a path through a
    file, a missing bucket. (A delete that fails is let be: the orchestrator never deletes
    there, and no reader lists a dot-named object as a checkpoint.)

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
        return  # a store registered by someone else: it has no primitives to probe with
    created = _missing_folders(store.root) if isinstance(store, LocalCheckpointStore) else []
    key = f"{PROBE_PREFIX}{uuid.uuid4().hex[:12]}"
    try:
        try:
            store._write(key, b"spotwise checks that it can write here; safe to delete\n")
        except (CheckpointError, ProviderError) as e:
            folder = created[-1].parent if created else getattr(store, "root", None)
            raise _unwritable(where, e, folder) from None
        # the orchestrator never needs to delete there (the trials prune their own
        # checkpoints): a probe it may not delete stays, ignored by every reader
        with contextlib.suppress(CheckpointError, ProviderError):
            store._remove(key)
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


def _unwritable(
    where: str, e: CheckpointError | ProviderError, folder: Path | None = None
) -> SpecError:
    """``folder``: for a local store, the deepest folder (or file) of the path that exists,
    the one the system refused to write into."""
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
