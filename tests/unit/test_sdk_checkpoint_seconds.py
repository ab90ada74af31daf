"""save_checkpoint's ``checkpoint`` event says how long the save kept the script waiting
(review-y F1): the orchestrator plans whether a save fits in an interruption notice with it,
where it assumed 30 s for every job whatever its checkpoints took."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spotwise import sdk

torch = pytest.importorskip("torch")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class SlowStore:
    """A store whose put takes ``seconds`` on the fake clock (an upload of a large model)."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        self.clock, self.seconds = clock, seconds
        self.puts: list[tuple[str, int, dict[str, Any]]] = []

    def put(self, name: str, data: bytes, meta: dict[str, Any]) -> str:
        self.clock.now += self.seconds
        self.puts.append((name, len(data), meta))
        return f"s3://bucket/ckpt/{name}"


@pytest.fixture(autouse=True)
def fresh_sdk(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    for name in list(os.environ):
        if name.startswith("SPOTWISE_"):
            monkeypatch.delenv(name)
    monkeypatch.setattr(sdk, "_runtime", sdk._Runtime())
    monkeypatch.chdir(tmp_path)
    events = tmp_path / "events.jsonl"
    monkeypatch.setenv("SPOTWISE_TRIAL_ID", "trial-3")
    monkeypatch.setenv("SPOTWISE_CHECKPOINT_URI", str(tmp_path / "ckpt"))
    monkeypatch.setenv("SPOTWISE_EVENTS_FILE", str(events))
    previous = signal.getsignal(signal.SIGTERM)
    yield events
    signal.signal(signal.SIGTERM, previous)


def _checkpoints(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in rows if r["type"] == "checkpoint"]


def test_a_slow_put_is_timed_into_the_event(
    fresh_sdk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    store = SlowStore(clock, 187.25)  # longer than AWS's 120 s notice
    monkeypatch.setattr(sdk, "_clock", clock)
    monkeypatch.setattr(sdk, "checkpoint_store", lambda: store)
    uri = sdk.save_checkpoint({"step": 5, "w": torch.zeros(4)}, 5)
    [event] = _checkpoints(fresh_sdk)
    assert event["seconds"] == 187.25
    assert (event["step"], event["uri"]) == (5, uri) and store.puts[0][0].startswith("ckpt-")
    store.seconds = 0.5  # the next save is timed on its own, not since the first
    sdk.save_checkpoint({"step": 10, "w": torch.zeros(4)}, 10)
    assert [e["seconds"] for e in _checkpoints(fresh_sdk)] == [187.25, 0.5]


def test_serialising_is_timed_too(fresh_sdk: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The wait starts before torch.save, not at the put: a large state's serialising is part
    of what a notice's save must fit in."""
    clock = FakeClock()
    monkeypatch.setattr(sdk, "_clock", clock)
    monkeypatch.setattr(sdk, "checkpoint_store", lambda: SlowStore(clock, 1.0))
    real_save = torch.save

    def slow_save(obj: Any, f: Any) -> None:
        clock.now += 4.0
        real_save(obj, f)

    monkeypatch.setattr(torch, "save", slow_save)
    sdk.save_checkpoint({"step": 1, "w": torch.zeros(4)}, 1)
    assert [e["seconds"] for e in _checkpoints(fresh_sdk)] == [5.0]


def test_a_real_local_save_carries_a_plausible_number(fresh_sdk: Path) -> None:
    sdk.save_checkpoint({"step": 2, "w": torch.zeros(1000)}, 2)
    [event] = _checkpoints(fresh_sdk)
    assert isinstance(event["seconds"], float) and 0.0 <= event["seconds"] < 30.0
    assert sdk.load_checkpoint() is not None  # the save itself is unchanged
