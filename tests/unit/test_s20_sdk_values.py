"""What the SDK takes as a step and as a metric (review-ak F1 and M1).

F1: a step >= 2**63 was accepted (and even saved as a checkpoint), then the orchestrator's
store (a 64-bit INTEGER) raised OverflowError and the job died with exit 70; it is refused in
the script, in one line. M1: ``report(step, 10**400)`` raised a bare ``OverflowError: int too
large to convert to float``; ``report(1, True)`` was recorded as 1.0 (a bool step is refused);
``report(1, "0.9")`` as 0.9 without a word (a step ``"3"`` is refused, and nothing documents a
string metric), and ``report(1, "nan")`` as an invalid value.
"""

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
np = pytest.importorskip("numpy")
MAX = 2**63 - 1


@pytest.fixture(autouse=True)
def trial(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    for name in list(os.environ):
        if name.startswith("SPOTWISE_"):
            monkeypatch.delenv(name)
    monkeypatch.setattr(sdk, "_runtime", sdk._Runtime())
    monkeypatch.chdir(tmp_path)
    events = tmp_path / "events.jsonl"
    monkeypatch.setenv("SPOTWISE_EVENTS_FILE", str(events))
    monkeypatch.setenv("SPOTWISE_CHECKPOINT_URI", str(tmp_path / "ckpt"))
    previous = signal.getsignal(signal.SIGTERM)
    yield events
    signal.signal(signal.SIGTERM, previous)


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("step", [MAX + 1, 2**64, 2**63 + 7])
def test_a_step_the_store_cannot_keep_is_refused_by_every_call(trial: Path, step: int) -> None:
    said = (
        f"step must be an int from 0 to {MAX} (2**63-1, what the store keeps), got {step}: "
        "report a step count, not a timestamp or a hash"
    )
    for call in (
        lambda: sdk.report(step, 0.5),
        lambda: sdk.done(step),
        lambda: sdk.checkpoint_due(step),
        lambda: sdk.save_checkpoint({"step": 1}, step),
    ):
        with pytest.raises(ValueError) as caught:
            call()
        assert str(caught.value) == said
    assert _events(trial) == []
    assert not (trial.parent / "ckpt").exists()  # no checkpoint written under that step


def test_the_largest_step_the_store_keeps_is_taken(trial: Path) -> None:
    sdk.report(MAX, 0.5)
    sdk.report(np.int64(MAX), 0.25)
    assert [(e["step"], e["metric"]) for e in _events(trial)] == [(MAX, 0.5), (MAX, 0.25)]


def test_a_step_too_long_to_print_is_named_by_its_size() -> None:
    with pytest.raises(ValueError, match=r", got an int of 16610 bits: report a step count"):
        sdk.report(10**5000, 0.5)  # Python refuses str() of more than 4300 digits


def test_an_int_metric_too_large_for_a_float_says_so_in_one_line(trial: Path) -> None:
    with pytest.raises(ValueError) as caught:
        sdk.report(1, 10**400)
    assert str(caught.value) == (
        f"metric must be a finite number, got int {str(10**400)[:77]}... (too large for a float)"
    )
    with pytest.raises(ValueError) as caught:
        sdk.report(1, 10**5000)
    assert str(caught.value) == (
        "metric must be a finite number, got an int of 16610 bits (too large for a float)"
    )
    assert _events(trial) == []


@pytest.mark.parametrize(
    ("metric", "shown"),
    [
        (True, "bool True"),
        (False, "bool False"),
        ("0.9", "str '0.9': pass float(...) of it"),
        ("nan", "str 'nan': pass float(...) of it"),
        (b"0.9", "bytes b'0.9'"),
        ([0.9], "list [0.9]"),
    ],
)
def test_a_bool_or_a_string_is_not_a_metric(trial: Path, metric: Any, shown: str) -> None:
    with pytest.raises(TypeError) as caught:
        sdk.report(1, metric)
    assert str(caught.value) == f"metric must be a number, got {shown}"
    assert _events(trial) == []


def test_bool_arrays_are_not_metrics_either(trial: Path) -> None:
    with pytest.raises(TypeError, match=r"^metric must be a number, got bool_? (np\.)?True_?$"):
        sdk.report(1, np.bool_(True))
    with pytest.raises(TypeError, match=r"^metric must be a number, got Tensor tensor\(True\)"):
        sdk.report(1, torch.tensor(True))
    assert _events(trial) == []


def test_numbers_of_every_kind_are_still_metrics(trial: Path) -> None:
    sdk.report(1, 1)
    sdk.report(2, np.float32(0.5))
    sdk.report(3, torch.tensor(0.25))
    sdk.report(4, float("inf"))  # recorded as invalid, not raised
    sdk.report(5, 1e308 * 10)
    got = [(e["step"], e["metric"], e.get("invalid", False)) for e in _events(trial)]
    assert got == [
        (1, 1.0, False),
        (2, 0.5, False),
        (3, 0.25, False),
        (4, None, True),
        (5, None, True),
    ]
