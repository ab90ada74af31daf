"""review-ay F2: a place that cannot be read is asked once per read of a trial's attempts.

``attempts_events`` asked a failing place (a bucket: S3 retries up to 4 times, 5 s connect and
30 s read each; the GCS channel about 10 s) again for every attempt, up to 20, inside the
orchestrator's pass: minutes with spot notices, the deadline and the budget not acted on.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_s23d_resumed_at_end import DONE, STEPS, Book, _relaunch, _write, reports

from spotwise.errors import ProviderError
from spotwise.planner import trial_output
from spotwise.planner.trial_output import attempts_events


def test_a_failing_place_is_asked_once_and_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    book = Book(tmp_path)
    t = _relaunch(book)
    t.attempt = 6
    assert t.life is not None
    t.life.attempt = 6
    folder = book.run_dir / t.trial_id
    _write(folder, 0, [*reports(1, STEPS), DONE])  # attempt 0's is in the run folder
    calls: list[str] = []

    def failing(name: str) -> bytes | None:
        calls.append(name)
        raise ProviderError("s3: reading s3://b/p/events: connect timeout")

    def later(name: str) -> bytes | None:
        calls.append(f"later:{name}")
        return None

    real = trial_output._places

    def places(owner: object, t_: object, life: object) -> list[tuple[str, trial_output.Reader]]:
        local = real(owner, t_, life)[:1]  # type: ignore[arg-type]
        return [*local, ("s3://b/p", failing), ("gs://c/p", later)]

    monkeypatch.setattr(trial_output, "_places", places)

    found, unread = attempts_events(book, t, t.life)

    assert sorted(found) == [0]
    assert len(found[0]) == len(reports(1, STEPS)) + 1
    # attempts 5..1 are not in the run folder: the bucket is asked for the first (5) only, the
    # next place for each of them
    assert [c for c in calls if not c.startswith("later:")] == ["events-5.jsonl"]
    assert [c for c in calls if c.startswith("later:")] == [
        f"later:events-{a}.jsonl" for a in (5, 4, 3, 2, 1)
    ]
    assert unread == "s3://b/p: s3: reading s3://b/p/events: connect timeout"


def test_only_reads_the_attempts_asked_for(tmp_path: Path) -> None:
    book = Book(tmp_path)
    t = _relaunch(book)
    t.attempt = 3
    assert t.life is not None
    t.life.attempt = 3
    folder = book.run_dir / t.trial_id
    for a in (0, 1, 2):
        _write(folder, a, [DONE])

    found, unread = attempts_events(book, t, t.life, only=[2, 3])

    assert (sorted(found), unread) == ([2], "")  # the life's own (3) is never read
