"""A save whose data file is written but whose manifest cannot be (the disk filled between
the two) leaves no data file behind: it held room on the full disk, named by no manifest,
until retention passed its step (review-bf BF6). The last good checkpoint stays loadable."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from spotwise.checkpoint.local import LocalCheckpointStore
from spotwise.errors import CheckpointError


def _full_for_manifests(store: LocalCheckpointStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every manifest write fails with ENOSPC from now on; data files still fit."""
    write = store._write

    def write_or_full(key: str, data: bytes) -> None:
        if key.endswith(".json"):
            err = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            raise CheckpointError(f"cannot write checkpoint {store.root / key}: {err}")
        write(key, data)

    monkeypatch.setattr(store, "_write", write_or_full)


def test_a_save_whose_manifest_fails_leaves_no_data_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalCheckpointStore(tmp_path / "ck", keep=2)
    for step in (1, 2):
        store.put(f"ckpt-{step:08d}.pt", b"x" * 100 * step, {"step": step})
    _full_for_manifests(store, monkeypatch)

    with pytest.raises(CheckpointError, match="No space left on device"):
        store.put("ckpt-00000003.pt", b"y" * 300, {"step": 3})

    assert sorted(p.name for p in store.root.iterdir()) == [
        "LATEST", "ckpt-00000001.json", "ckpt-00000001.pt", "ckpt-00000002.json",
        "ckpt-00000002.pt",
    ]  # fmt: skip
    got = store.get_latest()
    assert got is not None
    data, manifest = got
    assert (manifest["step"], data) == (2, b"x" * 200)


def test_a_data_file_a_manifest_already_names_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # step 2 saved again with the same bytes: its data file is the one its manifest names;
    # the failed manifest rewrite must not take it away
    store = LocalCheckpointStore(tmp_path / "ck", keep=2)
    store.put("ckpt-00000002.pt", b"same", {"step": 2})
    _full_for_manifests(store, monkeypatch)

    with pytest.raises(CheckpointError):
        store.put("ckpt-00000002.pt", b"same", {"step": 2, "note": "again"})

    assert (store.root / "ckpt-00000002.pt").read_bytes() == b"same"
    got = store.get_latest()
    assert got is not None and got[0] == b"same" and got[1]["step"] == 2
