from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from spotwise.checkpoint import registry
from spotwise.checkpoint.base import CheckpointStore
from spotwise.checkpoint.local import LocalCheckpointStore
from spotwise.checkpoint.registry import open_checkpoint_store, register_scheme
from spotwise.errors import SpecError


def test_plain_path_opens_local(tmp_path: Path) -> None:
    store = open_checkpoint_store(str(tmp_path / "trial"))
    assert isinstance(store, LocalCheckpointStore)
    assert store.root == tmp_path / "trial"


def test_relative_path_is_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_checkpoint_store("checkpoints/t1")
    assert isinstance(store, LocalCheckpointStore) and store.root == tmp_path / "checkpoints/t1"


def test_file_uri_opens_local(tmp_path: Path) -> None:
    store = open_checkpoint_store((tmp_path / "a b").as_uri())
    assert isinstance(store, LocalCheckpointStore) and store.root == tmp_path / "a b"
    store = open_checkpoint_store(f"file://localhost{tmp_path}")
    assert isinstance(store, LocalCheckpointStore) and store.root == tmp_path


def test_unknown_scheme_lists_valid_ones() -> None:
    with pytest.raises(SpecError) as err:
        open_checkpoint_store("ftp://host/ckpt")
    msg = str(err.value)
    assert "unknown scheme 'ftp://'" in msg and "file://" in msg and "folder path" in msg


def test_unknown_scheme_did_you_mean() -> None:
    with pytest.raises(SpecError, match="did you mean 'file'"):
        open_checkpoint_store("fille:///tmp/x")


def test_empty_location() -> None:
    with pytest.raises(SpecError, match="non-empty"):
        open_checkpoint_store("  ")


def test_register_scheme(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(registry, "_SCHEMES", dict(registry._SCHEMES))
    opened: list[str] = []

    def fake(uri: str) -> CheckpointStore:
        opened.append(uri)
        return LocalCheckpointStore(tmp_path / "fake")

    register_scheme("mem", fake)
    assert "mem" in registry.registered_schemes()
    store = open_checkpoint_store("MEM://bucket/prefix")
    assert opened == ["MEM://bucket/prefix"] and isinstance(store, LocalCheckpointStore)


@pytest.mark.parametrize("bad", ["S3", "s3://", "", "3s"])
def test_register_scheme_validates_name(bad: str) -> None:
    with pytest.raises(ValueError, match="scheme must be"):
        register_scheme(bad, lambda uri: LocalCheckpointStore(Path(uri)))


def test_cloud_backends_are_imported_lazily() -> None:
    code = (
        "import sys; from spotwise.checkpoint import registry; "
        "print('s3' in registry.registered_schemes(), "
        "[m for m in ('spotwise.checkpoint.s3', 'boto3') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True []"
