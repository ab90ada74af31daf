"""The local provisioner ends many instances at once: each is billed up to the moment the stop
was asked, and slow-to-exit trials get one kill grace together, not one each.

With a fast market clock every wall second of wind-down is minutes of market time, so billing
an instance after waiting for the ones before it would overspend the budget (it did: four
budget-stopped lives were billed 1147 to 2705 market seconds for one request)."""

from __future__ import annotations

import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spotwise.providers.base import Instance, InstanceState, LaunchRequest, Market, our_tags
from spotwise.providers.local import LocalProvisioner
from spotwise.providers.replay import MarketClock, ReplayMarket
from spotwise.traces import TraceSet

T0 = 1_700_000_000.0
GAP = 10.0
TICKS = 40
ZONE = "us-east-1b"
SPEEDUP = 300.0  # as in the reviewer's job: one wall second is five market minutes
GRACE = 1.0  # kill grace, wall seconds
N = 4
WAIT = 60.0  # generous: the machine is small and shared

# ignores SIGTERM: only the SIGKILL after the grace ends it
STUBBORN = """
import os, signal, time
signal.signal(signal.SIGTERM, lambda signum, frame: None)
open(os.environ["SPOTWISE_READY_FILE"], "w").close()
while True:
    time.sleep(0.05)
"""


class RecordingClock(MarketClock):
    """The market clock on real wall time, keeping every reading it gave."""

    def __init__(self) -> None:
        super().__init__(T0, SPEEDUP)
        self.readings: list[float] = []

    def now(self) -> float:
        value = super().now()
        self.readings.append(value)
        return value


@pytest.fixture
def clock() -> RecordingClock:
    return RecordingClock()


@pytest.fixture
def prov(clock: RecordingClock, tmp_path: Path) -> Iterator[LocalProvisioner]:
    available = np.ones((1, TICKS), dtype=bool)
    traces = TraceSet(
        [ZONE], T0 + GAP * np.arange(TICKS), available, np.full((1, TICKS), 1.0),
        instance_type="p3.2xlarge", on_demand_price=5.0, gap_seconds=GAP,
    )  # fmt: skip
    p = LocalProvisioner(
        ReplayMarket(traces), clock, logs_dir=tmp_path / "logs", kill_grace_s=GRACE,
        records_dir=tmp_path / "records",
    )  # fmt: skip
    yield p
    p.shutdown()


def wait_for(predicate: Callable[[], Any], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {WAIT:.0f} s waiting for {what}")
        time.sleep(0.05)


def launch_stubborn(prov: LocalProvisioner, tmp_path: Path, n: int) -> list[Instance]:
    (o,) = prov.market.offers(at=T0, zones=[ZONE], market=Market.ON_DEMAND)
    ready: list[Path] = []
    out = []
    for _ in range(n):
        token = uuid.uuid4().hex[:12]
        ready.append(tmp_path / f"ready-{token}")
        env = {"SPOTWISE_READY_FILE": str(ready[-1])}
        req = LaunchRequest(
            o, (sys.executable, "-c", STUBBORN), env, our_tags("job-1", "trial-1", token), token,
            str(tmp_path),
        )  # fmt: skip
        out.append(prov.launch(req))
    # every child has its SIGTERM handler in place before anything is stopped
    wait_for(lambda: all(f.exists() for f in ready), "the children to start")
    return out


def ended(prov: LocalProvisioner) -> list[Instance]:
    return sorted(prov.describe(), key=lambda i: i.instance_id)


def test_terminate_bills_every_id_to_the_request_and_waits_one_grace(
    prov: LocalProvisioner, clock: RecordingClock, tmp_path: Path
) -> None:
    insts = launch_stubborn(prov, tmp_path, N)
    clock.readings.clear()
    started = time.monotonic()
    prov.terminate([i.instance_id for i in insts])
    took = time.monotonic() - started
    asked = clock.readings[0]  # the clock's reading when the stop was asked
    finals = ended(prov)
    assert [i.state for i in finals] == [InstanceState.TERMINATED] * N
    assert [i.ended_at for i in finals] == [asked] * N  # exact: not one grace later per id
    assert [i.exit_code for i in finals] == [-signal.SIGKILL] * N  # killed after the grace
    # one grace for the batch (the old code took one per process: N seconds or more)
    assert GRACE <= took < GRACE + 1.5, f"terminate took {took:.2f} s for {N} processes"
    assert [f for f in (tmp_path / "records").rglob("*") if f.is_file()] == []  # records dropped


def test_shutdown_bills_every_instance_to_the_same_moment(
    prov: LocalProvisioner, clock: RecordingClock, tmp_path: Path
) -> None:
    launch_stubborn(prov, tmp_path, N)
    clock.readings.clear()
    started = time.monotonic()
    prov.shutdown()
    took = time.monotonic() - started
    finals = ended(prov)
    assert [i.ended_at for i in finals] == [clock.readings[0]] * N
    assert [i.state for i in finals] == [InstanceState.TERMINATED] * N
    assert took < GRACE + 1.5, f"shutdown took {took:.2f} s for {N} processes"
