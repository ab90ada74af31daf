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


FILE_FIX = "use a folder path (relative to the spec, e.g. checkpoints) or file:///abs/path"


@pytest.mark.parametrize("uri", ["file://", "file://ckpts", "file://rel/dir", "file://host/abs"])
def test_check_location_refuses_a_file_uri_without_an_absolute_folder(uri: str) -> None:
    with pytest.raises(SpecError) as err:
        registry.check_location(uri)
    assert err.value.message == (
        f"checkpoint location: {uri!r} is not a file URI of an absolute folder; {FILE_FIX}"
    )


@pytest.mark.parametrize("uri", ["file:///abs/ckpt", "file://localhost/abs/ckpt", "ckpts"])
def test_check_location_accepts_absolute_file_uris_and_folders(uri: str) -> None:
    registry.check_location(uri)


@pytest.mark.parametrize(
    ("uri", "bucket"), [("s3://Bad_Bucket/p", "Bad_Bucket"), ("s3://ab/p", "ab")]
)
def test_check_location_names_a_bad_s3_bucket_and_the_rule(uri: str, bucket: str) -> None:
    with pytest.raises(SpecError) as err:
        registry.check_location(uri)
    assert err.value.message == (
        f"checkpoint location: aws: {uri!r} has an invalid S3 bucket name {bucket!r}: use 3-63 "
        "lowercase letters, digits, '.' or '-', starting and ending with a letter or digit"
    )
    assert (
        err.value.hint == "use s3://BUCKET or s3://BUCKET/PREFIX, e.g. s3://my-bucket/checkpoints"
    )
    with pytest.raises(SpecError, match=r"'s3:///p' names no bucket"):
        registry.check_location("s3:///p")
    registry.check_location("s3://my-bucket.example/p")


def test_a_spec_with_file_scheme_only_is_one_error_line(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: x\ncommand: [python, train.py]\nmetric: {name: m, direction: maximize}\n"
        "steps: 4\ntrials: 1\nsearch_space:\n  lr: {type: real, low: 0.01, high: 0.1}\n"
        "providers:\n  - name: local\n"
        'checkpoint: {location: "file://"}\n'
    )
    out = subprocess.run(
        [sys.executable, "-m", "spotwise.cli.app", "tune", str(spec)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        f"error: {spec}: spec field 'checkpoint.location': checkpoint location: 'file://' is not "
        f"a file URI of an absolute folder; {FILE_FIX}"
    ]
    assert not (tmp_path / "file:").exists()
