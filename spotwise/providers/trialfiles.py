"""The controller's side of a trial's channel: what a provisioner reads back from (and relays to)
the trial's *artifacts* folder, on any :class:`~spotwise.providers.blobs.Blobs` (S3, GCS,
Azure Blob, a shared ``file://`` folder).

The agent on the instance (:mod:`spotwise.providers.trial_agent`) writes there:

* ``events-<attempt>.jsonl`` — the trial's events (``spotwise.sdk`` records), whole lines;
* ``agent-<attempt>.json`` — its status: notices seen, and the exit code once the trial ends.
  The events are uploaded before a status that says the trial exited.

and the provisioner writes

* ``stop-<attempt>`` when the orchestrator asks the trial to stop (it creates the trial's local
  stop file; the agent turns the marker into the instance's one);
* ``control-<attempt>.json`` whenever the content of the trial's local control file (live
  settings such as ``{"checkpoint_every": N}``, see :mod:`spotwise.sdk`) changed since the last
  upload; the agent replaces the instance's control file with it.

:class:`TrialFiles` reads the status first and the events second, so whenever it sees the
exit it has every event. Reads are conditional (the version token of the last read: an ETag,
a generation, a file's identity) and happen at most once per ``poll_s``. A status the agent did
not write well (a notice that is not a record, a time that is not a number, an exit code that
is not an integer) is logged and the bad part skipped. Storage failures are raised as
:class:`~spotwise.errors.ProviderError` by :class:`TrialFiles`; :class:`Tracks`, which holds the
files of every instance a provisioner follows, logs them and reads again at the next poll (a
storage outage must not end the job).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spotwise.errors import ProviderError
from spotwise.providers.base import Instance, Notice, NoticeKind
from spotwise.providers.blobs import Blobs

log = logging.getLogger("spotwise.providers")


@dataclass
class TrialFiles:
    """One instance's view of its trial's files."""

    instance_id: str
    blobs: Blobs
    attempt: str
    stop_file: Path | None = None
    stop_sent: bool = False
    control_file: Path | None = None
    control_sent: bytes | None = None  # the control file's content as last uploaded
    events_pos: int = 0
    events_token: str = ""
    status_token: str = ""
    buffer: list[dict[str, object]] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    notices_read: int = 0  # entries of the status's notice list taken in (good or skipped)
    reported: int = 0
    exit_code: int | None = None
    heard: bool = False  # a status of the agent's was read (the controller's "no word" limit)
    ended: bool = False  # the instance is gone: nothing more will be written
    last_sync: float = -1e18

    @classmethod
    def at(cls, instance_id: str, uri: str, attempt: str) -> TrialFiles:
        """The files of ``attempt`` under the artifacts URI ``uri`` (any scheme
        :func:`~spotwise.providers.blobs_open.open_blobs` knows)."""
        from spotwise.providers.blobs_open import open_blobs

        return cls(instance_id, open_blobs(uri, channel=True), attempt)

    def interrupted(self) -> bool:
        return any(n.kind is NoticeKind.INTERRUPTION for n in self.notices)

    def exit_to_report(self) -> int | None:
        """The trial's exit code once every notice read with it has been handed out by
        :meth:`take_notices` (None before): an exit read together with a notice must reach the
        orchestrator after the notice, or it would take a preemption for a crash."""
        return self.exit_code if self.reported >= len(self.notices) else None

    def take_events(self) -> list[dict[str, object]]:
        out, self.buffer = self.buffer, []
        return out

    def take_notices(self) -> list[Notice]:
        """New notices: interruptions (with the provider's deadline) and rebalance
        recommendations (AWS only: kind ``REBALANCE``, deadline ``inf``, nothing is taken).
        The agent acts on a rebalance (option ``rebalance: stop`` SIGTERMs the trial, which
        checkpoints and exits); the orchestrator needs the notice to tell that exit from a
        crash."""
        out = list(self.notices[self.reported :])
        self.reported = len(self.notices)
        return out

    def sync(self, poll_s: float, now: float, force: bool = False) -> bool:
        """Relay a stop request and changed live settings, then read the agent's status and
        new events (at most once per ``poll_s`` unless ``force``); False when it was not due
        (nothing was read)."""
        if not force and time.monotonic() - self.last_sync < poll_s:
            return False
        self.last_sync = time.monotonic()
        if self.stop_file is not None and not self.stop_sent and self.stop_file.exists():
            self.blobs.put(f"stop-{self.attempt}", b"")
            self.stop_sent = True
        self._relay_control()
        # the status first, the events second; neither is taken in unless both reads worked,
        # so an exit is never seen without the events uploaded before it
        status, status_token = self.blobs.get(f"agent-{self.attempt}.json", self.status_token)
        events, events_token = self.blobs.get(f"events-{self.attempt}.jsonl", self.events_token)
        self.status_token, self.events_token = status_token, events_token
        if status is not None:
            self.heard = True
            self._read_status(status, now)
        if events is not None and len(events) > self.events_pos:
            new, self.events_pos = events[self.events_pos :], len(events)
            for line in new.splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(rec, dict):
                    self.buffer.append(rec)
        return True

    def _relay_control(self) -> None:
        """Upload the local control file when its content differs from the last upload (the
        orchestrator replaces it atomically, so a read sees a whole file)."""
        if self.control_file is None:
            return
        try:
            data = self.control_file.read_bytes()
        except OSError:  # not written: nothing to relay
            return
        if data == self.control_sent:
            return
        self.blobs.put(f"control-{self.attempt}.json", data, "application/json")
        self.control_sent = data

    def _read_status(self, raw: bytes, now: float) -> None:
        try:
            doc = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            log.warning("%s: the agent's status is not JSON; ignored", self.instance_id)
            return
        if not isinstance(doc, dict):
            log.warning("%s: the agent's status is not a JSON object; ignored", self.instance_id)
            return
        entries = doc.get("notices", [])
        if not isinstance(entries, list):
            log.warning("%s: the agent's notices are not a list; ignored", self.instance_id)
            entries = []
        for entry in entries[self.notices_read :]:
            self.notices_read += 1
            notice = self._notice(entry, now)
            if notice is None:
                log.warning(
                    "%s: malformed notice in the agent's status skipped: %.200r",
                    self.instance_id,
                    entry,
                )
            else:
                self.notices.append(notice)
        code = doc.get("exit_code")
        if doc.get("state") == "exited" and code is not None:
            if isinstance(code, int) and not isinstance(code, bool):
                self.exit_code = code
            else:
                log.warning(
                    "%s: the agent's exit code %.50r is not an integer; ignored",
                    self.instance_id,
                    code,
                )

    def _notice(self, entry: Any, now: float) -> Notice | None:
        """One notice of the agent's status, or None when it is not a well-formed one: a record
        of kind ``interruption`` or ``rebalance`` whose ``received_at`` (missing: ``now``) and
        ``deadline`` (missing: none, ``inf``; a rebalance has none) are numbers."""
        if not isinstance(entry, dict):
            return None
        kind = entry.get("kind")
        if kind not in ("interruption", "rebalance"):
            return None
        received = _number(entry.get("received_at"), now)
        when = _number(entry.get("deadline"), math.inf)
        if received is None or when is None:
            return None
        notice_kind = NoticeKind.INTERRUPTION if kind == "interruption" else NoticeKind.REBALANCE
        return Notice(self.instance_id, notice_kind, received, when)


def _number(value: Any, missing: float) -> float | None:
    """``value`` as a float (``missing`` for None); None when it is not a number (NaN, a
    string, a boolean)."""
    if value is None:
        return missing
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    out = float(value)
    return None if math.isnan(out) else out


class Tracks:
    """The channels of one provisioner's instances: instance id → :class:`TrialFiles`, each
    read at most once per ``poll_s``."""

    WARN_EVERY_S = 60.0  # a read that keeps failing is said again this often, with a count

    def __init__(self, poll_s: float, clock: Callable[[], float] = time.time) -> None:
        self.poll_s = poll_s
        self.clock = clock
        self.by_id: dict[str, TrialFiles] = {}
        # instances whose last read failed → [failed reads, monotonic time of the last warning]
        self.failing: dict[str, list[float]] = {}

    def add(
        self, instance_id: str, uri: str, attempt: str, env: Mapping[str, str] | None = None
    ) -> TrialFiles | None:
        """Track ``instance_id``'s trial at the artifacts URI (kept if already tracked); with
        the launch ``env``, relay its local stop and control files. None for a URI that cannot
        be opened (logged)."""
        track = self.by_id.get(instance_id)
        if track is None:
            try:
                track = TrialFiles.at(instance_id, uri, attempt)
            except ProviderError as e:
                log.warning("cannot follow the trial of %s: %s", instance_id, e)
                return None
            self.by_id[instance_id] = track
        if env and env.get("SPOTWISE_STOP_FILE"):
            track.stop_file = Path(env["SPOTWISE_STOP_FILE"])
        if env and env.get("SPOTWISE_CONTROL_FILE"):
            track.control_file = Path(env["SPOTWISE_CONTROL_FILE"])
        return track

    def sync(self, track: TrialFiles, force: bool = False) -> bool:
        """Read ``track`` (see :meth:`TrialFiles.sync`); False when the storage failed (or a
        read not due yet follows one that failed). A failure is logged once, then at most once
        every ``WARN_EVERY_S`` with the count of failed reads, and the read is tried again at
        the next poll; the first read that works again says so."""
        iid = track.instance_id
        try:
            read = track.sync(self.poll_s, self.clock(), force)
        except ProviderError as e:
            failed = self.failing.get(iid)
            now = time.monotonic()
            if failed is None:
                self.failing[iid] = [1, now]
                log.warning(
                    "cannot read the trial files of %s (trying again at each poll): %s", iid, e
                )
            else:
                failed[0] += 1
                if now - failed[1] >= self.WARN_EVERY_S:
                    failed[1] = now
                    log.warning(
                        "still cannot read the trial files of %s (%d failed reads): %s",
                        iid,
                        failed[0],
                        e,
                    )
            return False
        if not read:  # not due: nothing was read, so nothing recovered either
            return iid not in self.failing
        failed = self.failing.pop(iid, None)
        if failed is not None:
            log.warning(
                "the trial files of %s can be read again (after %d failed reads)",
                iid,
                failed[0],
            )
        return True

    def notices(self) -> list[Notice]:
        """New notices of every trial still running."""
        out: list[Notice] = []
        for track in list(self.by_id.values()):
            if track.exit_code is None and not track.ended:
                self.sync(track)
            out += track.take_notices()
        return out

    def progress(self, instance_id: str) -> list[dict[str, object]]:
        track = self.by_id.get(instance_id)
        if track is None:
            return []
        self.sync(track)
        return track.take_events()

    def interrupted(self, instance_id: str) -> bool:
        track = self.by_id.get(instance_id)
        return track is not None and track.interrupted()

    def heard(self, instance_id: str) -> bool:
        """Whether a status of ``instance_id``'s agent has been read: its agent started (what
        :mod:`spotwise.planner.no_word` asks through a provisioner's ``agent_heard``)."""
        track = self.by_id.get(instance_id)
        return track is not None and track.heard

    def observe(self, inst: Instance) -> None:
        """Give a described instance its trial's exit code; read once more when it has ended
        (nothing is written after that; a read that failed is tried again at the next
        describe). The code is withheld while a notice read with it has not been handed out
        by :meth:`notices` yet: the orchestrator must hear of the notice first, or it would
        take the trial's exit for a crash."""
        track = self.by_id.get(inst.instance_id)
        if track is None:
            return
        if not track.ended:
            terminal = inst.state.is_terminal()
            track.ended = self.sync(track, force=terminal) and terminal
        inst.exit_code = track.exit_to_report()
