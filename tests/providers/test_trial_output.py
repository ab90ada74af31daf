"""A cloud trial's output reaches the user: the agent keeps the trial's stdout and stderr, copies
them to its own log, uploads their last ``OUTPUT_TAIL_BYTES`` as ``output-<attempt>.log`` before
the status that says the trial exited, and the orchestrator puts them in the job's ``logs``
folder (``<instance id>.log``, as the local provider names its logs) and quotes the last line
in the trial's error. An end the agent cannot report powers the machine off at once."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotwise.errors import ProviderError
from spotwise.providers import channel, trial_agent
from spotwise.providers.file_blobs import FileBlobs
from spotwise.providers.trial_agent import FINAL_TRIES, TrialAgent, TrialConfig

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

MARKER = "RuntimeError: REVIEW-MARKER: the training script crashed here"
CRASHES = (
    "import sys\n"
    "print('step 1 done', flush=True)\n"
    "print('a warning on stderr', file=sys.stderr, flush=True)\n"
    "raise RuntimeError('REVIEW-MARKER: the training script crashed here')\n"
)


class Recording(FileBlobs):
    """A folder that records each put's name and fails every put of ``fail`` (-1: always)."""

    def __init__(self, root: Path, fail: tuple[str, ...] = ()) -> None:
        super().__init__(root)
        self.fail = fail
        self.puts: list[tuple[str, bytes]] = []

    def put(self, name: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        self.puts.append((name, data))
        if name in self.fail:
            raise ProviderError(f"put {name}: NoSuchBucket")
        super().put(name, data, content_type)


@pytest.fixture
def shutdowns(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], float]]:
    """What the agent asked ``subprocess.run`` to do (nothing is run), and how long it slept
    (never for real) right before: ``(argv, seconds slept longer than a minute)``."""
    calls: list[tuple[list[str], float]] = []
    long_sleeps: list[float] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        if seconds > 60:
            long_sleeps.append(seconds)
            return
        real_sleep(seconds)

    def record(argv: list[str], **kw: Any) -> None:
        calls.append((list(argv), sum(long_sleeps)))

    monkeypatch.setattr(trial_agent.time, "sleep", sleep)
    monkeypatch.setattr(trial_agent.subprocess, "run", record)
    return calls


def _config(tmp_path: Path, code: str, **kw: Any) -> TrialConfig:
    kw.setdefault("poll_s", 0.0)
    kw.setdefault("shutdown_after_s", 600.0)
    argv = [sys.executable, "-c", code]
    return TrialConfig("j", "t", 2, "l", argv, {}, state_dir=str(tmp_path / "instance"), **kw)


# ---- the agent ------------------------------------------------------------------------------
def test_the_trials_output_is_uploaded_before_its_exit_and_copied_to_the_agents_log(
    tmp_path: Path, shutdowns: list[Any], capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    blobs = Recording(tmp_path / "art")
    agent = TrialAgent(_config(tmp_path, CRASHES), blobs, lambda: [])
    assert agent.run() == 1
    out = (tmp_path / "art" / "output-2.log").read_bytes().decode()
    assert out.startswith("step 1 done\na warning on stderr\nTraceback (most recent call last):")
    assert out.endswith(MARKER + "\n")
    names = [n for n, _ in blobs.puts]
    exited = next(
        i for i, (n, d) in enumerate(blobs.puts) if n == "agent-2.json" and b'"exited"' in d
    )
    assert names.index("output-2.log") < exited  # whoever sees the exit can fetch the output
    assert out.encode() in capfdbinary.readouterr().out  # the agent's log has it too
    # the upload is the trial's own output, nothing the agent adds (no environment)
    assert "SPOTWISE_" not in out and "PATH" not in out
    assert shutdowns == [(["shutdown", "-h", "now"], 600.0)]  # reported: the usual wait


def test_only_the_tail_of_a_long_output_is_uploaded(
    tmp_path: Path, shutdowns: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trial_agent, "OUTPUT_TAIL_BYTES", 100)
    code = "for i in range(50): print(f'line {i:03d}')"
    blobs = Recording(tmp_path / "art")
    assert TrialAgent(_config(tmp_path, code), blobs, lambda: []).run() == 0
    first, *lines = (tmp_path / "art" / "output-2.log").read_text().splitlines()
    # 50 lines of 9 bytes: the last 100 bytes start inside line 038; from the next line on
    assert first == "[spotwise: the first 351 bytes of the output are left out]"
    assert lines == [f"line {i:03d}" for i in range(39, 50)]


@pytest.mark.parametrize("start", [True, False])
def test_an_end_that_cannot_be_reported_powers_the_machine_off_at_once(
    tmp_path: Path, shutdowns: list[Any], caplog: pytest.LogCaptureFixture, start: bool
) -> None:
    """The missing-bucket case: the trial crashed (or could not start) and no upload works.
    The controller learns nothing more by waiting shutdown_after_s (600 s on EC2): it takes
    an instance that ended without an exit code for a failed attempt, so power off now."""
    blobs = Recording(tmp_path / "art", fail=("output-2.log", "events-2.jsonl", "agent-2.json"))
    code = CRASHES if start else ""
    cfg = _config(tmp_path, code)
    if not start:
        cfg.argv = [str(tmp_path / "no-such-program")]
    with caplog.at_level(logging.WARNING, logger="spotwise.agent"):
        assert TrialAgent(cfg, blobs, lambda: []).run() == (1 if start else 127)
    ends = [n for n, d in blobs.puts if n == "agent-2.json" and b'"exited"' in d]
    assert len(ends) == FINAL_TRIES  # retried first, as before
    assert shutdowns == [(["shutdown", "-h", "now"], 0.0)]
    assert "the trial's end could not be reported: shutting down now" in caplog.text


def test_a_trial_that_printed_nothing_uploads_no_output(
    tmp_path: Path, shutdowns: list[Any]
) -> None:
    blobs = Recording(tmp_path / "art")
    assert TrialAgent(_config(tmp_path, "pass"), blobs, lambda: []).run() == 0
    assert [n for n, _ in blobs.puts] == ["agent-2.json", "agent-2.json"]


# ---- the controller's side -------------------------------------------------------------------
def test_read_output_reads_the_folder_the_provisioner_gave_the_agent(tmp_path: Path) -> None:
    ckpt = f"file://{tmp_path}/ckpt/j-1/t-1"
    FileBlobs(tmp_path / "ckpt" / "j-1" / "t-1").put("output-3.log", b"hello\n")
    where, data = channel.read_output("gcp", {}, ckpt, "j-1", "t-1", 3)
    assert (where, data) == (f"{ckpt}/output-3.log", b"hello\n")
    art = f"file://{tmp_path}/art"
    FileBlobs(tmp_path / "art" / "j-1" / "t-1").put("output-3.log", b"moved\n")
    assert channel.read_output("gcp", {"artifacts": art}, ckpt, "j-1", "t-1", 3) == (
        f"{art}/j-1/t-1/output-3.log",
        b"moved\n",
    )
    assert channel.read_output("gcp", {}, ckpt, "j-1", "t-1", 4)[1] is None


def test_read_output_of_a_missing_bucket_names_it(aws_env: str) -> None:
    with pytest.raises(ProviderError, match="NoSuchBucket") as info:
        channel.read_output("aws", {}, "s3://no-such-bucket/ckpt", "j", "t", 0, "us-east-1")
    # the folder is the trial's checkpoint location (no providers[].options.artifacts)
    assert "reading output-0.log from s3://no-such-bucket/ckpt failed" in str(info.value)
    assert info.value.hint == "create it: aws s3 mb s3://no-such-bucket"


# ---- the whole path on moto, with the instance emulator -----------------------------------
@pytest.mark.timeout(180)
def test_a_failed_aws_trial_names_its_last_output_line_and_its_log_is_local(
    aws_env: str,
    bucket: str,
    spot_prices: Any,
    pricing_api: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ec2_emulator import InstanceEmulator

    from spotwise import jobs
    from spotwise.store import Store

    script = tmp_path / "fail.py"
    script.write_text("from spotwise import sdk\nsdk.report(1, 0.5)\n" + CRASHES)
    spec = {
        "name": "fails",
        "command": ["python", str(script)],
        "metric": {"name": "mse", "direction": "minimize"},
        "steps": 5,
        "trials": 1,
        "parallel": 1,
        "search_space": {"lr": {"type": "real", "low": 0.01, "high": 0.1, "log": True}},
        "search": {"optimizer": "random", "seed": 0},
        "policy": "spot-greedy",
        "checkpoint": {"location": f"s3://{bucket}/ckpt", "every": 5},
        "providers": [
            {
                "name": "aws",
                "regions": ["us-east-1"],
                "instance_types": ["c5.xlarge"],
                "options": {"image": "ami-12c6146b", "poll_s": "0.2", "agent_poll_s": "0.2"},
            }
        ],
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path / "home"))
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    with InstanceEmulator(aws_env, tmp_path / "instances", agent_poll_s=0.2) as emu:
        summary = jobs.tune(path, db=db, run_root=tmp_path / "runs")
        assert not emu.errors, emu.errors
    assert summary["state"] == "failed", summary
    logs = (tmp_path / "runs" / summary["job_id"] / "logs").resolve()
    machines = sorted(emu.machines)
    assert len(machines) == 2  # MAX_FAILURES attempts
    for iid in machines:
        text = (logs / f"{iid}.log").read_text()
        assert text.startswith("step 1 done\na warning on stderr\nTraceback")
        assert text.endswith(MARKER + "\n")
        assert MARKER in emu.log_of(iid)  # the agent's own log still has the output
    assert summary["error"] == (
        "every trial failed (1); the last error: the trial exited with code 1 at step 1 of 5; "
        f"its last output line: {MARKER}; see the trial logs in {logs}"
    )
    with Store.open_existing(db) as store:
        errors = store.events(summary["job_id"], kind="error")
    assert [e.detail["last_output"] for e in errors] == [MARKER, MARKER]
    assert sorted(Path(e.detail["log"]).name for e in errors) == [f"{i}.log" for i in machines]


# ---- the controller's warning when the trial files cannot be read ----------------------------
def test_a_folder_that_cannot_be_read_is_warned_about_once_then_once_a_minute(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """143 lines in 18 s before (each poll inside poll_s "recovered", the next read warned
    again): now one line, a reminder with a count at most once a minute, and a line when it
    recovers."""
    from spotwise.providers.trialfiles import Tracks, TrialFiles

    class Gone(FileBlobs):
        down = True

        def get(self, name: str, token: str = "") -> tuple[bytes | None, str]:
            if self.down:
                raise ProviderError(f"reading {name} failed: NoSuchBucket")
            return super().get(name, token)

    blobs = Gone(tmp_path / "art")
    tracks = Tracks(poll_s=3600.0)
    track = tracks.by_id["i-1"] = TrialFiles("i-1", blobs, "0")

    def poll() -> None:  # a poll that reads, then polls inside poll_s (nothing is read)
        track.last_sync = -1e18
        tracks.progress("i-1")
        tracks.notices()
        tracks.progress("i-1")

    def warned() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]

    with caplog.at_level(logging.INFO, logger="spotwise.providers"):
        for _ in range(5):
            poll()
        assert warned() == [
            "cannot read the trial files of i-1 (trying again at each poll): "
            "reading agent-0.json failed: NoSuchBucket"
        ]
        monkeypatch.setattr(Tracks, "WARN_EVERY_S", 0.0, raising=False)  # a minute later
        poll()
        assert warned()[1:] == [
            "still cannot read the trial files of i-1 (6 failed reads): "
            "reading agent-0.json failed: NoSuchBucket"
        ]
        blobs.down = False
        poll()
        poll()
        assert warned()[2:] == ["the trial files of i-1 can be read again (after 6 failed reads)"]
