"""Contract tests for checkpoint stores: run against every backend in ``BACKENDS``.

The crash and corruption scenarios go through the store's own blob primitives (``_write``,
``_read``), so every backend in ``BACKENDS`` (local, GCS and Azure Blob over fakes of their HTTP
APIs) is put through the same paces. S3 has its own tests on moto (tests/providers).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_azure_blob import azure_blob_backend
from fake_gcs import gcs_backend

from spotwise.checkpoint import (
    CheckpointStore,
    LocalCheckpointStore,
    ManifestCheckpointStore,
    checkpoint_name,
    manifest_name,
)
from spotwise.checkpoint.base import ForeignCheckpointError, Manifest, UnusableCheckpointError
from spotwise.errors import CheckpointError

Factory = Callable[..., ManifestCheckpointStore]


def _local(request: pytest.FixtureRequest, tmp_path: Path) -> Factory:
    return lambda keep=2: LocalCheckpointStore(tmp_path / "trial-1", keep=keep)


# the cloud backends run the real client libraries against stateful fakes of their HTTP APIs
BACKENDS = {"local": _local, "gcs": gcs_backend, "azure_blob": azure_blob_backend}


@pytest.fixture(params=sorted(BACKENDS))
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Factory:
    return BACKENDS[request.param](request, tmp_path)


def _put(store: ManifestCheckpointStore, step: int, payload: bytes | None = None) -> str:
    data = payload if payload is not None else f"state after step {step}".encode() * 10
    return store.put(checkpoint_name(step), data, {"step": step, "attempt": 0})


def _corrupt_byte(store: ManifestCheckpointStore, key: str) -> None:
    data = bytearray(store._read(key) or b"")
    data[len(data) // 2] ^= 0xFF
    store._write(key, bytes(data))


def test_is_a_checkpoint_store(make_store: Factory) -> None:
    assert isinstance(make_store(), CheckpointStore)


def test_empty_store(make_store: Factory) -> None:
    store = make_store()
    assert store.get_latest() is None
    assert store.latest_manifest() is None
    assert store.list() == []


def test_put_and_get_latest_round_trip(make_store: Factory) -> None:
    store = make_store()
    uri5 = _put(store, 5)
    uri10 = _put(store, 10, b"ten")
    assert uri5.endswith("ckpt-00000005.pt") and uri10.endswith("ckpt-00000010.pt")
    found = store.get_latest()
    assert found is not None
    data, manifest = found
    assert data == b"ten"
    assert manifest["step"] == 10 and manifest["file"] == "ckpt-00000010.pt"
    assert manifest["size"] == 3 and len(manifest["sha256"]) == 64
    assert manifest["attempt"] == 0 and manifest["created_at"] <= time.time()
    assert "fallback_from" not in manifest
    latest = store.latest_manifest()
    assert latest is not None and latest["step"] == 10
    assert [m["step"] for m in store.list()] == [5, 10]
    assert store._read("LATEST") == b"ckpt-00000010.json\n"


def test_same_step_again_replaces_it(make_store: Factory) -> None:
    store = make_store()
    _put(store, 5, b"first")
    _put(store, 5, b"second")
    found = store.get_latest()
    assert found is not None and found[0] == b"second"
    assert [m["step"] for m in store.list()] == [5]


def test_crash_between_data_and_manifest_keeps_previous(make_store: Factory) -> None:
    store = make_store()
    _put(store, 5, b"five")
    real_write = store._write

    def crash_on_manifest(key: str, data: bytes) -> None:
        if key.endswith(".json"):
            raise KeyboardInterrupt("simulated crash after the data, before the manifest")
        real_write(key, data)

    store._write = crash_on_manifest  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        _put(store, 10, b"ten")
    reopened = make_store()  # a relaunched trial
    assert reopened._read(checkpoint_name(10)) == b"ten"  # the data landed, no manifest
    found = reopened.get_latest()
    assert found is not None
    assert found[0] == b"five" and found[1]["step"] == 5
    assert "fallback_from" not in found[1]  # an orphan data file is not a checkpoint
    _put(reopened, 15)
    _put(reopened, 20)
    assert checkpoint_name(10) not in reopened._keys()  # orphan cleaned by retention


def test_corrupt_byte_falls_back_to_previous_verified(make_store: Factory) -> None:
    store = make_store()
    _put(store, 5, b"five" * 100)
    _put(store, 10, b"ten" * 100)
    _corrupt_byte(store, checkpoint_name(10))
    found = make_store().get_latest()
    assert found is not None
    data, manifest = found
    assert data == b"five" * 100 and manifest["step"] == 5
    assert manifest["fallback_from"] == "ckpt-00000010.pt"
    assert "ckpt-00000010.pt" in manifest["fallback_reason"]
    assert "sha256" in manifest["fallback_reason"]


def test_partial_data_falls_back_with_size_message(make_store: Factory) -> None:
    store = make_store()
    _put(store, 5, b"five" * 100)
    _put(store, 10, b"ten" * 100)
    store._write(checkpoint_name(10), b"ten" * 50)  # truncated
    found = make_store().get_latest()
    assert found is not None and found[1]["step"] == 5
    reason = found[1]["fallback_reason"]
    assert "ckpt-00000010.pt" in reason and "size 150" in reason and "300" in reason


def test_corrupt_manifest_falls_back(make_store: Factory) -> None:
    store = make_store()
    _put(store, 5, b"five")
    _put(store, 10, b"ten")
    store._write(manifest_name(10), b'{"step": 10, "fi')
    found = store.get_latest()
    assert found is not None and found[0] == b"five"
    assert "not valid JSON" in found[1]["fallback_reason"]
    assert [m["step"] for m in store.list()] == [5]
    latest = store.latest_manifest()
    assert latest is not None and latest["step"] == 5


def test_only_checkpoint_corrupt_raises_naming_the_file(make_store: Factory) -> None:
    store = make_store()
    _put(store, 5, b"five" * 100)
    _corrupt_byte(store, checkpoint_name(5))
    with pytest.raises(CheckpointError) as err:
        make_store().get_latest()
    msg = str(err.value)
    assert "ckpt-00000005.pt" in msg and "sha256" in msg and "\n" not in msg
    assert err.value.hint


def test_missing_data_file_is_reported(make_store: Factory) -> None:
    store = make_store()
    _put(store, 5)
    store._remove(checkpoint_name(5))
    with pytest.raises(CheckpointError, match=r"ckpt-00000005\.pt is missing"):
        store.get_latest()


def test_retention_keeps_two(make_store: Factory) -> None:
    store = make_store()
    for step in (5, 10, 15, 20, 25):
        _put(store, step)
    assert [m["step"] for m in store.list()] == [20, 25]
    data_keys = sorted(k for k in store._keys() if k.endswith(".pt"))
    assert data_keys == ["ckpt-00000020.pt", "ckpt-00000025.pt"]


def test_retention_never_deletes_the_only_verified(make_store: Factory) -> None:
    store = make_store(keep=10)
    for step in (5, 10, 15):
        _put(store, step, f"payload {step}".encode() * 20)
    _corrupt_byte(store, checkpoint_name(10))
    _corrupt_byte(store, checkpoint_name(15))
    reopened = make_store(keep=2)
    reopened.delete_older_than(2)
    assert [m["step"] for m in reopened.list()] == [5, 10, 15]  # 5 is the only good one
    found = reopened.get_latest()
    assert found is not None and found[1]["step"] == 5
    assert found[1]["fallback_from"] == "ckpt-00000015.pt"
    _put(reopened, 20)  # now a good one is among the newest two: 5 goes
    assert [m["step"] for m in reopened.list()] == [15, 20]


def test_delete_older_than_one(make_store: Factory) -> None:
    store = make_store(keep=5)
    for step in (1, 2, 3):
        _put(store, step)
    store.delete_older_than(1)
    assert [m["step"] for m in store.list()] == [3]


@pytest.mark.parametrize(
    ("name", "meta", "error"),
    [
        ("ckpt-00000001.pt", {}, "step must be an int"),
        ("ckpt-00000001.pt", {"step": -1}, "step must be an int"),
        ("ckpt-00000001.pt", {"step": True}, "step must be an int"),
        ("../escape.pt", {"step": 1}, "plain file name"),
        ("LATEST", {"step": 1}, "plain file name"),
        ("x.json", {"step": 1}, "must not end in .json"),
        ("ckpt-00000001.pt", {"step": 1, "sha256": "x"}, "must not set"),
        ("ckpt-00000001.pt", {"step": 1, "x": object()}, "JSON-serialisable"),
        ("ckpt-00000001.pt", {"step": 1, "x": float("nan")}, "JSON-serialisable"),
    ],
)
def test_put_validates(make_store: Factory, name: str, meta: dict, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        make_store().put(name, b"x", meta)


def test_keep_must_be_positive(make_store: Factory) -> None:
    with pytest.raises(ValueError, match="keep must be an int >= 1, got keep=0"):
        make_store(keep=0)
    with pytest.raises(ValueError, match="keep must be"):
        make_store().delete_older_than(0)


# -- steps may go back (a relaunch that retrains instead of resuming) ------------------------
def test_an_older_step_is_written_kept_and_named_by_latest(make_store: Factory) -> None:
    store = make_store()
    for step in (5, 10, 15):  # the earlier attempt; retention leaves 10 and 15
        _put(store, step)
    assert store.newer_at_put is None
    relaunched = make_store()  # retrains from scratch: its first save is step 5 again
    uri = _put(relaunched, 5, b"five, again")
    assert relaunched.newer_at_put == 15  # what the put's own listing saw
    assert uri == relaunched._location(checkpoint_name(5))
    assert relaunched._read(checkpoint_name(5)) == b"five, again"  # the path it returned exists
    assert relaunched._read("LATEST") == b"ckpt-00000005.json\n"  # names a manifest that exists
    assert [m["step"] for m in relaunched.list()] == [5, 10, 15]  # nothing else deleted
    assert not [k for k in relaunched._keys() if k.endswith(".corrupt")]  # nothing set aside
    found = make_store().get_latest()  # a reader goes by step: the earlier attempt's 15
    assert found is not None and found[1]["step"] == 15 and "fallback_from" not in found[1]

    _put(relaunched, 10, b"ten, again")  # retention keeps 10 (just written) and 15 (newest)
    assert relaunched.newer_at_put == 15
    assert [m["step"] for m in relaunched.list()] == [10, 15]
    assert relaunched._read("LATEST") == b"ckpt-00000010.json\n"
    _put(relaunched, 15, b"fifteen, again")  # caught up: nothing newer any more
    assert relaunched.newer_at_put is None
    _put(relaunched, 20)
    assert [m["step"] for m in relaunched.list()] == [15, 20]
    fifteen = hashlib.sha256(b"fifteen, again").hexdigest()[:12]  # saved again: a fresh name
    assert sorted(k for k in relaunched._keys() if k.endswith(".pt")) == [
        f"ckpt-00000015-{fifteen}.pt",
        "ckpt-00000020.pt",
    ]
    assert relaunched.get_latest()[1]["step"] == 20  # type: ignore[index]


def test_keep_one_still_keeps_the_older_step_just_written(make_store: Factory) -> None:
    store = make_store(keep=1)
    _put(store, 10)
    relaunched = make_store(keep=1)
    _put(relaunched, 5)
    assert [m["step"] for m in relaunched.list()] == [5, 10]
    _put(relaunched, 7)  # 5 goes: neither the newest nor the one written last
    assert [m["step"] for m in relaunched.list()] == [7, 10]
    assert relaunched._read("LATEST") == b"ckpt-00000007.json\n"
    assert checkpoint_name(5) not in relaunched._keys()
    found = relaunched.get_latest()
    assert found is not None and found[1]["step"] == 10


def test_an_older_step_past_a_corrupt_newer_one_is_kept(make_store: Factory) -> None:
    store = make_store()
    _put(store, 5)
    _put(store, 10, b"ten" * 100)
    _corrupt_byte(store, checkpoint_name(10))
    _put(store, 7, b"seven")  # resumed from 5 past the corrupt 10: 7 is the newest usable one
    assert store.newer_at_put == 10  # as listed: the put reads no data to check it
    found = make_store().get_latest()
    assert found is not None and (found[0], found[1]["step"]) == (b"seven", 7)
    assert found[1]["fallback_from"] == "ckpt-00000010.pt"
    assert store._read("LATEST") == b"ckpt-00000007.json\n"


def test_a_put_lists_the_store_as_often_as_before(make_store: Factory) -> None:
    store = make_store(keep=5)
    _put(store, 10)
    calls: list[str] = []
    real_keys = store._keys

    def counting() -> list[str]:
        calls.append("list")
        return real_keys()

    store._keys = counting  # type: ignore[method-assign]
    _put(store, 5)  # the listing that finds step 10 is one retention needs anyway
    assert store.newer_at_put == 10
    assert len(calls) == 3  # newer steps, retention's manifests, retention's orphan data


# -- loading with a decoder, setting aside what fails ----------------------------------------
def test_load_latest_skips_what_the_decoder_rejects(make_store: Factory) -> None:
    store = make_store(keep=5)
    for step in (5, 10, 15):
        _put(store, step, f"payload {step}".encode())

    def decode(data: bytes, manifest: Manifest, where: str) -> str:
        if manifest["step"] == 15:
            raise ForeignCheckpointError(f"checkpoint {where} belongs to another trial")
        if manifest["step"] == 10:
            raise UnusableCheckpointError(f"checkpoint {where} is not a torch file")
        return data.decode()

    found = store.load_latest(decode)
    assert found is not None
    decoded, manifest = found
    assert decoded == "payload 5" and manifest["step"] == 5
    where15, where10 = store._location(checkpoint_name(15)), store._location(checkpoint_name(10))
    assert manifest["fallback_from"] == "ckpt-00000015.pt"
    assert manifest["fallback_reason"] == f"checkpoint {where15} belongs to another trial"
    assert manifest["fallback_skipped"] == [
        {
            "step": 15,
            "file": "ckpt-00000015.pt",
            "reason": f"checkpoint {where15} belongs to another trial",
            "foreign": True,
        },
        {
            "step": 10,
            "file": "ckpt-00000010.pt",
            "reason": f"checkpoint {where10} is not a torch file",
            "foreign": False,
        },
    ]


def test_load_latest_when_the_decoder_rejects_every_one(make_store: Factory) -> None:
    store = make_store()
    _put(store, 5)
    _put(store, 10)

    def reject(data: bytes, manifest: Manifest, where: str) -> bytes:
        raise UnusableCheckpointError(
            f"checkpoint {where} is not a torch file", hint="save it again"
        )

    with pytest.raises(CheckpointError) as err:
        store.load_latest(reject)
    where = store._location(checkpoint_name(10))
    assert err.value.message == (
        f"checkpoint {where} is not a torch file; no older checkpoint in {store.uri} is usable "
        "either"
    )
    assert err.value.hint == "save it again"


def test_load_latest_propagates_what_is_not_the_files_fault(make_store: Factory) -> None:
    store = make_store()
    _put(store, 5)
    _put(store, 10)

    def busy(data: bytes, manifest: Manifest, where: str) -> bytes:
        raise CheckpointError(f"checkpoint {where} cannot be loaded here: out of memory")

    with pytest.raises(CheckpointError) as err:  # not a fallback to step 5
        store.load_latest(busy)
    assert not isinstance(err.value, UnusableCheckpointError)
    assert err.value.message == (
        f"checkpoint {store._location(checkpoint_name(10))} cannot be loaded here: out of memory"
    )


@pytest.mark.parametrize("key", [checkpoint_name(10), manifest_name(10)])
def test_a_failed_read_propagates_instead_of_falling_back(make_store: Factory, key: str) -> None:
    store = make_store()
    _put(store, 5)
    _put(store, 10)
    reopened = make_store()  # a relaunch: nothing known good yet
    real_read = reopened._read

    def throttled(name: str) -> bytes | None:
        if name == key:
            raise CheckpointError(f"checkpoint store: reading {name} failed: SlowDown (503)")
        return real_read(name)

    reopened._read = throttled  # type: ignore[method-assign]
    with pytest.raises(CheckpointError) as err:
        reopened.get_latest()
    assert err.value.message == f"checkpoint store: reading {key} failed: SlowDown (503)"
    assert not isinstance(err.value, UnusableCheckpointError)
    reopened._read = real_read  # type: ignore[method-assign]
    found = reopened.get_latest()  # the next attempt: the same newest checkpoint, unharmed
    assert found is not None and found[1]["step"] == 10 and "fallback_from" not in found[1]


def test_what_fails_its_checks_is_unusable(make_store: Factory) -> None:
    store = make_store(keep=5)
    for step in (1, 2, 3, 4):
        _put(store, step, f"payload {step}".encode() * 10)
    _corrupt_byte(store, checkpoint_name(4))  # checksum
    store._write(checkpoint_name(3), b"short")  # size
    store._remove(checkpoint_name(2))  # missing data
    store._write(manifest_name(1), b"{")  # manifest
    with pytest.raises(CheckpointError) as err:
        make_store().get_latest()
    assert "sha256" in err.value.message and "no older checkpoint" in err.value.message
    skipped = []
    for step in (4, 3, 2, 1):
        try:
            make_store().read(make_store()._load_manifest(manifest_name(step), step))
        except UnusableCheckpointError as e:
            skipped.append(step)
            assert "\n" not in e.message
    assert skipped == [4, 3, 2, 1]


def test_set_aside_renames_and_never_deletes(make_store: Factory) -> None:
    store = make_store()
    _put(store, 5, b"five")
    _put(store, 10, b"ten" * 100)
    _corrupt_byte(store, checkpoint_name(10))
    bad_data, bad_manifest = store._read(checkpoint_name(10)), store._read(manifest_name(10))
    kept = store.set_aside(10)
    assert kept == store._location("ckpt-00000010.pt.corrupt")
    assert store._read("ckpt-00000010.pt.corrupt") == bad_data
    assert store._read("ckpt-00000010.json.corrupt") == bad_manifest
    assert store._read(checkpoint_name(10)) is None and store._read(manifest_name(10)) is None
    assert store._read("LATEST") == b"ckpt-00000005.json\n"  # the newest checkpoint left
    found = store.get_latest()
    assert found is not None and found[0] == b"five" and "fallback_from" not in found[1]

    _put(store, 10, b"ten again")  # the next save of step 10 leaves the evidence alone
    _corrupt_byte(store, checkpoint_name(10))
    assert store.set_aside(10, ".foreign") == store._location("ckpt-00000010.pt.foreign")
    _put(store, 10, b"ten, third")
    _corrupt_byte(store, checkpoint_name(10))
    assert store.set_aside(10) == store._location("ckpt-00000010.pt.corrupt-2")
    assert store.set_aside(10) is None  # nothing left to set aside
    for step in (15, 20, 25):  # retention never touches what was set aside
        _put(store, step)
    assert sorted(k for k in store._keys() if k.endswith(("corrupt", "corrupt-2", "foreign"))) == [
        "ckpt-00000010.json.corrupt",
        "ckpt-00000010.json.corrupt-2",
        "ckpt-00000010.json.foreign",
        "ckpt-00000010.pt.corrupt",
        "ckpt-00000010.pt.corrupt-2",
        "ckpt-00000010.pt.foreign",
    ]
    assert store._read("ckpt-00000010.pt.corrupt") == bad_data
    with pytest.raises(ValueError, match=r"suffix must look like '\.corrupt', got 'x/y'"):
        store.set_aside(25, "x/y")


# -- local folder specifics -------------------------------------------------------------------
def test_local_layout_and_no_temp_files(tmp_path: Path) -> None:
    store = LocalCheckpointStore(tmp_path / "t")
    uri = _put(store, 7, b"seven")
    assert uri == str(tmp_path / "t" / "ckpt-00000007.pt")
    assert sorted(os.listdir(tmp_path / "t")) == [
        "LATEST",
        "ckpt-00000007.json",
        "ckpt-00000007.pt",
    ]
    manifest = json.loads((tmp_path / "t" / "ckpt-00000007.json").read_text())
    assert set(manifest) >= {"step", "file", "sha256", "size", "created_at", "attempt"}


def test_local_failed_replace_leaves_nothing_partial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalCheckpointStore(tmp_path / "t")
    _put(store, 5, b"five")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(CheckpointError, match=r"cannot write checkpoint .*ckpt-00000010\.pt"):
        _put(store, 10, b"ten")
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path / "t")) == [
        "LATEST",
        "ckpt-00000005.json",
        "ckpt-00000005.pt",
    ]
    found = store.get_latest()
    assert found is not None and found[0] == b"five"


def test_local_removes_stale_temp_files(tmp_path: Path) -> None:
    root = tmp_path / "t"
    root.mkdir()
    stale, fresh = root / ".tmp-ckpt-00000003.pt.old", root / ".tmp-ckpt-00000004.pt.new"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"y")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    _put(LocalCheckpointStore(root), 5)
    assert not stale.exists() and fresh.exists()


def test_local_root_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(CheckpointError, match="not a folder"):
        LocalCheckpointStore(tmp_path / "f")


# ---- probe: can this process keep checkpoints here? ---------------------------------------------
PROBE = ".spotwise-probe-test1"


def _recording(store: ManifestCheckpointStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record each primitive call on ``store`` as ``"<name> <key>"``."""
    calls: list[str] = []
    for name in ("_write", "_read", "_remove"):
        real = getattr(store, name)

        def record(key: str, *rest: Any, _name: str = name, _real: Any = real) -> Any:
            calls.append(f"{_name} {key}")
            return _real(key, *rest)

        monkeypatch.setattr(store, name, record)
    return calls


def test_probe_writes_reads_back_and_deletes_a_dot_named_object(
    make_store: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store()
    _put(store, 5)
    before = store.list()
    calls = _recording(store, monkeypatch)
    assert store.probe(PROBE) is None
    assert calls == [f"_write {PROBE}", f"_read {PROBE}", f"_remove {PROBE}"]
    assert store._read(PROBE) is None  # gone again
    assert store.list() == before  # the checkpoints are untouched
    found = store.get_latest()
    assert found is not None and found[1]["step"] == 5


@pytest.mark.parametrize("back", [b"other", None])
def test_probe_that_does_not_read_back_names_the_location(
    back: bytes | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalCheckpointStore(tmp_path / "t")
    monkeypatch.setattr(store, "_read", lambda key: back)
    got = "nothing" if back is None else "5 other bytes"
    with pytest.raises(CheckpointError) as info:
        store.probe(PROBE)
    assert str(info.value) == (
        f"checkpoint location {tmp_path / 't'}: wrote {tmp_path / 't' / PROBE} but read back {got}"
    )
    assert os.listdir(tmp_path / "t") == []  # removed all the same


def test_probe_lets_a_failed_delete_be(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whoever may write checkpoints need not be allowed to delete them; no reader lists the
    dot-named object."""
    store = LocalCheckpointStore(tmp_path / "t")

    def refuse(key: str) -> None:
        raise CheckpointError(f"cannot delete checkpoint {tmp_path / 't' / key}: denied")

    monkeypatch.setattr(store, "_remove", refuse)
    store.probe(PROBE)
    assert os.listdir(tmp_path / "t") == [PROBE]
    assert store.list() == [] and store.get_latest() is None


def test_probe_that_cannot_write_raises_the_backend_s_error(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    store = LocalCheckpointStore(tmp_path / "afile" / "t")
    with pytest.raises(CheckpointError) as info:
        store.probe(PROBE)
    assert str(info.value).startswith(
        f"cannot write checkpoint {tmp_path / 'afile' / 't' / PROBE}: "
    )
    assert isinstance(info.value.__cause__, OSError)  # preflight reports the system's reason


@pytest.mark.parametrize(
    "name", ["probe", "", ".", "..", "./x", ".a/b", ".a\\b", "ckpt-00000001.pt"]
)
def test_probe_takes_only_a_dot_name(name: str, tmp_path: Path) -> None:
    store = LocalCheckpointStore(tmp_path / "t")
    with pytest.raises(ValueError, match=r"^probe name must be a dot name like '\.probe-1', got "):
        store.probe(name)
    assert not (tmp_path / "t").exists()
