"""A manifest whose ``file`` holds a NUL byte (or another control character) is skipped as
other bad names are, and later saves go on (review-at AT2): the OS refuses such a path with
ValueError, which came out of ``get_latest`` / ``put`` (the SDK's load and save) instead of
the fall back to the older checkpoint."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from spotwise.checkpoint import LocalCheckpointStore, checkpoint_name
from spotwise.checkpoint.blobstore import BlobCheckpointStore
from spotwise.checkpoint.layout import UnusableCheckpointError
from spotwise.providers.file_blobs import FileBlobs


def _bad_manifest(root: Path, step: int, file: str, data: bytes = b"two") -> None:
    digest = hashlib.sha256(data).hexdigest()
    manifest = {"step": step, "file": file, "sha256": digest, "size": len(data)}
    (root / f"ckpt-{step:08d}.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("bad", ["ckpt-2\x00.pt", "ckpt-2\n.pt", "ckpt-2\x7f.pt"])
@pytest.mark.parametrize("kind", ["local", "blobs"])
def test_the_load_falls_back_and_later_saves_go_on(tmp_path: Path, bad: str, kind: str) -> None:
    root = tmp_path / "trial"
    store = LocalCheckpointStore(root) if kind == "local" else BlobCheckpointStore(FileBlobs(root))
    store.put(checkpoint_name(1), b"one", {"step": 1})
    _bad_manifest(root, 2, bad)
    got = store.get_latest()
    assert got is not None
    data, manifest = got
    assert (data, manifest["step"]) == (b"one", 1)
    assert "manifest of step 2" in manifest["fallback_reason"]
    assert "names no valid file" in manifest["fallback_reason"]
    for step in (3, 4):  # retention drops step 2's manifest (its data key: the plain name)
        store.put(checkpoint_name(step), b"x%d" % step, {"step": step})
    names = sorted(p.name for p in root.iterdir() if not p.name.startswith("."))
    assert names == [
        "LATEST",
        "ckpt-00000003.json",
        "ckpt-00000003.pt",
        "ckpt-00000004.json",
        "ckpt-00000004.pt",
    ]


def test_saving_the_step_again_over_such_a_manifest_works(tmp_path: Path) -> None:
    store = LocalCheckpointStore(tmp_path)
    store.put(checkpoint_name(1), b"one", {"step": 1})
    _bad_manifest(tmp_path, 2, "ckpt-2\x00.pt")
    store.put(checkpoint_name(2), b"two again", {"step": 2})
    got = store.get_latest()
    assert got is not None and got[0] == b"two again" and got[1]["step"] == 2


def test_the_local_primitives_take_a_nul_name_as_no_file(tmp_path: Path) -> None:
    store = LocalCheckpointStore(tmp_path)
    with pytest.raises(UnusableCheckpointError, match="is not a file name"):
        store._read("a\x00b")
    store._remove("a\x00b")  # nothing by that name can exist: nothing to do
    store._move("a\x00b", "c")
    assert not (tmp_path / "c").exists()


def test_names_a_file() -> None:
    from spotwise.checkpoint.reading import names_a_file

    assert names_a_file("ckpt-00000002.pt") and names_a_file("model weights é.pt")
    for bad in ("a\x00b", "a\tb", "a\rb", "..", "a/b", "x.json", 5, None):
        assert not names_a_file(bad)
