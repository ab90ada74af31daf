"""The trial channel's storage: the Blobs backends spotwise builds itself (S3 on moto, a
``file://`` folder), ``open_blobs`` dispatch, and the controller's ``TrialFiles`` over a folder."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spotwise.errors import ProviderError
from spotwise.planner.runstate import write_control
from spotwise.providers.base import NoticeKind
from spotwise.providers.blobs import Blobs
from spotwise.providers.blobs_open import open_blobs
from spotwise.providers.file_blobs import FileBlobs
from spotwise.providers.trialfiles import TrialFiles

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(params=["file", "s3"])
def blobs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Blobs]:
    if request.param == "file":
        yield FileBlobs.from_uri((tmp_path / "folder").as_uri())
    else:
        bucket = request.getfixturevalue("bucket")
        yield open_blobs(f"s3://{bucket}/runs/j/t")


# ---- the Blobs contract, on both backends --------------------------------------------------------
def test_put_get_and_the_version_token(blobs: Blobs) -> None:
    assert isinstance(blobs, Blobs)
    assert blobs.get("a.json") == (None, "")  # missing
    assert not blobs.exists("a.json") and blobs.names() == []
    blobs.put("a.json", b'{"x": 1}', "application/json")
    data, token = blobs.get("a.json")
    assert data == b'{"x": 1}' and token
    assert blobs.get("a.json", token) == (None, token)  # unchanged since that read
    blobs.put("a.json", b'{"x": 2}')
    data2, token2 = blobs.get("a.json", token)
    assert data2 == b'{"x": 2}' and token2 != token
    blobs.put("b", b"")
    assert blobs.exists("b") and blobs.get("b")[0] == b""
    assert blobs.names() == ["a.json", "b"]
    blobs.delete("a.json")
    blobs.delete("a.json")  # a missing one is not an error
    assert blobs.names() == ["b"] and blobs.get("a.json", token2) == (None, token2)
    assert blobs.location("b") == f"{blobs.uri}/b" and not blobs.uri.endswith("/")
    for bad in ("", "x/y", "..", "."):
        with pytest.raises(ValueError):
            blobs.put(bad, b"")


def test_a_file_folder_is_written_atomically_and_lists_no_temporaries(tmp_path: Path) -> None:
    blobs = FileBlobs(tmp_path / "f")
    blobs.put("events-0.jsonl", b"one\n")
    inode = (tmp_path / "f" / "events-0.jsonl").stat().st_ino
    _, token = blobs.get("events-0.jsonl")
    blobs.put("events-0.jsonl", b"one\n")  # same bytes, rewritten: a new version
    assert (tmp_path / "f" / "events-0.jsonl").stat().st_ino != inode
    assert blobs.get("events-0.jsonl", token)[0] == b"one\n"
    (tmp_path / "f" / ".tmp-events-0.jsonl.abc").write_bytes(b"half")  # a writer mid-put
    (tmp_path / "f" / "sub").mkdir()
    assert blobs.names() == ["events-0.jsonl"]
    assert sorted(os.listdir(tmp_path / "f")) == [
        ".tmp-events-0.jsonl.abc",
        "events-0.jsonl",
        "sub",
    ]


def test_file_uris_and_paths(tmp_path: Path) -> None:
    assert FileBlobs.from_uri(f"file://{tmp_path}/x").root == tmp_path / "x"
    assert FileBlobs.from_uri(f"file://localhost{tmp_path}/x/").root == tmp_path / "x"
    assert FileBlobs.from_uri(str(tmp_path / "y")).uri == (tmp_path / "y").as_uri()
    for bad in ("file://host/x", "file:relative", "relative/path"):
        with pytest.raises(ProviderError, match="absolute"):
            FileBlobs.from_uri(bad)


def test_open_blobs_dispatches_by_scheme(tmp_path: Path) -> None:
    from spotwise.providers.s3_blobs import S3Blobs

    s3 = open_blobs("s3://bucket-1/p/q/")
    assert isinstance(s3, S3Blobs) and s3.uri == "s3://bucket-1/p/q"
    assert open_blobs("s3:/bucket-1/p").uri == "s3://bucket-1/p"  # collapsed by pathlib
    assert isinstance(open_blobs(tmp_path.as_uri()), FileBlobs)
    assert isinstance(open_blobs(str(tmp_path)), FileBlobs)
    for bad in ("ftp://host/x", "checkpoints", "", "hdfs://nn/x"):
        with pytest.raises(ProviderError) as e:
            open_blobs(bad)
        assert repr(bad) in str(e.value) and "gs://bucket/prefix" in str(e.value)
        assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("uri", "module", "cls"),
    [
        ("gs://bucket-1/p", "spotwise.providers.gcs_blobs", "GcsBlobs"),
        ("az://account1/container1/p", "spotwise.providers.azure_blobs", "AzureBlobs"),
    ],
)
def test_open_blobs_opens_gcs_and_azure_lazily(uri: str, module: str, cls: str) -> None:
    mod = pytest.importorskip(module)
    blobs = open_blobs(uri)
    assert isinstance(blobs, getattr(mod, cls)) and blobs.uri == uri


def test_a_channel_folder_gives_up_in_seconds_not_minutes() -> None:
    """The channel is polled every few seconds; a call blocked in the SDK's default retries
    (GCS: 120 s; Azure: 10 retries, backing off) would keep an agent from watching for the
    notice, so channel folders retry briefly and leave the rest to the next poll."""
    pytest.importorskip("spotwise.providers.gcs_blobs")
    gcs, gcs_channel = open_blobs("gs://bucket-1/p"), open_blobs("gs://bucket-1/p", channel=True)
    assert (gcs._retry_s, gcs_channel._retry_s) == (None, 10.0)  # type: ignore[attr-defined]
    az = open_blobs("az://account1/container1/p")
    az_channel = open_blobs("az://account1/container1/p", channel=True)
    assert az._options == {} and az_channel._options == {"retry_total": 2}  # type: ignore[attr-defined]
    track = TrialFiles.at("i-1", "gs://bucket-1/p", "0")
    assert track.blobs._retry_s == 10.0  # type: ignore[attr-defined]


# ---- the controller's side over a folder ----------------------------------------------------
def _status(folder: Path, attempt: int, **doc: Any) -> None:
    FileBlobs(folder).put(f"agent-{attempt}.json", json.dumps(doc).encode())


def test_trial_files_read_events_notices_and_the_exit(tmp_path: Path) -> None:
    folder = tmp_path / "art"
    track = TrialFiles.at("vm-1", folder.as_uri(), "3")
    track.sync(0.0, 100.0)
    assert track.take_events() == [] and track.take_notices() == [] and track.exit_code is None
    FileBlobs(folder).put("events-3.jsonl", b'{"type": "report", "step": 1}\n')
    _status(folder, 3, state="running", notices=[])
    track.sync(0.0, 100.0, force=True)
    assert track.take_events() == [{"type": "report", "step": 1}]
    notice = {"kind": "interruption", "received_at": 50.0, "deadline": 80.0}
    FileBlobs(folder).put(
        "events-3.jsonl",
        b'{"type": "report", "step": 1}\n{"type": "stopping", "step": 2}\nnot json\n',
    )
    _status(folder, 3, state="exited", exit_code=0, notices=[notice])
    track.sync(0.0, 100.0, force=True)
    assert track.take_events() == [{"type": "stopping", "step": 2}]
    (n,) = track.take_notices()
    assert (n.instance_id, n.kind, n.received_at, n.deadline) == (
        "vm-1",
        NoticeKind.INTERRUPTION,
        50.0,
        80.0,
    )
    assert track.take_notices() == [] and track.interrupted() and track.exit_code == 0


def test_trial_files_relay_stop_and_control_and_are_rate_limited(tmp_path: Path) -> None:
    folder = tmp_path / "art"
    track = TrialFiles.at("vm-1", folder.as_uri(), "0")
    track.stop_file, track.control_file = tmp_path / "stop-0", tmp_path / "control-0.json"
    track.sync(60.0, 0.0)
    assert FileBlobs(folder).names() == []
    track.stop_file.touch()
    write_control(track.control_file, 4)
    track.sync(60.0, 0.0)  # within poll_s of the last read: nothing happens
    assert FileBlobs(folder).names() == []
    track.sync(60.0, 0.0, force=True)
    assert FileBlobs(folder).names() == ["control-0.json", "stop-0"]
    assert json.loads(FileBlobs(folder).get("control-0.json")[0] or b"") == {"checkpoint_every": 4}
    before = (folder / "control-0.json").stat().st_mtime_ns
    time.sleep(0.01)
    write_control(track.control_file, 4)  # same content: not uploaded again
    track.sync(0.0, 0.0, force=True)
    assert (folder / "control-0.json").stat().st_mtime_ns == before


def test_a_notice_signals_the_trial_before_any_upload(tmp_path: Path) -> None:
    """The trial's checkpoint races the provider's deadline (30 s on GCE and Azure): a slow or
    retried status upload must not come first."""
    from spotwise.providers.trial_agent import TrialAgent, TrialConfig

    order: list[str] = []

    class SlowBlobs(FileBlobs):
        def put(self, name: str, data: bytes, content_type: str = "") -> None:
            order.append(f"put {name}")
            super().put(name, data)

    notice = {"kind": "interruption", "received_at": 1.0, "deadline": 31.0}
    pending = [notice]
    cfg = TrialConfig("j", "t", 0, "l", ["python", "-c", "pass"], {}, state_dir=str(tmp_path))
    agent = TrialAgent(
        cfg,
        SlowBlobs(tmp_path / "folder"),
        lambda: [pending.pop()] if pending else [],
        on_notice=lambda n: order.append("on_notice"),
    )
    agent.signal_trial = lambda sig: order.append(f"signal {sig.name}")  # type: ignore[method-assign]
    agent.check_notices()
    assert order == ["signal SIGTERM", "on_notice", "put agent-0.json"]
    status = json.loads(FileBlobs(tmp_path / "folder").get("agent-0.json")[0] or b"")
    assert status["notices"] == [notice]
