"""The trial channel's storage: the Blobs backends spotwise builds itself (S3 on moto, a
``file://`` folder), ``open_blobs`` dispatch, and the controller's ``TrialFiles`` over a folder."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spotwise.errors import ProviderError
from spotwise.planner.runstate import write_control
from spotwise.providers.base import Instance, InstanceState, Market, NoticeKind, Offer
from spotwise.providers.blobs import Blobs
from spotwise.providers.blobs_open import open_blobs
from spotwise.providers.file_blobs import FileBlobs
from spotwise.providers.trialfiles import Tracks, TrialFiles

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


# ---- the controller's side: ordering, storage failures, malformed statuses ----------------------
OFFER = Offer("gcp", "us-central1", "us-central1-a", "n1-standard-4", Market.SPOT, 0.1, 0.2)
INTERRUPTION = {"kind": "interruption", "received_at": 50.0, "deadline": 80.0}


def _tracks(blobs: Blobs) -> tuple[Tracks, TrialFiles]:
    tracks = Tracks(poll_s=0.0, clock=lambda: 100.0)
    track = tracks.by_id["vm-1"] = TrialFiles("vm-1", blobs, "0")
    return tracks, track


def _observed(tracks: Tracks, state: InstanceState = InstanceState.RUNNING) -> int | None:
    inst = Instance("vm-1", OFFER, state)
    tracks.observe(inst)
    return inst.exit_code


@pytest.mark.parametrize("state", [InstanceState.RUNNING, InstanceState.TERMINATED])
def test_an_exit_read_with_a_notice_waits_until_the_notice_is_handed_out(
    tmp_path: Path, state: InstanceState
) -> None:
    """The notice and the exit in one status, read outside notices() (here: by progress):
    the orchestrator must get the notice before the exit, or it counts a preemption as a
    crash."""
    folder = tmp_path / "art"
    FileBlobs(folder).put("events-0.jsonl", b'{"type": "stopping", "step": 2}\n')
    _status(folder, 0, state="exited", exit_code=0, notices=[INTERRUPTION])
    tracks, track = _tracks(FileBlobs(folder))
    assert tracks.progress("vm-1") == [{"type": "stopping", "step": 2}]
    assert track.exit_code == 0  # read, but not handed out yet
    assert _observed(tracks, state) is None
    assert _observed(tracks, state) is None  # still: nobody took the notice
    (n,) = tracks.notices()
    assert (n.kind, n.deadline) == (NoticeKind.INTERRUPTION, 80.0)
    assert _observed(tracks, state) == 0


class FlakyGets(FileBlobs):
    """A folder whose reads of names starting with ``prefix`` fail the next ``fail`` times."""

    def __init__(self, root: Path, fail: int, prefix: str = "") -> None:
        super().__init__(root)
        self.fail, self.prefix = fail, prefix

    def get(self, name: str, token: str = "") -> tuple[bytes | None, str]:
        if self.fail and name.startswith(self.prefix):
            self.fail -= 1
            raise ProviderError(f"reading {name} failed: 503 Service Unavailable")
        return super().get(name, token)


def test_a_storage_failure_is_retried_at_the_next_poll_and_warned_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A storage outage on the controller's side must not end the job: notices(), progress()
    and describe() (observe) go on, and what the agent wrote arrives once reads work."""
    folder = tmp_path / "art"
    FileBlobs(folder).put("events-0.jsonl", b'{"type": "report", "step": 1}\n')
    _status(folder, 0, state="exited", exit_code=0, notices=[])
    blobs = FlakyGets(folder, fail=2)
    tracks, _ = _tracks(blobs)
    with caplog.at_level(logging.INFO, logger="spotwise.providers"):
        assert tracks.notices() == []  # first failure
        assert tracks.progress("vm-1") == []  # second failure
        failing = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(failing) == 1 and "503" in failing[0].getMessage()  # once, not every poll
        assert "vm-1" in failing[0].getMessage()
        assert tracks.progress("vm-1") == [{"type": "report", "step": 1}]
        assert _observed(tracks) == 0
        assert "can be read again" in caplog.text
        caplog.clear()
        blobs.fail = 1  # a new outage is warned about again
        assert tracks.progress("vm-1") == []
        assert [r.levelno for r in caplog.records] == [logging.WARNING]


def test_an_exit_is_not_taken_in_without_the_events_read_with_it(tmp_path: Path) -> None:
    """The status read, the events read failing: the exit must wait for the events (the
    agent uploaded them first), also on the last read of an instance that has ended."""
    folder = tmp_path / "art"
    FileBlobs(folder).put("events-0.jsonl", b'{"type": "report", "step": 5}\n')
    _status(folder, 0, state="exited", exit_code=0, notices=[])
    tracks, track = _tracks(FlakyGets(folder, fail=2, prefix="events-"))
    assert _observed(tracks) is None and track.exit_code is None
    assert _observed(tracks, InstanceState.TERMINATED) is None and not track.ended
    assert _observed(tracks, InstanceState.TERMINATED) == 0 and track.ended
    assert track.take_events() == [{"type": "report", "step": 5}]


def test_a_malformed_status_is_skipped_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "art"
    tracks, track = _tracks(FileBlobs(folder))
    bad_notices: list[object] = [
        1,
        "interruption",
        None,
        [INTERRUPTION],
        {"kind": "interruption", "received_at": "soon", "deadline": 80.0},
        {"kind": "interruption", "received_at": 50.0, "deadline": "later"},
        {"kind": "interruption", "received_at": 50.0, "deadline": [80.0]},
        {"kind": "interruption", "received_at": True, "deadline": 80.0},
        {"kind": "interruption", "received_at": 50.0, "deadline": float("nan")},
        {"kind": 7, "received_at": 50.0, "deadline": 80.0},
        {"kind": "evacuate", "received_at": 50.0, "deadline": 80.0},
    ]
    raw_docs = [b"[1, 2]", b'"exited"', b"not json", b"\xff\xfe\x00", b"{}"]
    docs: list[dict[str, Any]] = [
        {"state": "running", "notices": "soon"},
        {"state": "running", "notices": {"kind": "interruption"}},
        {"state": "running", "notices": bad_notices},
        *[
            {"state": "exited", "exit_code": code, "notices": bad_notices}
            for code in ("0", 1.5, True, [0], {"code": 0})
        ],
    ]
    with caplog.at_level(logging.WARNING, logger="spotwise.providers"):
        for raw in [*raw_docs, *[json.dumps(d).encode() for d in docs]]:
            FileBlobs(folder).put("agent-0.json", raw)
            track.status_token = ""  # read it whatever its version token
            assert _observed(tracks) is None
            assert tracks.notices() == [] and track.notices == []
    assert "malformed notice" in caplog.text and "is not an integer" in caplog.text
    # the good notices the agent appends later are read, the bad ones once skipped stay so
    good = {"kind": "rebalance", "received_at": 60.0, "deadline": None}
    _status(folder, 0, state="exited", exit_code=0, notices=[*bad_notices, good, INTERRUPTION])
    track.status_token = ""
    assert _observed(tracks) is None  # two notices not handed out yet
    assert [(n.kind, n.received_at, n.deadline) for n in tracks.notices()] == [
        (NoticeKind.REBALANCE, 60.0, float("inf")),
        (NoticeKind.INTERRUPTION, 50.0, 80.0),
    ]
    assert _observed(tracks) == 0
