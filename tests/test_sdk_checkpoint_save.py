"""save_checkpoint: a step saved again that dies half way leaves its earlier checkpoint whole;
what fails after the checkpoint is saved is a warning and an event, not an exception; a state
that safe loading would refuse, or that is cyclic or too deep, is refused at save in one line.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spotwise import sdk
from spotwise.checkpoint import LocalCheckpointStore, checkpoint_name, torchstate
from spotwise.errors import CheckpointError

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def fresh_sdk(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("SPOTWISE_"):
            monkeypatch.delenv(name)
    monkeypatch.setattr(sdk, "_runtime", sdk._Runtime())
    monkeypatch.chdir(tmp_path)
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Path]:
    paths = {"ckpt": tmp_path / "ckpt" / "trial-3", "events": tmp_path / "events.jsonl"}
    for k, v in {
        "SPOTWISE_JOB_ID": "job-1",
        "SPOTWISE_TRIAL_ID": "trial-3",
        "SPOTWISE_CHECKPOINT_URI": str(paths["ckpt"]),
        "SPOTWISE_EVENTS_FILE": str(paths["events"]),
    }.items():
        monkeypatch.setenv(k, v)
    return paths


def _events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "time"} for r in rows]


def _state(step: int, attempt: int) -> dict[str, Any]:
    return {"step": step, "w": torch.full((20,), float(attempt))}


def _sha12(state: dict[str, Any]) -> str:
    buf = io.BytesIO()
    torch.save(state, buf)  # deterministic: the same state, the same bytes
    return hashlib.sha256(buf.getvalue()).hexdigest()[:12]


# -- 1. a step saved again -------------------------------------------------------------------
def test_a_relaunch_killed_while_saving_a_step_again_resumes_from_the_earlier_one(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    sdk.save_checkpoint(_state(5, attempt=0), 5)
    monkeypatch.setattr(sdk, "_runtime", sdk._Runtime())  # the relaunch retrains: other bytes
    real_write = LocalCheckpointStore._write

    def killed(self: LocalCheckpointStore, key: str, data: bytes) -> None:
        if key.endswith(".json"):
            raise KeyboardInterrupt("kill -9 between the data and the manifest")
        real_write(self, key, data)

    monkeypatch.setattr(LocalCheckpointStore, "_write", killed)
    with pytest.raises(KeyboardInterrupt):
        sdk.save_checkpoint(_state(5, attempt=1), 5)
    monkeypatch.setattr(LocalCheckpointStore, "_write", real_write)
    monkeypatch.setattr(sdk, "_runtime", sdk._Runtime())  # the next relaunch
    state = sdk.load_checkpoint()
    assert state is not None and state["step"] == 5
    assert torch.equal(state["w"], torch.zeros(20))  # attempt 0's, whole
    assert not [e for e in _events(env["events"]) if e["type"] == "checkpoint_rejected"]

    uri = sdk.save_checkpoint(_state(5, attempt=2), 5)  # saved again, this time completely
    assert uri == str(env["ckpt"] / f"ckpt-00000005-{_sha12(_state(5, attempt=2))}.pt")
    state = sdk.load_checkpoint()
    assert state is not None and torch.equal(state["w"], torch.full((20,), 2.0))
    # attempt 0's data went once the new manifest was written; the killed write's orphan stays
    # until step 5 is older than every checkpoint kept (retention's sweep)
    assert sorted(p.name for p in env["ckpt"].iterdir() if p.suffix == ".pt") == sorted(
        [Path(uri).name, f"ckpt-00000005-{_sha12(_state(5, attempt=1))}.pt"]
    )


# -- 2. what fails after the checkpoint is saved ---------------------------------------------
def test_a_save_that_cannot_delete_older_checkpoints_warns_once_and_goes_on(
    env: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def denied(self: LocalCheckpointStore, key: str) -> None:
        raise CheckpointError(f"cannot delete checkpoint {self.root / key}: Permission denied")

    monkeypatch.setattr(LocalCheckpointStore, "_remove", denied)
    for step in (5, 10, 15, 20):
        uri = sdk.save_checkpoint(_state(step, attempt=0), step)
        assert uri == str(env["ckpt"] / checkpoint_name(step))
    ckpt = env["ckpt"]
    assert capsys.readouterr().err.splitlines() == [
        f"spotwise: warning: checkpoint of step 15 saved in {ckpt}, but older checkpoints were "
        "not all removed; they stay, using storage, until a later save removes them: cannot "
        f"delete checkpoint {ckpt}/ckpt-00000005.json: Permission denied"
    ]
    events = _events(env["events"])
    assert [(e["type"], e["step"]) for e in events] == [
        ("checkpoint", 5),
        ("checkpoint", 10),
        ("checkpoint", 15),
        ("checkpoint_cleanup_failed", 15),
        ("checkpoint", 20),
    ]
    assert events[3] == {
        "type": "checkpoint_cleanup_failed",
        "step": 15,
        "what": "retention",
        "reason": f"cannot delete checkpoint {ckpt}/ckpt-00000005.json: Permission denied",
        "uri": str(ckpt),
    }
    state = sdk.load_checkpoint()
    assert state is not None and state["step"] == 20


def test_a_save_whose_latest_pointer_fails_warns_once_and_loads_the_newest(
    env: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sdk.save_checkpoint(_state(5, attempt=0), 5)
    real_write = LocalCheckpointStore._write

    def no_latest(self: LocalCheckpointStore, key: str, data: bytes) -> None:
        if key == "LATEST":
            raise CheckpointError(f"cannot write checkpoint {self.root / key}: No space left")
        real_write(self, key, data)

    monkeypatch.setattr(LocalCheckpointStore, "_write", no_latest)
    sdk.save_checkpoint(_state(10, attempt=0), 10)
    sdk.save_checkpoint(_state(15, attempt=0), 15)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "checkpoint of step 10 saved" in err[0]
    assert "its LATEST pointer was not updated; loads are unaffected" in err[0]
    kinds = [(e["type"], e["step"], e.get("what")) for e in _events(env["events"])]
    assert kinds == [
        ("checkpoint", 5, None),
        ("checkpoint", 10, None),
        ("checkpoint_cleanup_failed", 10, "latest"),
        ("checkpoint", 15, None),
    ]
    assert (env["ckpt"] / "LATEST").read_text() == "ckpt-00000005.json\n"  # stale
    state = sdk.load_checkpoint()
    assert state is not None and state["step"] == 15


# -- 3, 7. what safe loading would refuse, cycles, depth -------------------------------------
class Sub(torch.Tensor):
    pass


class PlainParam(torch.nn.Parameter):
    pass


def test_a_tensor_subclass_is_refused_at_save(env: dict[str, Path]) -> None:
    sub = torch.ones(2).as_subclass(Sub)
    with pytest.raises(TypeError) as err:
        sdk.save_checkpoint({"model": {"w": sub}}, 1)
    assert str(err.value) == (
        f"save_checkpoint: state['model']['w'] is a {__name__}.Sub, a tensor subclass that "
        "safe loading (weights_only) refuses; store a plain tensor instead "
        "(t.as_subclass(torch.Tensor); a DTensor: t.full_tensor())"
    )
    uninit = torch.nn.parameter.UninitializedParameter()
    with pytest.raises(TypeError, match=r"state\['p'\] is a torch.nn.parameter.Uninitialized"):
        sdk.save_checkpoint({"p": uninit}, 1)
    assert not env["ckpt"].exists()
    sdk.save_checkpoint({"w": sub.as_subclass(torch.Tensor)}, 1)  # the fix it names works


def test_what_safe_loading_reads_back_is_saved(env: dict[str, Path]) -> None:
    shared = torch.ones(3)
    state = {
        "t": torch.zeros(2),
        "p": torch.nn.Parameter(torch.ones(2)),
        "sub_p": PlainParam(torch.ones(2)),  # pickled as a Parameter
        "buffer": torch.nn.Buffer(torch.ones(2)),  # a plain tensor
        "twice": [shared, shared, {"a": [1]}],
        "again": None,
    }
    state["again"] = state["twice"]  # shared, not a cycle
    sdk.save_checkpoint(state, 1)
    loaded = sdk.load_checkpoint()
    assert loaded is not None
    assert type(loaded["p"]) is torch.nn.Parameter and type(loaded["sub_p"]) is torch.nn.Parameter
    assert loaded["again"][2] == {"a": [1]}


def test_a_cyclic_state_is_refused_in_one_line(env: dict[str, Path]) -> None:
    inner: dict[str, Any] = {"a": 1}
    inner["self"] = inner
    with pytest.raises(ValueError) as err:
        sdk.save_checkpoint({"opt": [inner]}, 1)
    assert str(err.value) == (
        "save_checkpoint: state['opt'][0]['self'] refers back to a container that holds it "
        "(a cycle); a checkpoint's state must be a tree"
    )
    assert not env["ckpt"].exists()


def test_a_too_deep_state_is_refused_in_one_line(env: dict[str, Path]) -> None:
    deep: list[Any] = []
    for _ in range(2000):
        deep = [deep]
    with pytest.raises(ValueError) as err:
        sdk.save_checkpoint({"deep": deep}, 1)
    msg = str(err.value)
    max_depth = torchstate.MAX_DEPTH
    assert msg.startswith("save_checkpoint: state['deep'][0][0]")
    assert msg.endswith(f"is nested more than {max_depth} containers deep; flatten the state")
    assert "\n" not in msg and len(msg) < 250
    ok: list[Any] = []
    for _ in range(max_depth - 2):  # the state dict and its list: max_depth containers in all
        ok = [ok]
    sdk.save_checkpoint({"deep": ok}, 1)
    loaded = sdk.load_checkpoint()
    assert loaded is not None and loaded["deep"] == ok
