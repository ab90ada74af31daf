"""Files in a checkpoint or channel folder get the mode a plain ``open()`` would give them.

``tempfile.mkstemp`` creates ``0o600`` files; renamed over a checkpoint they stayed unreadable
by every other user of a shared (NFS) folder whatever the umask.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotwise.checkpoint import LocalCheckpointStore, checkpoint_name
from spotwise.providers.file_blobs import FileBlobs, create_temp


@pytest.fixture(params=[0o022, 0o002, 0o077])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _plain_open_mode(folder: Path) -> int:
    probe = folder / "probe"
    probe.write_bytes(b"")
    mode = _mode(probe)
    probe.unlink()
    return mode


def test_checkpoint_files_get_the_mode_of_a_plain_open(tmp_path: Path, umask: int) -> None:
    store = LocalCheckpointStore(tmp_path / "trial")
    store.put(checkpoint_name(5), b"five", {"step": 5})
    expected = 0o666 & ~umask
    assert _plain_open_mode(tmp_path / "trial") == expected
    names = sorted(os.listdir(tmp_path / "trial"))
    assert names == ["LATEST", "ckpt-00000005.json", "ckpt-00000005.pt"]
    assert {n: _mode(tmp_path / "trial" / n) for n in names} == dict.fromkeys(names, expected)


def test_channel_files_get_the_mode_of_a_plain_open(tmp_path: Path, umask: int) -> None:
    blobs = FileBlobs(tmp_path / "artifacts")
    blobs.put("events-0.jsonl", b'{"type": "done"}\n')
    blobs.put("events-0.jsonl", b'{"type": "done", "step": 1}\n')  # replaced: same mode
    assert _mode(tmp_path / "artifacts" / "events-0.jsonl") == 0o666 & ~umask
    assert os.listdir(tmp_path / "artifacts") == ["events-0.jsonl"]  # no temporary left


def test_create_temp_is_exclusive_and_unique(tmp_path: Path) -> None:
    fds_paths = [create_temp(tmp_path, ".tmp-x.") for _ in range(20)]
    try:
        assert len({p for _, p in fds_paths}) == 20
        assert all(
            Path(p).parent == tmp_path and Path(p).name.startswith(".tmp-x.") for _, p in fds_paths
        )
        assert all(not os.get_inheritable(fd) for fd, _ in fds_paths)
    finally:
        for fd, _ in fds_paths:
            os.close(fd)
