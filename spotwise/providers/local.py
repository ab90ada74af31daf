"""The local provider: each instance is a child process on this machine, priced and revoked by
the replay market.

An instance stands for one instance of a chosen offer. A spot instance launched in zone z is
revoked when the replayed trace says spot is no longer obtainable in z: the trial first gets a
notice (SIGTERM, ``notice_lead_s`` of market time before the revocation — 120 s for AWS), then
the process group is killed. A spot launch into a zone whose revocation is ``notice_lead_s`` or
less ahead is refused (:class:`~spotwise.errors.CapacityError`) and the market offers that zone
as unavailable meanwhile: the provider does not sell capacity it is reclaiming (the rule of
``spotwise simulate``). No launch is accepted past the trace's end (the market has no data
there). Because a fast market clock can shrink 120 s of market time to a
fraction of a wall second, the notice lasts at least ``notice_floor_wall_s`` wall seconds
(default 1 s) so a trial has time to write its checkpoint; the instance is still billed only up
to the market revocation time.

Trial commands run as argv lists in a new session (never through a shell); the provider signals
every process group in it, and a life ends when the session is empty, not when its first
process exits (:mod:`spotwise.providers.proc_group`: a wrapper's shell dies at the notice while
its trainer, in a group of its own under ``timeout``, still saves; a process that calls
``setsid()`` leaves the life). No trial outlives its orchestrator unnoticed:

* each trial starts through :mod:`spotwise.providers.local_exec`, which on Linux sets
  ``PR_SET_PDEATHSIG`` = SIGKILL (so the trial dies with the orchestrator, even on SIGKILL)
  and then execs the command, keeping its pid (not what the command starts: the signal is
  cleared on fork, so a wrapper's trainer outlives an orchestrator SIGKILLed until
  ``spotwise cancel``; any other end of it runs :meth:`LocalProvisioner.shutdown`);
* before the command runs, the provisioner records its pid, process group and start time in a
  small JSON file (:mod:`spotwise.providers.local_records`, which explains why there), removed
  when the process ends; after a crash, ``spotwise cancel`` kills what is left of the recorded
  sessions with :func:`~spotwise.providers.local_records.reconcile_job` — never a process whose
  start time does not match its record.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from spotwise.errors import CapacityError, ProviderError
from spotwise.providers import event_lines
from spotwise.providers.base import (
    Instance,
    InstanceState,
    LaunchRequest,
    Market,
    Notice,
    NoticeKind,
    is_ours,
)
from spotwise.providers.local_records import MARKER_ENV, records_root, remove_record
from spotwise.providers.local_start import refusal, start_trial
from spotwise.providers.proc_group import Group
from spotwise.providers.replay import MarketClock, ReplayMarket


@dataclass
class _Proc:
    instance: Instance
    popen: subprocess.Popen[bytes] | None
    log: IO[bytes] | None
    events_file: Path | None
    revoke_at: float | None  # market time the provider takes it (spot only)
    notice_at: float | None
    noticed_wall: float | None = None
    kill_wall: float | None = None
    record: Path | None = None  # see local_records; removed once the process has ended
    events_pos: int = 0
    pending: list[Notice] = field(default_factory=list)
    done_pos: int = 0  # how far _read_done has read the events file (progress reads its own way)
    done_market: float | None = None  # market time the trial's work ended (_read_done)
    done_wall: float | None = None  # wall time (epoch) the trial wrote it, as it says
    steps: int | None = None  # its total steps (SPOTWISE_STEPS), if the request says
    group: Group | None = None  # popen's session: the life ends when it is empty


class LocalProvisioner:
    """A Provisioner whose instances are local processes on the replay market's clock."""

    name = "local"

    def __init__(
        self,
        market: ReplayMarket,
        clock: MarketClock,
        *,
        notice_lead_s: float = 120.0,
        notice_floor_wall_s: float = 1.0,
        logs_dir: Path | None = None,
        kill_grace_s: float = 5.0,
        records_dir: Path | None = None,
        done_grace_wall_s: float = 10.0,
    ) -> None:
        self.market = market
        # its offers show a zone being reclaimed as unavailable, as launch refuses it
        market.reclaim_lead_s = max(market.reclaim_lead_s, notice_lead_s)
        self.clock = clock
        self.notice_lead_s = notice_lead_s
        self.notice_floor_wall_s = notice_floor_wall_s
        self.logs_dir = logs_dir
        self.kill_grace_s = kill_grace_s
        self.done_grace_wall_s = done_grace_wall_s  # see _done_before
        self.records_dir = records_dir or records_root()  # where each trial's pid is recorded
        self._procs: dict[str, _Proc] = {}
        self._by_token: dict[str, str] = {}
        self._notices: list[Notice] = []

    # ---- Provisioner -------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> Instance:
        if not is_ours(request.tags):
            raise ProviderError("local: refusing to launch an instance without spotwise tags")
        if request.client_token in self._by_token:  # idempotent, like EC2's ClientToken
            return self._procs[self._by_token[request.client_token]].instance
        offer, now = request.offer, self.clock.now()
        spot = offer.market is Market.SPOT
        why = self.market.refusal(offer.zone, spot, now, self.notice_lead_s)
        if why is not None:  # past the trace's end, or no spot capacity (being reclaimed)
            raise CapacityError(f"local: cannot launch {offer.key}: {why}")
        revoke_at = self.market.next_revocation(offer.zone, now) if spot else None
        instance_id = f"local-{request.client_token}"
        log = self._open_log(instance_id)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTWISE_")}
        env.update(request.env)
        env[MARKER_ENV] = instance_id
        try:
            popen, record = start_trial(request, instance_id, env, log, self.records_dir)
        except ProviderError as e:
            if log is not None:  # the log the job's error points to says why it is empty
                with contextlib.suppress(OSError):  # a full disk: the error says it, not this
                    log.write(f"spotwise: {e}\n".encode())
                with contextlib.suppress(OSError):  # the file is closed even when this fails
                    log.close()
            raise
        notice_at = None if revoke_at is None else revoke_at - self.notice_lead_s
        inst = Instance(
            instance_id,
            offer,
            InstanceState.RUNNING,
            dict(request.tags),
            launched_at=now,
            launch_identity=request.client_token,  # this provider made it for this launch
        )
        events = request.env.get("SPOTWISE_EVENTS_FILE")
        self._procs[instance_id] = _Proc(
            inst, popen, log, Path(events) if events else None, revoke_at, notice_at, record=record,
            group=Group(popen),
        )  # fmt: skip
        with contextlib.suppress(KeyError, ValueError):
            self._procs[instance_id].steps = int(request.env["SPOTWISE_STEPS"])
        self._by_token[request.client_token] = instance_id
        return inst

    def _open_log(self, instance_id: str) -> IO[bytes] | None:
        """The trial's log, opened before anything starts. This machine's shortage there (EMFILE,
        ENOSPC) is a :class:`~spotwise.errors.MachineShortError`, another failure a
        ProviderError: never a bare OSError (a bug to the CLI), and nothing is started."""
        if self.logs_dir is None:
            return None
        path = self.logs_dir / f"{instance_id}.log"
        try:
            self.logs_dir.mkdir(parents=True, exist_ok=True)
            return open(path, "ab")  # closed when the process ends (_close_log)
        except OSError as e:
            raise refusal(f"local: cannot open the log {path}: {e.strerror}", e.errno) from None

    def describe(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        self.poll()
        want = dict(tags or {})
        return [
            p.instance
            for p in self._procs.values()
            if all(p.instance.tags.get(k) == v for k, v in want.items())
        ]

    def terminate(self, instance_ids: Sequence[str]) -> None:
        unknown = [i for i in instance_ids if i not in self._procs]
        if unknown:
            raise ProviderError(
                f"local: refusing to terminate {unknown}: not launched by spotwise here"
            )
        # billing ends with the request, as on AWS ("you stop incurring charges for an
        # instance as soon as its state changes to shutting-down"), not after the wall
        # seconds the trials take to wind down (minutes of market time at 300x): one reading
        # of the clock for every id of the call, taken before any process is signalled
        asked = self.clock.now()
        live = [
            p
            for p in (self._procs[iid] for iid in dict.fromkeys(instance_ids))
            if not p.instance.state.is_terminal()
        ]
        self._stop_processes(live, graceful=True)
        for p in live:
            p.instance.state = InstanceState.TERMINATED
            p.instance.ended_at = asked

    def notices(self) -> list[Notice]:
        self.poll()
        out, self._notices = self._notices, []
        return out

    def progress(self, instance_id: str) -> list[dict[str, object]]:
        p = self._procs.get(instance_id)
        if p is None or p.events_file is None:
            return []
        p.events_pos, out = event_lines.read_new(p.events_file, p.events_pos)
        return out

    # ---- the emulated market ------------------------------------------------------------
    def poll(self) -> None:
        """Deliver due notices and revocations, and notice processes that exited."""
        now, wall = self.clock.now(), time.monotonic()
        for p in self._procs.values():
            inst = p.instance
            if inst.state.is_terminal():
                continue
            # the life's exit: its leader's code, once its whole session is gone (proc_group)
            code = p.group.poll(self.kill_grace_s) if p.group is not None else 0
            # a trial that exited (or ended its work: _done_before) before a poll saw its notice
            # is due gets none: a cloud orchestrator would have seen the exit and ended the
            # life (billed), where the replay's long market passes let the provider take it,
            # free, after the work ended
            exited = code is not None or inst.exit_code is not None
            if (
                not exited
                and p.notice_at is not None
                and p.noticed_wall is None
                and now >= p.notice_at
                and not self._done_before(p, p.notice_at, now)
            ):
                assert p.revoke_at is not None
                p.noticed_wall = wall
                lead_wall = self.clock.wall_seconds(p.revoke_at - now)
                p.kill_wall = wall + max(lead_wall, self.notice_floor_wall_s)
                self._notices.append(
                    Notice(inst.instance_id, NoticeKind.INTERRUPTION, now, p.revoke_at)
                )
                self._signal(p, signal.SIGTERM, p.kill_wall)
            if code is not None and inst.exit_code is None:
                inst.exit_code = code
                self._close_log(p)
            if p.kill_wall is not None and wall >= p.kill_wall:
                self._stop_processes([p], graceful=False)
                inst.state = InstanceState.REVOKED
                inst.ended_at = p.revoke_at

    def _done_before(self, p: _Proc, market_time: float, now: float) -> bool:
        """Whether the trial's work ended before ``market_time`` and it is winding down: it
        reported its last step (``SPOTWISE_STEPS``) or wrote its ``done`` event.

        What a trial does after that (a checkpoint at its last step, the interpreter's teardown,
        torch's above all) lasts a fraction of a wall second: minutes of market time at 300x,
        where a cloud's agent sees the exit in seconds. A notice due in that window would let
        the market take a finished life free, so the end of the work counts as the exit; a
        process still there ``done_grace_wall_s`` after it is hung, and the market takes it as
        any other."""
        if p.done_market is None and p.events_file is not None:
            self._read_done(p, now)
        if p.done_market is None or p.done_wall is None:
            return False
        # the grace runs from when the trial wrote it, not from when it was first read
        # (review-ad F1: read only once a notice was due, an old line got a fresh grace)
        return p.done_market < market_time and time.time() - p.done_wall < self.done_grace_wall_s

    def _read_done(self, p: _Proc, now: float) -> None:
        """Look for the end of the trial's work in what it appended since the last look: its
        ``done``, or a report of its last step."""
        assert p.events_file is not None
        p.done_pos, new = event_lines.read_new(p.events_file, p.done_pos)
        for rec in new:
            step, steps = rec.get("step"), p.steps
            last = isinstance(step, int) and steps is not None and step >= steps
            if rec.get("type") == "done" or (rec.get("type") == "report" and last):
                wall, at = time.time(), rec.get("time")  # the SDK's time.time() then
                p.done_wall = min(float(at), wall) if isinstance(at, int | float) else wall
                p.done_market = now - self.clock.speedup * (wall - p.done_wall)
                return

    def revoke_now(self, instance_id: str) -> None:
        """Bring an instance's revocation forward to now + notice lead (tests, fault injection)."""
        p = self._procs[instance_id]
        now = self.clock.now()
        p.revoke_at = now + self.notice_lead_s
        p.notice_at = now

    def shutdown(self) -> None:
        """Kill every process still running (the orchestrator is leaving), billed to now."""
        asked = self.clock.now()
        live = [p for p in self._procs.values() if not p.instance.state.is_terminal()]
        self._stop_processes(live, graceful=True)
        for p in live:
            p.instance.state = InstanceState.TERMINATED
            p.instance.ended_at = asked

    def _signal(self, p: _Proc, sig: signal.Signals, kill_at: float | None = None) -> None:
        """``sig`` to the trial's session, its leader gone or not, until the session ends."""
        if p.group is not None:
            p.group.signal(sig, kill_at)

    def _stop_processes(self, procs: Sequence[_Proc], graceful: bool) -> None:
        """End ``procs`` together: SIGTERM to all, one kill grace for the batch (not one each),
        then SIGKILL to whatever is left. A session whose leader has exited is still signalled
        and waited for: the life is the whole session."""
        running = [p.group for p in procs if p.group is not None and not p.group.ended]
        if graceful and running:
            for g in running:
                g.signal(signal.SIGTERM)
            deadline = time.monotonic() + self.kill_grace_s
            for g in running:
                g.wait_empty(deadline)
        for g in running:  # SIGKILL to every session first, then wait for each
            g.signal(signal.SIGKILL)
        for g in running:
            g.kill()
        for p in procs:
            if p.popen is not None and p.instance.exit_code is None:
                p.instance.exit_code = p.popen.returncode
            self._close_log(p)

    @staticmethod
    def _close_log(p: _Proc) -> None:
        """The process has ended: close its log and drop its record."""
        if p.log is not None and not p.log.closed:
            p.log.close()
        if p.record is not None:
            remove_record(p.record)
            p.record = None
