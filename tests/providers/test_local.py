"""The local provisioner: real child processes, revoked by a hand-made market on a clock the test
drives. Waits use generous wall-clock timeouts; nothing asserts a tight timing."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spotwise.errors import CapacityError, ProviderError
from spotwise.providers.base import (
    TAG_JOB,
    InstanceState,
    LaunchRequest,
    Market,
    NoticeKind,
    Offer,
    Provisioner,
    our_tags,
)
from spotwise.providers.local import LocalProvisioner
from spotwise.providers.replay import MarketClock, ReplayMarket
from spotwise.traces import TraceSet

T0 = 1_700_000_000.0
GAP = 10.0
TICKS = 40
ZONE_A, ZONE_B = "us-east-1a", "us-east-1b"
REVOKE_AT = T0 + 5 * GAP  # zone A: available at ticks 0..4, gone from tick 5 on
LEAD = 20.0  # notice lead, market seconds
SPEEDUP = 100.0  # market seconds per (fake) wall second
FLOOR = 1.0  # shortest notice, real wall seconds
WAIT = 60.0  # generous: the machine is small and shared

CHILD = """
import json, os, signal, time
path = os.environ["SPOTWISE_EVENTS_FILE"]
def emit(rec):
    with open(path, "a") as fh:
        fh.write(json.dumps(rec) + "\\n")
def on_term(signum, frame):
    emit({"type": "stopping"})  # and keep running: only SIGKILL ends this child
signal.signal(signal.SIGTERM, on_term)
emit({"type": "ready", "pid": os.getpid(),
      "env": sorted(k for k in os.environ if k.startswith("SPOTWISE_"))})
while True:
    time.sleep(0.05)
"""


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


class FakeWall:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def at_market(self, market_time: float) -> None:
        self.t = (market_time - T0) / SPEEDUP


@pytest.fixture
def traces() -> TraceSet:
    available = np.ones((2, TICKS), dtype=bool)
    available[0, 5:] = False
    price = np.vstack([np.full(TICKS, 1.0), np.full(TICKS, 2.0)])
    return TraceSet(
        [ZONE_A, ZONE_B], T0 + GAP * np.arange(TICKS), available, price,
        instance_type="p3.2xlarge", on_demand_price=5.0, gap_seconds=GAP,
    )  # fmt: skip


@pytest.fixture
def wall() -> FakeWall:
    return FakeWall()


@pytest.fixture
def market(traces: TraceSet) -> ReplayMarket:
    return ReplayMarket(traces)


@pytest.fixture
def prov(market: ReplayMarket, wall: FakeWall, tmp_path: Path) -> Iterator[LocalProvisioner]:
    clock = MarketClock(T0, SPEEDUP, wall=wall)
    p = LocalProvisioner(
        market, clock, notice_lead_s=LEAD, notice_floor_wall_s=FLOOR,
        logs_dir=tmp_path / "logs", kill_grace_s=0.5, records_dir=tmp_path / "records",
    )  # fmt: skip
    yield p
    p.shutdown()


def offer(market: ReplayMarket, zone: str, kind: Market, at: float = T0) -> Offer:
    (o,) = market.offers(at=at, zones=[zone], market=kind)
    return o


def request(
    o: Offer, tmp_path: Path, token: str | None = None, tags: dict[str, str] | None = None
) -> LaunchRequest:
    token = token or uuid.uuid4().hex[:12]
    env = {"SPOTWISE_EVENTS_FILE": str(tmp_path / f"events-{token}.jsonl"), "SPOTWISE_ATTEMPT": "0"}
    tags = our_tags("job-1", "trial-1", token) if tags is None else tags
    return LaunchRequest(o, (sys.executable, "-c", CHILD), env, tags, token, str(tmp_path))


def events_of(prov: LocalProvisioner, iid: str, seen: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen.extend(prov.progress(iid))
    return seen


def state_of(prov: LocalProvisioner, iid: str) -> Any:
    (inst,) = [i for i in prov.describe() if i.instance_id == iid]
    return inst


def test_spot_revocation_notice_sigterm_then_kill(
    prov: LocalProvisioner, market: ReplayMarket, wall: FakeWall, tmp_path: Path
) -> None:
    assert isinstance(prov, Provisioner)
    inst = prov.launch(request(offer(market, ZONE_A, Market.SPOT), tmp_path))
    assert inst.state is InstanceState.RUNNING and inst.launched_at == T0
    assert inst.tags[TAG_JOB] == "job-1"
    seen: list[dict[str, Any]] = []
    wait_for(lambda: any(e["type"] == "ready" for e in events_of(prov, inst.instance_id, seen)),
             "the child to start")  # fmt: skip

    wall.at_market(REVOKE_AT - LEAD - 1.0)  # one market second before the notice is due
    assert prov.notices() == []
    wall.at_market(REVOKE_AT - LEAD)
    noticed = time.monotonic()
    (notice,) = prov.notices()
    assert notice.instance_id == inst.instance_id
    assert notice.kind is NoticeKind.INTERRUPTION
    assert notice.deadline == REVOKE_AT
    assert notice.received_at == REVOKE_AT - LEAD

    wait_for(lambda: any(e["type"] == "stopping" for e in events_of(prov, inst.instance_id, seen)),
             "the child's SIGTERM handler")  # fmt: skip
    revoked = wait_for(
        lambda: state_of(prov, inst.instance_id).state is InstanceState.REVOKED, "revocation"
    )
    assert revoked
    assert time.monotonic() - noticed >= FLOOR  # the notice lasted at least the floor
    final = state_of(prov, inst.instance_id)
    assert final.ended_at == REVOKE_AT  # billed to the market's revocation tick
    assert final.exit_code == -signal.SIGKILL  # it ignored SIGTERM, so it was killed
    assert prov.notices() == []  # delivered once
    assert [e["type"] for e in seen].count("stopping") == 1


def test_on_demand_is_never_revoked(
    prov: LocalProvisioner, market: ReplayMarket, wall: FakeWall, tmp_path: Path
) -> None:
    inst = prov.launch(request(offer(market, ZONE_A, Market.ON_DEMAND), tmp_path))
    seen: list[dict[str, Any]] = []
    wait_for(lambda: events_of(prov, inst.instance_id, seen), "the child to start")
    for t in (REVOKE_AT - LEAD, REVOKE_AT, REVOKE_AT + 100 * GAP):
        wall.at_market(t)
        assert prov.notices() == []
        assert state_of(prov, inst.instance_id).state is InstanceState.RUNNING
    prov.terminate([inst.instance_id])
    final = state_of(prov, inst.instance_id)
    assert final.state is InstanceState.TERMINATED
    assert final.ended_at == REVOKE_AT + 100 * GAP
    assert final.exit_code == -signal.SIGKILL  # SIGTERM ignored, killed after the grace


def test_spot_in_an_always_available_zone_is_never_noticed(
    prov: LocalProvisioner, market: ReplayMarket, wall: FakeWall, tmp_path: Path
) -> None:
    inst = prov.launch(request(offer(market, ZONE_B, Market.SPOT), tmp_path))
    wall.at_market(T0 + (TICKS + 10) * GAP)
    assert prov.notices() == []
    assert state_of(prov, inst.instance_id).state is InstanceState.RUNNING

    prov.revoke_now(inst.instance_id)  # fault injection: notice now, taken one lead later
    now = T0 + (TICKS + 10) * GAP
    (notice,) = prov.notices()
    assert (notice.received_at, notice.deadline) == (now, now + LEAD)
    wait_for(lambda: state_of(prov, inst.instance_id).state is InstanceState.REVOKED, "revocation")
    assert state_of(prov, inst.instance_id).ended_at == now + LEAD


def test_no_spot_capacity_now_is_a_capacity_error(
    prov: LocalProvisioner, market: ReplayMarket, wall: FakeWall, tmp_path: Path
) -> None:
    wall.at_market(REVOKE_AT + GAP)
    o = offer(market, ZONE_A, Market.SPOT, at=REVOKE_AT + GAP)
    assert not o.available
    with pytest.raises(CapacityError, match=ZONE_A):
        prov.launch(request(o, tmp_path))
    assert prov.describe() == []
    od = prov.launch(request(offer(market, ZONE_A, Market.ON_DEMAND), tmp_path))
    assert od.state is InstanceState.RUNNING  # on-demand has capacity there


def test_refuses_foreign_ids_and_untagged_launches(
    prov: LocalProvisioner, market: ReplayMarket, tmp_path: Path
) -> None:
    o = offer(market, ZONE_B, Market.SPOT)
    with pytest.raises(ProviderError, match="without spotwise tags"):
        prov.launch(request(o, tmp_path, tags={}))
    with pytest.raises(ProviderError, match="without spotwise tags"):
        prov.launch(request(o, tmp_path, tags={"spotwise:managed": "true"}))  # no job tag
    assert prov.describe() == []

    inst = prov.launch(request(o, tmp_path))
    with pytest.raises(ProviderError, match="not launched by spotwise"):
        prov.terminate(["i-0123456789abcdef0"])
    with pytest.raises(ProviderError, match="not launched by spotwise"):
        prov.terminate([inst.instance_id, "local-somebody-else"])
    assert state_of(prov, inst.instance_id).state is InstanceState.RUNNING  # all or nothing


def test_launch_is_idempotent_on_client_token(
    prov: LocalProvisioner, market: ReplayMarket, tmp_path: Path
) -> None:
    o = offer(market, ZONE_B, Market.SPOT)
    first = prov.launch(request(o, tmp_path, token="tok-1"))
    again = prov.launch(request(o, tmp_path, token="tok-1"))
    assert again is first
    assert len(prov.describe()) == 1
    other = prov.launch(request(o, tmp_path, token="tok-2"))
    assert other.instance_id != first.instance_id
    assert {i.instance_id for i in prov.describe({"spotwise:launch": "tok-2"})} == {
        other.instance_id
    }


def test_progress_returns_only_new_whole_lines(
    prov: LocalProvisioner, market: ReplayMarket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTWISE_LEAKED", "from-the-parent")
    req = request(offer(market, ZONE_B, Market.SPOT), tmp_path)
    inst = prov.launch(req)
    seen: list[dict[str, Any]] = []
    (ready,) = wait_for(lambda: events_of(prov, inst.instance_id, seen), "the child to start")
    # the child sees exactly the request's SPOTWISE_* variables, none of the parent's
    assert ready["env"] == sorted(req.env)
    assert prov.progress(inst.instance_id) == []  # nothing new

    events = Path(req.env["SPOTWISE_EVENTS_FILE"])
    with events.open("a") as fh:
        fh.write('{"type": "report", "step": 1, "metric": 0.5}\nnot json\n[1, 2]\n{"type": "rep')
    assert prov.progress(inst.instance_id) == [{"type": "report", "step": 1, "metric": 0.5}]
    with events.open("a") as fh:
        fh.write('ort", "step": 2, "metric": 0.75}\n')
    assert prov.progress(inst.instance_id) == [{"type": "report", "step": 2, "metric": 0.75}]
    assert prov.progress("local-unknown") == []


def test_an_exited_trial_keeps_its_exit_code(
    prov: LocalProvisioner, market: ReplayMarket, tmp_path: Path
) -> None:
    req = request(offer(market, ZONE_B, Market.ON_DEMAND), tmp_path)
    req = LaunchRequest(
        req.offer, (sys.executable, "-c", "raise SystemExit(3)"), req.env, req.tags,
        req.client_token, req.workdir,
    )  # fmt: skip
    inst = prov.launch(req)
    wait_for(lambda: state_of(prov, inst.instance_id).exit_code is not None, "the child to exit")
    assert state_of(prov, inst.instance_id).exit_code == 3
    prov.terminate([inst.instance_id])
    final = state_of(prov, inst.instance_id)
    assert final.state is InstanceState.TERMINATED and final.exit_code == 3
    log = tmp_path / "logs" / f"{inst.instance_id}.log"
    assert log.exists()


def test_a_missing_program_is_a_provider_error(
    prov: LocalProvisioner, market: ReplayMarket, tmp_path: Path
) -> None:
    req = request(offer(market, ZONE_B, Market.ON_DEMAND), tmp_path)
    bad = LaunchRequest(
        req.offer, (str(tmp_path / "no-such-program"),), req.env, req.tags, "tok", ""
    )
    with pytest.raises(ProviderError, match="cannot start"):
        prov.launch(bad)
    assert prov.describe() == []


def test_shutdown_leaves_no_process(
    prov: LocalProvisioner, market: ReplayMarket, tmp_path: Path
) -> None:
    inst = prov.launch(request(offer(market, ZONE_B, Market.SPOT), tmp_path))
    seen: list[dict[str, Any]] = []
    (ready,) = wait_for(lambda: events_of(prov, inst.instance_id, seen), "the child to start")
    prov.shutdown()
    assert state_of(prov, inst.instance_id).state is InstanceState.TERMINATED
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(ready["pid"], 0)


def test_a_market_clock_restarts_at_its_start() -> None:
    wall = [100.0]
    clock = MarketClock(5000.0, 30.0, wall=lambda: wall[0])
    wall[0] = 102.0
    assert clock.now() == 5060.0
    clock.restart()  # the job starts now: market time is its start again
    assert clock.now() == 5000.0
    wall[0] = 103.0
    assert clock.now() == 5030.0


def test_a_trial_that_exited_before_its_notice_was_seen_gets_none(
    prov: LocalProvisioner, market: ReplayMarket, wall: FakeWall, tmp_path: Path
) -> None:
    """review-y F5: the replay's market passes are minutes long at 300x, so a trial could
    finish, then a poll see its notice due and the provider take the life free, although a
    cloud orchestrator would have seen the exit first and ended (and paid for) it."""
    req = request(offer(market, ZONE_B, Market.SPOT), tmp_path)
    inst = prov.launch(dataclasses.replace(req, argv=(sys.executable, "-c", "pass")))
    proc = prov._procs[inst.instance_id].popen
    assert proc is not None
    proc.wait(timeout=WAIT)  # the trial is done
    prov.revoke_now(inst.instance_id)  # its notice falls due after that, before a poll
    assert prov.notices() == []
    state = state_of(prov, inst.instance_id)
    assert (state.state, state.exit_code) == (InstanceState.RUNNING, 0)
    prov.terminate([inst.instance_id])  # the orchestrator ends the life: billed, not revoked
    assert state_of(prov, inst.instance_id).state is InstanceState.TERMINATED


TEARDOWN = """
import sys, time
from spotwise import sdk
sdk.done(3)
while True:  # the interpreter's teardown after done, stretched: only a signal ends it
    time.sleep(0.05)
"""
SLEEPER = "import time\nwhile True:\n    time.sleep(0.05)\n"


def _done_line(path: Path, written: float) -> None:
    with open(path, "a") as fh:
        fh.write(f'{{"type":"done","step":3,"time":{written!r}}}\n')


def test_a_trial_that_wrote_done_before_its_notice_gets_none_while_it_winds_down(
    prov: LocalProvisioner, market: ReplayMarket, wall: FakeWall, tmp_path: Path
) -> None:
    """review-ab F3: the exit check read the process's exit only; the teardown after `done`
    (a fraction of a wall second, minutes at 300x) let a notice due in it take the finished
    life free. The SDK's own `done` line counts as the exit."""
    req = request(offer(market, ZONE_A, Market.SPOT), tmp_path)
    inst = prov.launch(dataclasses.replace(req, argv=(sys.executable, "-c", TEARDOWN)))
    events = Path(req.env["SPOTWISE_EVENTS_FILE"])
    wait_for(lambda: events.exists() and b'"done"' in events.read_bytes(), "the trial's done")
    wall.at_market(REVOKE_AT - LEAD)  # the notice falls due after the work ended
    assert prov.notices() == []
    assert state_of(prov, inst.instance_id).state is InstanceState.RUNNING
    prov.terminate([inst.instance_id])  # the orchestrator ends the life: billed, not revoked
    final = state_of(prov, inst.instance_id)
    assert (final.state, final.ended_at) == (InstanceState.TERMINATED, REVOKE_AT - LEAD)


def test_a_done_written_after_the_notice_was_due_does_not_hold_it_back(
    prov: LocalProvisioner, market: ReplayMarket, wall: FakeWall, tmp_path: Path
) -> None:
    req = request(offer(market, ZONE_A, Market.SPOT), tmp_path)
    inst = prov.launch(dataclasses.replace(req, argv=(sys.executable, "-c", SLEEPER)))
    wall.at_market(T0 + 330.0)  # the notice was due at T0 + 30
    _done_line(Path(req.env["SPOTWISE_EVENTS_FILE"]), time.time() - 0.1)  # ~T0 + 320
    (notice,) = prov.notices()
    assert (notice.instance_id, notice.deadline) == (inst.instance_id, REVOKE_AT)


def test_a_trial_hung_after_done_is_taken_by_the_market_as_any_other(
    prov: LocalProvisioner, market: ReplayMarket, wall: FakeWall, tmp_path: Path
) -> None:
    prov.done_grace_wall_s = 0.0  # its teardown has lasted longer than the grace
    req = request(offer(market, ZONE_A, Market.SPOT), tmp_path)
    inst = prov.launch(dataclasses.replace(req, argv=(sys.executable, "-c", SLEEPER)))
    _done_line(Path(req.env["SPOTWISE_EVENTS_FILE"]), time.time() - 1.0)  # ~100 market s ago
    wall.at_market(REVOKE_AT - LEAD)
    (notice,) = prov.notices()
    assert notice.instance_id == inst.instance_id
    revoked = wait_for(
        lambda: state_of(prov, inst.instance_id).state is InstanceState.REVOKED, "revocation"
    )
    assert revoked and state_of(prov, inst.instance_id).ended_at == REVOKE_AT


@pytest.mark.parametrize(("reported", "noticed"), [(3, False), (2, True)])
def test_a_report_of_the_last_step_ends_the_work_as_done_does(
    prov: LocalProvisioner,
    market: ReplayMarket,
    wall: FakeWall,
    tmp_path: Path,
    reported: int,
    noticed: bool,
) -> None:
    """The main job's trials checkpoint at their last step between its report and `done`: a
    notice in that save (minutes of market time at 300x) took two completed lives free in one
    benchmark of nine jobs. A report of the last step (SPOTWISE_STEPS) ends the work; one before
    it does not."""
    req = request(offer(market, ZONE_A, Market.SPOT), tmp_path)
    env = {**req.env, "SPOTWISE_STEPS": "3"}
    inst = prov.launch(dataclasses.replace(req, env=env, argv=(sys.executable, "-c", SLEEPER)))
    line = {"type": "report", "step": reported, "metric": 0.9, "time": time.time() - 1.0}
    with open(req.env["SPOTWISE_EVENTS_FILE"], "a") as fh:  # ~100 market s before the notice
        fh.write(json.dumps(line) + "\n")
    wall.at_market(REVOKE_AT - LEAD)
    assert [n.instance_id for n in prov.notices()] == ([inst.instance_id] if noticed else [])


@pytest.mark.parametrize("written_ago", [60.0, 1e9])  # a minute; a bogus time of ~0
def test_the_grace_after_done_runs_from_when_it_was_written(
    prov: LocalProvisioner, market: ReplayMarket, wall: FakeWall, tmp_path: Path, written_ago: float
) -> None:
    """review-ad F1: the line is read only once a notice is due, and the 10 s grace ran from
    that read: a process hung a minute after its `done` (or one whose line says it was written
    at time 0) held its notice back 10 s more. The grace runs from the line's own time."""
    req = request(offer(market, ZONE_A, Market.SPOT), tmp_path)
    inst = prov.launch(dataclasses.replace(req, argv=(sys.executable, "-c", SLEEPER)))
    _done_line(Path(req.env["SPOTWISE_EVENTS_FILE"]), max(time.time() - written_ago, 0.0))
    wall.at_market(REVOKE_AT - LEAD)
    assert [n.instance_id for n in prov.notices()] == [inst.instance_id]
