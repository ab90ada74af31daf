"""The orchestrator writes its heartbeat through its drain's wait and after every call that may
block, so that `last_alive.LATE_S` can be small.

The drain wrote none while it waited up to ``STOP_TIMEOUT_WALL_S`` (30 s) for the lives a
notice is taking, then a kill grace: records it closed came up to ~40 s after the last
heartbeat, so ``LATE_S`` (how far past the heartbeat a record still proves the orchestrator
alive) had to be 45 s, and a resumed job's dead lives could be billed up to 45 s past the
heartbeat by an earlier run's records on a clock ahead. The wall clock here is a fake one that
the waits and the terminates (a local kill grace at its longest) move on.
"""

from __future__ import annotations

import inspect
import itertools
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_s20g_drain_steps import Book, _book

from spotwise.last_alive import LATE_S, last_alive
from spotwise.planner.ledger import STOP_TIMEOUT_WALL_S
from spotwise.providers.local import LocalProvisioner
from spotwise.providers.proc_group import SETTLE_S
from spotwise.store.heartbeat import HEARTBEAT_EVERY_WALL_S, Heartbeat

GRACE = inspect.signature(LocalProvisioner.__init__).parameters["kill_grace_s"].default
KILL_S = GRACE + SETTLE_S  # the longest a local terminate blocks


class Clock:
    """Monotonic and wall seconds that only the code under test moves (its sleeps)."""

    def __init__(self) -> None:
        self.mono = 1000.0
        self.offset = time.time() - self.mono  # the records made before read the real clock

    def monotonic(self) -> float:
        return self.mono

    def wall(self) -> float:
        return self.offset + self.mono

    def sleep(self, seconds: float) -> None:
        self.mono += max(seconds, 0.0)


def _beating(book: Book, monkeypatch: pytest.MonkeyPatch) -> tuple[Clock, list[float]]:
    """The fake clock in place, the book's heartbeat on it (written once, as a run starts),
    its provider's terminate blocking a whole kill grace; the heartbeats written, in order."""
    clock = Clock()
    monkeypatch.setattr(time, "monotonic", clock.monotonic)
    monkeypatch.setattr(time, "sleep", clock.sleep)
    monkeypatch.setattr(time, "time", clock.wall)
    beats: list[float] = []
    write = book.store.heartbeat

    def heartbeat(job_id: str, at: float) -> None:
        beats.append(at)
        write(job_id, at)

    monkeypatch.setattr(book.store, "heartbeat", heartbeat)
    book.heartbeat = Heartbeat(
        book.store, book.job_id, HEARTBEAT_EVERY_WALL_S, clock=clock.monotonic, wall=clock.wall
    )
    book.heartbeat.beat()
    terminate = book.prov.terminate

    def slow(ids: Any) -> None:
        clock.sleep(KILL_S)
        terminate(ids)

    book.prov.terminate = slow  # type: ignore[method-assign]
    return clock, beats


def test_the_drain_writes_the_heartbeat_while_it_waits_and_its_records_stay_within_late_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A noticed life its provider never takes: the drain waits the whole 30 s, then
    terminates it (a 7 s kill grace) and closes its record. A heartbeat every 5 s all along
    (was: none after the first), and the record within the heartbeat's period and one
    terminate of the last one, so within LATE_S: it proves the orchestrator alive."""
    book = _book(tmp_path)
    book.live(0, noticed=True)
    book.opts = SimpleNamespace(poll_s=0.5)
    clock, beats = _beating(book, monkeypatch)
    start = clock.wall()

    assert book._drain(book.backend) is None  # type: ignore[arg-type]

    assert beats[0] == start and len(beats) >= 1 + STOP_TIMEOUT_WALL_S // HEARTBEAT_EVERY_WALL_S
    poll = book.opts.poll_s
    waiting = [at for at in beats if at <= start + STOP_TIMEOUT_WALL_S + poll]
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    assert max(gaps[: len(waiting) - 1]) <= HEARTBEAT_EVERY_WALL_S + poll  # the wait's
    assert max(gaps) <= HEARTBEAT_EVERY_WALL_S + KILL_S + poll  # one terminate between asks
    assert beats[-1] - start >= STOP_TIMEOUT_WALL_S  # the wait's end, or after the terminate
    row = book.store.get_instance("l-0")
    assert (row.state, row.end_reason) == ("terminated", "stopped")
    assert row.ended_at is not None and row.ended_at - start >= STOP_TIMEOUT_WALL_S + KILL_S
    assert row.ended_at - beats[-1] <= HEARTBEAT_EVERY_WALL_S + KILL_S <= LATE_S
    job = book.store.get_job(book.job_id)
    assert job.heartbeat_at == beats[-1]
    # what a cancel after a kill -9 then would bill the dead lives up to: the drain's last
    assert last_alive(book.store, job, [])[0] == pytest.approx(row.ended_at)
    book.store.close()


@pytest.mark.parametrize("call", ["_try_release", "_release_all", "_terminate_quietly"])
def test_a_terminate_in_the_loop_is_followed_by_a_heartbeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    """A terminate the loop asks for may block a kill grace (an overdue stop, a budget stop,
    a failed launch's instance): the heartbeat due after it is written before the records
    that follow (was: only at the pass's end, one blocking terminate per life before it)."""
    book = _book(tmp_path)
    t0, t1 = book.live(0), book.live(1)
    clock, beats = _beating(book, monkeypatch)
    start = clock.wall()
    assert t0.life is not None and t1.life is not None
    if call == "_try_release":
        assert book._try_release(t0, "i-0", t0.life, 100.0, "the exited instance")
    elif call == "_release_all":
        book._release_all([(t0, t0.life), (t1, t1.life)], 100.0, "a budget stop")
    else:
        assert book._terminate_quietly(t0, ["i-0"], 100.0, "a stray instance")
    assert beats == [start, start + KILL_S]
    book.store.close()
