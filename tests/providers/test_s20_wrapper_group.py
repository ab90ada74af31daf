"""review-ak F2: a trial whose command is a wrapper (a shell that runs the trainer without
``exec``) lives as long as its process group, not its first process. The notice's SIGTERM
kills the shell at once while the trainer (same group) still saves: the local provider must
not report the life ended then (the planner relaunched beside it), and must still kill the
group at the revocation, a terminate or a shutdown (it skipped groups whose leader had gone,
so the trainer outlived the job). Real processes; the shell is a real bash."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from test_local import (
    LEAD,
    REVOKE_AT,
    SPEEDUP,
    T0,
    TICKS,
    ZONE_A,
    ZONE_B,
    FakeWall,
    offer,
    state_of,
    wait_for,
)

from spotwise.providers.base import Instance, InstanceState, LaunchRequest, Market, our_tags
from spotwise.providers.local import LocalProvisioner
from spotwise.providers.local_records import process_start, read_records
from spotwise.providers.replay import MarketClock, ReplayMarket
from spotwise.traces import TraceSet

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None or not sys.platform.startswith("linux"),
    reason="a bash wrapper and /proc (zombies told from live processes)",
)
GRACE = 0.5  # the provider's kill grace
FLOOR = 0.6  # the shortest notice, wall seconds: the revocation (kill) comes this long after it

# the trainer: writes its pid once its SIGTERM handler is set; a SIGTERM writes "<pid>.term"
# and is otherwise ignored (a save that outlasts any deadline): only SIGKILL ends it
TRAINER = """
import os, signal, sys, time
pidfile = sys.argv[1]
signal.signal(signal.SIGTERM, lambda s, f: open(pidfile + ".term", "w").close())
open(pidfile + ".tmp", "w").write(str(os.getpid()))
os.replace(pidfile + ".tmp", pidfile)
while True:
    time.sleep(0.02)
"""
# the wrapper: runs the trainer as a child (no exec: a command follows it), as run.sh did
WRAPPER = '"$0" -c "$1" "$2"; echo wrapper end'


@pytest.fixture
def market() -> ReplayMarket:
    available = np.ones((2, TICKS), dtype=bool)
    available[0, 5:] = False  # zone A's spot is revoked at REVOKE_AT
    price = np.vstack([np.full(TICKS, 1.0), np.full(TICKS, 2.0)])
    return ReplayMarket(
        TraceSet(
            [ZONE_A, ZONE_B],
            T0 + 10.0 * np.arange(TICKS),
            available,
            price,
            instance_type="p3.2xlarge",
            on_demand_price=5.0,
            gap_seconds=10.0,
        )
    )


@pytest.fixture
def wall() -> FakeWall:
    return FakeWall()


@pytest.fixture
def prov(market: ReplayMarket, wall: FakeWall, tmp_path: Path) -> Iterator[LocalProvisioner]:
    p = LocalProvisioner(
        market, MarketClock(T0, SPEEDUP, wall=wall), notice_lead_s=LEAD,
        notice_floor_wall_s=FLOOR, kill_grace_s=GRACE, records_dir=tmp_path / "records",
    )  # fmt: skip
    yield p
    p.shutdown()
    for pidfile in tmp_path.glob("trainer-*"):  # a failed test leaves no trainer running
        if pidfile.suffix == "":  # not its .term file
            kill_if_alive(int(pidfile.read_text()))


def launch(
    prov: LocalProvisioner, market: ReplayMarket, tmp_path: Path, zone: str, kind: Market
) -> tuple[Instance, int, int, Path]:
    """A wrapper around TRAINER; returns (instance, wrapper pid, trainer pid, pid file)."""
    token = uuid.uuid4().hex[:12]
    pidfile = tmp_path / f"trainer-{token}"  # the fixture reads it
    argv = ("bash", "-c", WRAPPER, sys.executable, TRAINER, str(pidfile))
    env = {"SPOTWISE_EVENTS_FILE": str(tmp_path / f"events-{token}.jsonl")}
    tags = our_tags("job-wrap", "trial-1", token)
    inst = prov.launch(LaunchRequest(offer(market, zone, kind), argv, env, tags, token, ""))
    trainer = int(wait_for(lambda: pidfile.exists() and pidfile.read_text(), "the trainer"))
    popen = prov._procs[inst.instance_id].popen
    assert popen is not None and trainer != popen.pid
    return inst, popen.pid, trainer, pidfile


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: it has ended and waits to be reaped)."""
    return process_start(pid) is not None


def kill_if_alive(pid: int) -> None:
    """SIGKILL ``pid`` if it is still this test's trainer (its command line says so)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return
    if alive(pid) and TRAINER.encode() in cmdline:
        os.kill(pid, signal.SIGKILL)


def test_a_notice_ends_the_life_when_the_group_is_empty_not_when_the_wrapper_dies(
    prov: LocalProvisioner, market: ReplayMarket, wall: FakeWall, tmp_path: Path
) -> None:
    inst, wrapper, trainer, pidfile = launch(prov, market, tmp_path, ZONE_A, Market.SPOT)
    wall.at_market(REVOKE_AT - LEAD)
    noticed = time.monotonic()
    (notice,) = prov.notices()
    assert notice.instance_id == inst.instance_id
    wait_for(lambda: Path(f"{pidfile}.term").exists(), "the trainer's SIGTERM handler")
    wait_for(lambda: not alive(wrapper), "the wrapper to die of the SIGTERM")
    # the wrapper is gone, the trainer still saves: the life is not over (HEAD: exit -15 here)
    state = state_of(prov, inst.instance_id)
    assert (state.state, state.exit_code) == (InstanceState.RUNNING, None)
    assert alive(trainer) and read_records(tmp_path / "records", "job-wrap") != []

    revoked = wait_for(
        lambda: state_of(prov, inst.instance_id).state is InstanceState.REVOKED, "revocation"
    )
    assert revoked and time.monotonic() - noticed >= FLOOR
    final = state_of(prov, inst.instance_id)
    assert final.exit_code == -signal.SIGTERM  # the first process's code: the shell's
    assert final.ended_at == REVOKE_AT
    assert not alive(trainer)  # killed with its group at the revocation (HEAD: it ran on)
    assert read_records(tmp_path / "records", "job-wrap") == []


def test_a_wrapper_that_dies_alone_has_its_group_stopped_within_the_grace(
    prov: LocalProvisioner, market: ReplayMarket, tmp_path: Path
) -> None:
    """The shell is killed on its own (no notice, no stop): what it left in its group is asked
    to go and killed ``kill_grace_s`` later; only then is the exit reported."""
    inst, wrapper, trainer, pidfile = launch(prov, market, tmp_path, ZONE_B, Market.ON_DEMAND)
    os.kill(wrapper, signal.SIGKILL)
    wait_for(lambda: not alive(wrapper), "the wrapper to die")
    left = time.monotonic()
    assert state_of(prov, inst.instance_id).exit_code is None  # the trainer runs (HEAD: -9)
    wait_for(lambda: Path(f"{pidfile}.term").exists(), "the rest of the group to be asked")
    code = wait_for(lambda: state_of(prov, inst.instance_id).exit_code, "the group to end")
    assert code == -signal.SIGKILL and time.monotonic() - left >= GRACE
    assert not alive(trainer)


@pytest.mark.parametrize("how", ["terminate", "shutdown"])
def test_terminate_and_shutdown_kill_the_group_of_a_wrapper_already_gone(
    prov: LocalProvisioner, market: ReplayMarket, tmp_path: Path, how: str
) -> None:
    inst, wrapper, trainer, _ = launch(prov, market, tmp_path, ZONE_B, Market.ON_DEMAND)
    os.kill(wrapper, signal.SIGKILL)
    wait_for(lambda: not alive(wrapper), "the wrapper to die")
    prov.terminate([inst.instance_id]) if how == "terminate" else prov.shutdown()
    final = state_of(prov, inst.instance_id)
    assert (final.state, final.exit_code) == (InstanceState.TERMINATED, -signal.SIGKILL)
    assert not alive(trainer)  # HEAD: the leader was gone, so nothing was signalled


def test_a_wrapper_whose_trainer_finished_well_exits_with_its_own_code(
    prov: LocalProvisioner, market: ReplayMarket, tmp_path: Path
) -> None:
    argv = ("bash", "-c", '"$0" -c "$1"; exit 0', sys.executable, "import time; time.sleep(0.2)")
    (o,) = market.offers(at=T0, zones=[ZONE_B], market=Market.ON_DEMAND)
    inst = prov.launch(LaunchRequest(o, argv, {}, our_tags("job-wrap", "t", "tok"), "tok", ""))
    code = wait_for(lambda: state_of(prov, inst.instance_id).exit_code is not None, "the exit")
    assert code and state_of(prov, inst.instance_id).exit_code == 0
    assert read_records(tmp_path / "records", "job-wrap") == []
