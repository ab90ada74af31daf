"""A step saved again never overwrites the bytes its manifest names; once a manifest is
written, the save has succeeded whatever fails after it; a manifest or a data file that
cannot be a checkpoint is skipped like a corrupt one.

Run against every backend of the contract suite (local, GCS and Azure Blob over fakes of their
HTTP APIs); S3 on moto is in ``test_s3_checkpoint_safety.py``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from fake_azure_blob import azure_blob_backend
from fake_gcs import gcs_backend

from spotwise.checkpoint import LocalCheckpointStore, checkpoint_name, manifest_name
from spotwise.checkpoint.base import ManifestCheckpointStore, UnusableCheckpointError
from spotwise.errors import CheckpointError

Factory = Callable[..., ManifestCheckpointStore]
FIVE = checkpoint_name(5)


def _local(request: pytest.FixtureRequest, tmp_path: Path) -> Factory:
    return lambda keep=2: LocalCheckpointStore(tmp_path / "trial-1", keep=keep)


BACKENDS = {"local": _local, "gcs": gcs_backend, "azure_blob": azure_blob_backend}


@pytest.fixture(params=sorted(BACKENDS))
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Factory:
    return BACKENDS[request.param](request, tmp_path)


def _put(store: ManifestCheckpointStore, step: int, data: bytes) -> str:
    return store.put(checkpoint_name(step), data, {"step": step})


def _sha12(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


def _data_files(store: ManifestCheckpointStore) -> list[str]:
    return sorted(k for k in store._keys() if k.endswith(".pt"))


def _fail_manifest_write(store: ManifestCheckpointStore, error: BaseException) -> None:
    real_write = store._write

    def write(key: str, data: bytes) -> None:
        if key.endswith(".json"):
            raise error
        real_write(key, data)

    store._write = write  # type: ignore[method-assign]


# -- 1. a step saved again -------------------------------------------------------------------
@pytest.mark.parametrize(
    "failure",
    [KeyboardInterrupt("killed after the data, before the manifest"), CheckpointError("503")],
    ids=["crash", "failed-write"],
)
def test_a_step_saved_again_keeps_its_checkpoint_until_the_new_manifest_exists(
    make_store: Factory, failure: BaseException
) -> None:
    _put(make_store(), 5, b"attempt 0, step 5")
    relaunched = make_store()  # retrains instead of resuming: other bytes for the same step
    _fail_manifest_write(relaunched, failure)
    with pytest.raises(type(failure)):
        _put(relaunched, 5, b"attempt 1, step 5: other bytes")
    found = make_store().get_latest()
    assert found is not None
    assert (found[0], found[1]["step"], found[1]["file"]) == (b"attempt 0, step 5", 5, FIVE)
    assert "fallback_from" not in found[1]
    assert make_store()._read(FIVE) == b"attempt 0, step 5"  # never overwritten


def test_a_step_saved_again_goes_under_a_content_name_and_the_old_data_goes(
    make_store: Factory,
) -> None:
    store = make_store()
    assert _put(store, 5, b"first").endswith(FIVE)  # a first save keeps the plain name
    second = f"ckpt-00000005-{_sha12(b'second')}.pt"
    assert _put(store, 5, b"second") == store._location(second)
    assert _data_files(store) == [second]  # the replaced data file is removed after the commit
    assert store._read("LATEST") == b"ckpt-00000005.json\n"
    found = make_store().get_latest()
    assert found is not None and (found[0], found[1]["file"]) == (b"second", second)
    third = f"ckpt-00000005-{_sha12(b'third')}.pt"
    _put(store, 5, b"third")
    assert _data_files(store) == [third]
    _put(store, 5, b"third")  # the same bytes again: where they are, nothing else written
    assert _data_files(store) == [third]
    found = make_store().get_latest()
    assert found is not None and (found[0], found[1]["file"]) == (b"third", third)


def test_the_same_bytes_saved_again_keep_the_plain_name(make_store: Factory) -> None:
    store = make_store()
    _put(store, 5, b"same")
    _put(make_store(), 5, b"same")
    assert _data_files(store) == [FIVE]
    assert json.loads(store._read(manifest_name(5)) or b"")["file"] == FIVE


def test_retention_and_the_orphan_sweep_know_content_names(make_store: Factory) -> None:
    store = make_store()
    _put(store, 5, b"five")
    _put(store, 5, b"five again")  # named ckpt-00000005-<sha>.pt
    orphan = f"ckpt-00000005-{_sha12(b'killed')}.pt"
    store._write(orphan, b"killed")  # a writer killed before its manifest
    for step in (10, 15):
        _put(store, step, b"later")
    assert _data_files(store) == [checkpoint_name(10), checkpoint_name(15)]
    assert [m["step"] for m in store.list()] == [10, 15]


def test_a_content_named_checkpoint_is_set_aside_when_corrupt(make_store: Factory) -> None:
    store = make_store(keep=3)
    _put(store, 5, b"five")
    _put(store, 10, b"ten")
    _put(store, 10, b"ten again")
    name = f"ckpt-00000010-{_sha12(b'ten again')}.pt"
    store._write(name, b"ten agaiN")  # damaged
    found = make_store().get_latest()
    assert found is not None and found[1]["step"] == 5 and found[1]["fallback_from"] == name
    assert store.set_aside(10) == store._location(f"{name}.corrupt")
    assert store._read(f"{name}.corrupt") == b"ten agaiN"
    _put(store, 10, b"ten, third")  # no manifest of step 10 left: a first save again
    assert checkpoint_name(10) in _data_files(store)


def test_a_clash_of_the_short_content_name_takes_the_whole_digest(make_store: Factory) -> None:
    store = make_store()
    _put(store, 5, b"first")
    new = b"second"
    clash = f"ckpt-00000005-{_sha12(new)}.pt"  # the old manifest names it, with other bytes
    store._write(clash, b"first")
    manifest = json.loads(store._read(manifest_name(5)) or b"")
    store._write(manifest_name(5), json.dumps({**manifest, "file": clash}).encode())
    full = f"ckpt-00000005-{hashlib.sha256(new).hexdigest()}.pt"
    assert _put(store, 5, new) == store._location(full)
    assert full in _data_files(store) and clash not in _data_files(store)  # replaced: removed
    found = make_store().get_latest()
    assert found is not None and found[0] == new


# -- 2. what fails after the manifest does not fail the save ---------------------------------
def test_a_failed_latest_write_is_kept_in_put_problems_not_raised(make_store: Factory) -> None:
    store = make_store()
    _put(store, 5, b"five")
    real_write = store._write

    def write(key: str, data: bytes) -> None:
        if key == "LATEST":
            raise CheckpointError("checkpoint store: writing LATEST failed: SlowDown (503)")
        real_write(key, data)

    store._write = write  # type: ignore[method-assign]
    assert _put(store, 10, b"ten") == store._location(checkpoint_name(10))
    assert list(store.put_problems) == ["latest"]
    assert "SlowDown" in store.put_problems["latest"].message
    assert store._read("LATEST") == b"ckpt-00000005.json\n"  # stale
    found = make_store().get_latest()  # readers go by the manifests
    assert found is not None and (found[0], found[1]["step"]) == (b"ten", 10)
    store._write = real_write  # type: ignore[method-assign]
    _put(store, 15, b"fifteen")
    assert store.put_problems == {}


def test_a_failed_delete_is_kept_in_put_problems_not_raised(make_store: Factory) -> None:
    store = make_store()

    def remove(key: str) -> None:
        raise CheckpointError(f"checkpoint store: deleting {key} failed: AccessDenied")

    store._remove = remove  # type: ignore[method-assign]
    for step in (5, 10, 15):
        _put(store, step, f"state {step}".encode())
    assert list(store.put_problems) == ["retention"]
    assert "AccessDenied" in store.put_problems["retention"].message
    assert store._read("LATEST") == b"ckpt-00000015.json\n"
    found = make_store().get_latest()
    assert found is not None and found[1]["step"] == 15


def test_a_failed_listing_for_retention_is_kept_in_put_problems(make_store: Factory) -> None:
    store = make_store()
    real_keys, calls = store._keys, []

    def keys() -> list[str]:
        calls.append(1)
        if len(calls) > 1:  # the put's own listing works, retention's fails
            raise CheckpointError("checkpoint store: listing failed: SlowDown (503)")
        return real_keys()

    store._keys = keys  # type: ignore[method-assign]
    _put(store, 5, b"five")
    assert list(store.put_problems) == ["retention"]
    found = make_store().get_latest()
    assert found is not None and found[1]["step"] == 5


# -- 5, 6. a manifest or a data file that cannot be a checkpoint -----------------------------
@pytest.mark.parametrize("name", [".", "..", "LATEST", "ckpt-00000005.json", ".tmp-x", ""])
def test_a_manifest_naming_no_data_file_is_unusable(make_store: Factory, name: str) -> None:
    store = make_store()
    _put(store, 5, b"five")
    _put(store, 10, b"ten")
    manifest = json.loads(store._read(manifest_name(10)) or b"")
    store._write(manifest_name(10), json.dumps({**manifest, "file": name}).encode())
    found = make_store().get_latest()
    assert found is not None and found[1]["step"] == 5
    assert "names no valid file" in found[1]["fallback_reason"]
    assert found[1]["fallback_from"] == checkpoint_name(10)
    _put(store, 15, b"fifteen")  # retention copes with it (never deletes '.' or the folder)
    assert [m["step"] for m in store.list()] == [10, 15]


def test_a_manifest_size_that_is_not_an_integer_says_so(make_store: Factory) -> None:
    store = make_store()
    _put(store, 5, b"five")
    _put(store, 10, b"ten")
    manifest = json.loads(store._read(manifest_name(10)) or b"")
    store._write(manifest_name(10), json.dumps({**manifest, "size": "3"}).encode())
    found = make_store().get_latest()
    assert found is not None and found[1]["step"] == 5
    where = store._location(checkpoint_name(10))
    assert found[1]["fallback_reason"] == (
        f"checkpoint {where}: its manifest's size is not an integer: '3'"
    )


@pytest.mark.parametrize("which", ["data", "manifest"])
def test_a_local_folder_in_place_of_a_file_is_unusable(tmp_path: Path, which: str) -> None:
    store = LocalCheckpointStore(tmp_path / "t")
    _put(store, 5, b"five")
    _put(store, 10, b"ten")
    key = checkpoint_name(10) if which == "data" else manifest_name(10)
    (store.root / key).unlink()
    (store.root / key).mkdir()
    with pytest.raises(UnusableCheckpointError, match="is a folder, not a file"):
        store._read(key)
    found = LocalCheckpointStore(tmp_path / "t").get_latest()
    assert found is not None and found[1]["step"] == 5
    assert found[1]["fallback_reason"] == f"checkpoint {store.root / key} is a folder, not a file"
    store.set_aside(10)
    assert (store.root / f"{key}.corrupt").is_dir()  # kept, out of the way
    _put(store, 10, b"ten again")
    found = LocalCheckpointStore(tmp_path / "t").get_latest()
    assert found is not None and (found[0], found[1]["step"]) == (b"ten again", 10)
