"""The trial-side agents against a local metadata server (loopback only): GCE ``preempted`` and
Azure Scheduled Events ``Preempt`` both reach the trial as SIGTERM and the controller as a
notice record."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest
from localhttp import LocalServer as Server

from spotwise.providers import azure_agent, gcp_agent

TRIAL = """
import pathlib, signal, sys, time
done, ready = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
def on_term(*_):
    done.write_text("sigterm")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
ready.write_text("ready")
time.sleep(30)
sys.exit(3)
"""


@pytest.fixture
def trial(tmp_path: Path) -> Iterator[tuple[dict[str, Any], Path, Path]]:
    done, ready, events = tmp_path / "done", tmp_path / "ready", tmp_path / "events.jsonl"
    spec = {
        "argv": [sys.executable, "-c", TRIAL, str(done), str(ready)],
        "env": {"SPOTWISE_EVENTS_FILE": str(events), "SPOTWISE_TRIAL_ID": "t1"},
        "workdir": str(tmp_path),
    }
    yield spec, ready, done


def test_gce_agent_reads_metadata_and_forwards_preemption(
    trial: tuple[dict[str, Any], Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, ready, done = trial

    def handle(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, str]:
        if headers.get("Metadata-Flavor") != "Google":
            return 403, "missing Metadata-Flavor"
        if path == "/computeMetadata/v1/instance/attributes/spotwise-launch":
            return 200, json.dumps(spec)
        if path == "/computeMetadata/v1/instance/preempted":
            return 200, "TRUE" if ready.exists() else "FALSE"
        if (
            path == "/computeMetadata/v1/instance/guest-attributes/spotwise/notice"
            and method == "PUT"
        ):
            return 200, ""
        return 404, "not found"

    with Server(handle) as server:
        monkeypatch.setenv("SPOTWISE_GCE_METADATA_URL", server.url)
        code = gcp_agent.main(["--from-metadata", "--poll", "0.05"])
    assert code == 0 and done.read_text() == "sigterm"
    (put,) = [r for r in server.requests if r[0] == "PUT"]
    notice = json.loads(put[3])
    assert notice["type"] == "notice" and notice["deadline"] - notice["received_at"] == 30.0
    events = [
        json.loads(line)
        for line in Path(spec["env"]["SPOTWISE_EVENTS_FILE"]).read_text().splitlines()
    ]
    assert events[-1]["type"] == "notice"


def test_azure_agent_forwards_a_scheduled_preempt(
    trial: tuple[dict[str, Any], Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, ready, done = trial
    launch = tmp_path / "launch.json"
    launch.write_text(json.dumps(spec))
    not_before = formatdate(2_000_000_000, usegmt=True)

    def handle(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, str]:
        if headers.get("Metadata") != "true" or not path.startswith(
            "/metadata/scheduledevents?api-version="
        ):
            return 400, "bad request"
        events = []
        if ready.exists():
            events = [
                {
                    "EventId": "A123",
                    "EventStatus": "Scheduled",
                    "EventType": "Freeze",
                    "ResourceType": "VirtualMachine",
                    "Resources": ["vm"],
                    "NotBefore": not_before,
                    "Description": "",
                    "EventSource": "Platform",
                    "DurationInSeconds": 5,
                },
                {
                    "EventId": "B456",
                    "EventStatus": "Scheduled",
                    "EventType": "Preempt",
                    "ResourceType": "VirtualMachine",
                    "Resources": ["vm"],
                    "NotBefore": not_before,
                    "Description": "",
                    "EventSource": "Platform",
                    "DurationInSeconds": -1,
                },
            ]
        return 200, json.dumps({"DocumentIncarnation": 1 + len(events), "Events": events})

    with Server(handle) as server:
        monkeypatch.setenv("SPOTWISE_AZURE_IMDS_URL", server.url)
        code = azure_agent.main(["--launch", str(launch), "--poll", "0.05"])
    assert code == 0 and done.read_text() == "sigterm"
    (rec,) = [
        json.loads(x) for x in Path(spec["env"]["SPOTWISE_EVENTS_FILE"]).read_text().splitlines()
    ]
    assert rec["type"] == "notice" and rec["deadline"] == 2_000_000_000.0


def test_a_trial_that_finishes_keeps_its_exit_code(tmp_path: Path) -> None:
    code = gcp_agent.run_trial(
        [sys.executable, "-c", "raise SystemExit(7)"],
        {},
        watch=lambda: None,
        on_notice=lambda a, b: None,
        poll_s=0.05,
    )
    assert code == 7


def test_launch_spec_is_validated() -> None:
    assert gcp_agent.parse_launch('{"argv": ["a", "b"], "env": {"X": "1"}}')["argv"] == ["a", "b"]
    for bad in ('{"argv": "rm -rf /"}', '{"argv": []}', '{"argv": ["a"], "env": {"X": 1}}'):
        with pytest.raises(ValueError):
            gcp_agent.parse_launch(bad)


def test_no_metadata_server_means_no_notice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOTWISE_GCE_METADATA_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("SPOTWISE_AZURE_IMDS_URL", "http://127.0.0.1:9")
    assert gcp_agent.preempted() is None
    assert azure_agent.watch() is None


# ---- with an artifacts folder: the trial channel ------------------------------------------------
CHANNEL_TRIAL = """
import json, os, signal, sys, time
events, stop = os.environ["SPOTWISE_EVENTS_FILE"], os.environ["SPOTWISE_STOP_FILE"]
control = os.environ["SPOTWISE_CONTROL_FILE"]
why = []
signal.signal(signal.SIGTERM, lambda *a: why.append("signal"))
def emit(**rec):
    with open(events, "a") as fh:
        fh.write(json.dumps(rec) + "\\n")
for step in range(1, 600):
    emit(type="report", step=step, metric=step / 10)
    if step == 1 and os.path.exists(control):
        emit(type="control", step=step, body=open(control).read(), path=control)
    if os.path.exists(stop):
        why.append("stop_file")
    if why:
        emit(type="stopping", reason=why[0], step=step)
        sys.exit(0)
    time.sleep(0.05)
sys.exit(3)
"""


def _channel_spec(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "argv": [sys.executable, "-c", CHANNEL_TRIAL],
        # the controller's own paths must not reach the trial: the agent sets the instance's
        "env": {"SPOTWISE_EVENTS_FILE": "/controller/events-0.jsonl", "SPOTWISE_TRIAL_ID": "t1"},
        "workdir": str(tmp_path),
        "artifacts": (tmp_path / "art" / "j1" / "t1").as_uri(),
        "attempt": 0,
        "job_id": "j1",
        "trial_id": "t1",
        "launch_id": "l1",
        "poll_s": 0.05,
        "sync_s": 0.1,
        "shutdown_after_s": -1,
        **extra,
    }


def _read_back(tmp_path: Path) -> Any:
    from spotwise.providers.trialfiles import TrialFiles

    track = TrialFiles.at("vm", (tmp_path / "art" / "j1" / "t1").as_uri(), "0")
    track.sync(0.0, 0.0, force=True)
    return track


def test_gce_agent_with_artifacts_reports_through_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notice, the events and the exit code reach the folder the controller reads; the
    guest attribute is written too."""
    spec = _channel_spec(tmp_path)
    uploaded = tmp_path / "art" / "j1" / "t1" / "events-0.jsonl"

    def handle(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, str]:
        if path == "/computeMetadata/v1/instance/attributes/spotwise-launch":
            return 200, json.dumps(spec)
        if path == "/computeMetadata/v1/instance/preempted":
            return 200, "TRUE" if uploaded.exists() else "FALSE"  # once events have travelled
        return (200, "") if method == "PUT" else (404, "not found")

    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the agent's state folder
    with Server(handle) as server:
        monkeypatch.setenv("SPOTWISE_GCE_METADATA_URL", server.url)
        code = gcp_agent.main(["--from-metadata", "--poll", "0.05"])
    assert code == 0
    track = _read_back(tmp_path)
    assert track.exit_code == 0
    (notice,) = track.take_notices()
    assert notice.kind.value == "interruption" and notice.deadline - notice.received_at == 30.0
    events = track.take_events()
    assert events[0] == {"type": "report", "step": 1, "metric": 0.1}
    assert events[-1]["type"] == "stopping" and events[-1]["reason"] == "signal"
    assert [r for r in server.requests if r[0] == "PUT" and r[1].endswith("/spotwise/notice")]
    on_instance = tmp_path / "home" / ".spotwise-agent" / "j1" / "t1" / "events-0.jsonl"
    assert on_instance.exists() and not Path("/controller/events-0.jsonl").exists()


def test_azure_agent_with_artifacts_relays_the_stop_marker_and_the_control_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spotwise.providers.file_blobs import FileBlobs

    folder = FileBlobs(tmp_path / "art" / "j1" / "t1")
    folder.put("control-0.json", b'{"checkpoint_every": 9}')
    launch = tmp_path / "launch.json"
    launch.write_text(json.dumps(_channel_spec(tmp_path)))

    def handle(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, str]:
        events = folder.exists("events-0.jsonl")
        if events and not folder.exists("stop-0"):
            folder.put("stop-0", b"")  # what the controller does to stop the trial
        return 200, json.dumps({"DocumentIncarnation": 1, "Events": []})

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with Server(handle) as server:
        monkeypatch.setenv("SPOTWISE_AZURE_IMDS_URL", server.url)
        code = azure_agent.main(["--launch", str(launch), "--poll", "0.05"])
    assert code == 0
    track = _read_back(tmp_path)
    assert track.exit_code == 0 and track.take_notices() == []
    events = track.take_events()
    (control,) = [e for e in events if e["type"] == "control"]
    assert control["body"] == '{"checkpoint_every": 9}'
    assert control["path"] == str(tmp_path / "home" / ".spotwise-agent/j1/t1/control-0.json")
    assert events[-1]["type"] == "stopping" and events[-1]["reason"] == "stop_file"


def test_a_launch_spec_with_a_channel_is_validated() -> None:
    spec = gcp_agent.parse_launch(
        json.dumps({"argv": ["a"], "artifacts": "gs://b/p", "attempt": 2, "poll_s": 1})
    )
    assert (spec["artifacts"], spec["attempt"], spec["poll_s"], spec["job_id"]) == (
        "gs://b/p",
        2,
        1.0,
        "",
    )
    for bad in ({"artifacts": 3}, {"attempt": -1}, {"attempt": "2"}, {"poll_s": "fast"}):
        with pytest.raises(ValueError):
            gcp_agent.parse_launch(json.dumps({"argv": ["a"], **bad}))
