"""The trial SDK against its environment-variable contract."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spotwise import sdk
from spotwise.checkpoint import LocalCheckpointStore, checkpoint_name
from spotwise.errors import CheckpointError, ConfigError

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def fresh_sdk(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """A fresh SDK state, no SPOTWISE_* variables, the previous SIGTERM handler restored."""
    for name in list(os.environ):
        if name.startswith("SPOTWISE_"):
            monkeypatch.delenv(name)
    monkeypatch.setattr(sdk, "_runtime", sdk._Runtime())
    monkeypatch.chdir(tmp_path)
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def trial_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Path]:
    paths = {
        "ckpt": tmp_path / "ckpt" / "trial-3",
        "events": tmp_path / "events.jsonl",
        "stop": tmp_path / "STOP",
    }
    env = {
        "SPOTWISE_JOB_ID": "job-1",
        "SPOTWISE_TRIAL_ID": "trial-3",
        "SPOTWISE_ATTEMPT": "2",
        "SPOTWISE_PARAMS": json.dumps({"lr": 0.01, "hidden": 32, "act": "relu"}),
        "SPOTWISE_STEPS": "12",
        "SPOTWISE_CHECKPOINT_URI": str(paths["ckpt"]),
        "SPOTWISE_CHECKPOINT_EVERY": "4",
        "SPOTWISE_EVENTS_FILE": str(paths["events"]),
        "SPOTWISE_STOP_FILE": str(paths["stop"]),
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return paths


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_env_contract_round_trip(trial_env: dict[str, Path]) -> None:
    assert sdk.params() == {"lr": 0.01, "hidden": 32, "act": "relu"}
    assert sdk.steps() == 12 and sdk.attempt() == 2 and sdk.checkpoint_every() == 4
    assert sdk.job_id() == "job-1" and sdk.trial_id() == "trial-3"

    sdk.report(1, 0.25)
    sdk.report(2, float("nan"))
    sdk.report(3, torch.tensor(0.5))
    gen = torch.Generator().manual_seed(7)
    state = {
        "step": 4,
        "model": torch.nn.Linear(3, 2).state_dict(),
        "rng": torch.get_rng_state(),
        "order": gen.get_state(),
        "history": [0.25, None, (1, "a")],
        "lr": 0.01,
    }
    assert not sdk.checkpoint_due(3) and sdk.checkpoint_due(4)
    uri = sdk.save_checkpoint(state, 4)
    assert uri == str(trial_env["ckpt"] / "ckpt-00000004.pt") and Path(uri).is_file()
    loaded = sdk.load_checkpoint()
    assert loaded is not None
    assert loaded["step"] == 4 and loaded["history"] == [0.25, None, (1, "a")]
    assert torch.equal(loaded["rng"], state["rng"]) and torch.equal(loaded["order"], state["order"])
    for k, v in state["model"].items():
        assert torch.equal(loaded["model"][k], v)
    sdk.done(12)

    events = _events(trial_env["events"])
    assert [e["type"] for e in events] == ["report", "report", "report", "checkpoint", "done"]
    assert events[0] == {"type": "report", "step": 1, "metric": 0.25, "time": events[0]["time"]}
    assert events[1]["metric"] is None and events[1]["invalid"] is True
    assert events[2]["metric"] == 0.5 and "invalid" not in events[2]
    assert events[3]["step"] == 4 and events[3]["uri"] == uri
    assert events[4]["step"] == 12
    assert all(isinstance(e["time"], float) and e["time"] <= time.time() for e in events)
    manifest = LocalCheckpointStore(trial_env["ckpt"]).latest_manifest()
    assert manifest is not None
    assert (manifest["attempt"], manifest["trial_id"], manifest["job_id"]) == (
        2,
        "trial-3",
        "job-1",
    )


def test_infinite_metric_is_reported_invalid(trial_env: dict[str, Path]) -> None:
    sdk.report(1, float("-inf"))
    (event,) = _events(trial_env["events"])
    assert event["metric"] is None and event["invalid"] is True


def test_standalone_without_env(tmp_path: Path) -> None:
    assert sdk.params() == {}
    assert sdk.steps() == 10 and sdk.steps(default=40) == 40 and sdk.attempt() == 0
    sdk.report(1, 0.5)  # no events file: a no-op
    sdk.done(1)
    assert not sdk.should_stop()
    uri = sdk.save_checkpoint({"step": 1, "w": torch.ones(2)}, 1)
    assert Path(uri) == tmp_path / "spotwise-checkpoints" / "ckpt-00000001.pt"
    loaded = sdk.load_checkpoint()
    assert loaded is not None and loaded["step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spotwise-checkpoints"]


def test_no_checkpoint_yet(trial_env: dict[str, Path]) -> None:
    assert sdk.load_checkpoint() is None


def test_sigterm_sets_should_stop(trial_env: dict[str, Path]) -> None:
    sdk.report(3, 0.5)
    assert sdk.should_stop() is False  # installs the handler
    assert signal.getsignal(signal.SIGTERM) is sdk._on_sigterm
    os.kill(os.getpid(), signal.SIGTERM)
    deadline = time.monotonic() + 5
    while not sdk.should_stop() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sdk.should_stop() and sdk.should_stop()
    assert sdk.checkpoint_due(5)  # a stop makes any step a checkpoint step
    stopping = [e for e in _events(trial_env["events"]) if e["type"] == "stopping"]
    assert len(stopping) == 1  # written once, however often should_stop() is asked
    assert stopping[0]["reason"] == "signal" and stopping[0]["step"] == 3


def test_stop_file_sets_should_stop(trial_env: dict[str, Path]) -> None:
    sdk.save_checkpoint({"step": 8}, 8)
    assert not sdk.should_stop()
    trial_env["stop"].write_text("")
    assert sdk.should_stop()
    stopping = [e for e in _events(trial_env["events"]) if e["type"] == "stopping"]
    assert stopping == [
        {"type": "stopping", "reason": "stop_file", "step": 8, "time": stopping[0]["time"]}
    ]


class Boom:
    """Unpickling this would create the marker file (pickle calls ``_mark(path)``)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_mark, (self.path,))


def _mark(path: str) -> None:
    Path(path).write_text("executed")


def test_load_refuses_arbitrary_objects(trial_env: dict[str, Path], tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    buf = io.BytesIO()
    torch.save({"step": 1, "payload": Boom(str(marker))}, buf)  # plain torch.save, no SDK check
    LocalCheckpointStore(trial_env["ckpt"]).put(checkpoint_name(1), buf.getvalue(), {"step": 1})
    with pytest.raises(CheckpointError, match=r"ckpt-00000001\.pt holds objects .*refuses") as e:
        sdk.load_checkpoint()
    assert not marker.exists()
    assert "\n" not in str(e.value)
    assert "weights_only` set to `False`" not in str(e.value)  # never torch's unsafe advice
    assert str(e.value).endswith("is usable either") and e.value.__context__ is None


def test_save_refuses_what_load_would_refuse(trial_env: dict[str, Path]) -> None:
    np = pytest.importorskip("numpy")
    with pytest.raises(TypeError, match=r"state\['rng'\]\[1\] is a numpy.ndarray.*from_numpy"):
        sdk.save_checkpoint({"rng": ("MT19937", np.zeros(3))}, 1)
    with pytest.raises(TypeError, match=r"state\[.obj.\] is a \S*Boom"):
        sdk.save_checkpoint({"obj": Boom("x")}, 1)
    with pytest.raises(TypeError, match="state must be a dict"):
        sdk.save_checkpoint([1, 2], 1)  # type: ignore[arg-type]
    assert not trial_env["ckpt"].exists()


def test_load_falls_back_from_a_corrupt_newest(trial_env: dict[str, Path]) -> None:
    sdk.save_checkpoint({"step": 4, "w": torch.zeros(100)}, 4)
    sdk.save_checkpoint({"step": 8, "w": torch.ones(100)}, 8)
    newest = trial_env["ckpt"] / "ckpt-00000008.pt"
    data = bytearray(newest.read_bytes())
    data[-40] ^= 0xFF
    newest.write_bytes(bytes(data))
    loaded = sdk.load_checkpoint()
    assert loaded is not None and loaded["step"] == 4


@pytest.mark.parametrize(
    ("name", "value", "error"),
    [
        ("SPOTWISE_STEPS", "abc", "SPOTWISE_STEPS must be an integer"),
        ("SPOTWISE_STEPS", "0", "SPOTWISE_STEPS must be >= 1"),
        ("SPOTWISE_ATTEMPT", "-1", "SPOTWISE_ATTEMPT must be >= 0"),
        ("SPOTWISE_PARAMS", "[1, 2]", "must be a JSON object"),
        ("SPOTWISE_PARAMS", "{lr: 1}", "not valid JSON"),
        ("SPOTWISE_CHECKPOINT_EVERY", "0", "SPOTWISE_CHECKPOINT_EVERY must be >= 1"),
    ],
)
def test_bad_env_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, error: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=error):
        sdk.params()
        sdk.steps()
        sdk.attempt()
        sdk.checkpoint_every()


def test_report_validates_types(trial_env: dict[str, Path]) -> None:
    with pytest.raises(TypeError, match="metric must be a number"):
        sdk.report(1, "high")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="step must be an int"):
        sdk.report(1.5, 0.1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="step must be an int >= 0"):
        sdk.report(-1, 0.1)
    assert not trial_env["events"].exists()


def test_import_is_cheap() -> None:
    code = (
        "import sys, spotwise.sdk; print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- the live control file (SPOTWISE_CONTROL_FILE) -------------------------------------------
def _write_control(path: Path, body: str | bytes) -> None:
    """What the orchestrator (and the AWS agent) do: a temp file renamed over the control file
    (a new inode, so the SDK sees a change even within the file system's mtime granularity)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(body.encode() if isinstance(body, str) else body)
    os.replace(tmp, path)


@pytest.fixture
def control(trial_env: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    path = tmp_path / "control-2.json"
    monkeypatch.setenv("SPOTWISE_CONTROL_FILE", str(path))
    return path


def _due(steps: range) -> list[int]:
    return [s for s in steps if sdk.checkpoint_due(s)]


def test_checkpoint_every_from_the_env_alone(trial_env: dict[str, Path]) -> None:
    assert sdk.checkpoint_every() == 4
    assert _due(range(1, 13)) == [4, 8, 12]


def test_no_control_file_yet_means_the_env(control: Path) -> None:
    assert not control.exists()
    assert sdk.checkpoint_every() == 4
    assert _due(range(1, 9)) == [4, 8]


def test_the_control_file_overrides_the_env(control: Path) -> None:
    _write_control(control, '{"checkpoint_every": 3}')
    assert sdk.checkpoint_every() == 3
    assert _due(range(1, 13)) == [3, 6, 9, 12]


def test_a_control_file_updated_mid_run_changes_checkpoint_due(control: Path) -> None:
    due = _due(range(1, 9))  # no file yet: every 4 (env)
    _write_control(control, '{"checkpoint_every": 5}')
    due += _due(range(9, 21))
    _write_control(control, '{"checkpoint_every": 7}')
    due += _due(range(21, 36))
    assert due == [4, 8, 10, 15, 20, 21, 28, 35]
    control.unlink()  # removed: back to the environment's value
    assert sdk.checkpoint_every() == 4


@pytest.mark.parametrize(
    "body",
    [
        b'{"checkpoint_every": ',  # a partial write
        b"",
        b"not json",
        b"[6]",
        b'{"checkpoint_every": 0}',
        b'{"checkpoint_every": -2}',
        b'{"checkpoint_every": 2.5}',
        b'{"checkpoint_every": "6"}',
        b'{"checkpoint_every": true}',
        b'{"every": 6}',
        b"\xff\xfe{",  # not UTF-8
        b'{"checkpoint_every": 6}' + b" " * 5000,  # far too big for a control file
        b"[" * 4000,  # nested too deep for the JSON parser
    ],
)
def test_a_bad_control_file_keeps_the_last_good_value_and_never_raises(
    control: Path, body: bytes
) -> None:
    _write_control(control, '{"checkpoint_every": 6}')
    assert sdk.checkpoint_every() == 6
    _write_control(control, body)
    assert sdk.checkpoint_every() == 6
    assert _due(range(1, 13)) == [6, 12]
    _write_control(control, '{"checkpoint_every": 2}')  # good again: taken
    assert sdk.checkpoint_every() == 2


def test_a_bad_control_file_without_a_good_one_before_means_the_env(control: Path) -> None:
    _write_control(control, '{"checkpoint_every": 0}')
    assert sdk.checkpoint_every() == 4


def test_an_unchanged_control_file_is_not_read_again(
    control: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import builtins

    reads: list[str] = []
    real_open = builtins.open

    def counting_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if str(file) == str(control):
            reads.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    _write_control(control, '{"checkpoint_every": 3}')
    assert _due(range(1, 101)) == list(range(3, 101, 3))
    assert len(reads) == 1  # 100 calls, one read: later calls only stat the file
    _write_control(control, '{"checkpoint_every": 9}')
    assert sdk.checkpoint_every() == 9 and sdk.checkpoint_every() == 9
    assert len(reads) == 2
    _write_control(control, "{")  # a bad file is read once too, not on every call
    assert sdk.checkpoint_every() == 9 and sdk.checkpoint_every() == 9
    assert len(reads) == 3
