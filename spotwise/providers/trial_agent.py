"""The cloud-neutral trial agent: what runs a trial on a cloud instance and keeps its channel.

:class:`TrialAgent` runs the trial command (an argv list, never a shell) with the
``SPOTWISE_*`` environment of its launch, plus the instance-local paths it owns:
``SPOTWISE_EVENTS_FILE``, ``SPOTWISE_STOP_FILE`` and ``SPOTWISE_CONTROL_FILE`` under
``<state_dir>/<job>/<trial>/`` (whatever the controller's launch env said about those is
overridden: they are the controller's paths). A leading ``python``/``python3`` becomes this
interpreter. Every ``poll_s`` seconds it

* asks its *notice watcher* (a callable returning new notices,
  ``{"kind": "interruption" | "rebalance", "received_at", "deadline", ...}``) — IMDSv2 on EC2
  (:mod:`~spotwise.providers.aws_agent`), ``instance/preempted`` on GCE
  (:mod:`~spotwise.providers.gcp_agent`), Scheduled Events on Azure
  (:mod:`~spotwise.providers.azure_agent`). A notice is written to the status at once and
  turned into SIGTERM for the trial's session — the SDK's contract: checkpoint and exit
  (a rebalance only with ``rebalance: stop``) — and into its stop file (a handler set over the
  SDK's can take SIGTERM away, not the file); SIGKILL follows ``kill_grace_s`` later;
* takes the trial as exited when its whole session is gone, not its first process
  (:mod:`~spotwise.providers.proc_group`: a wrapper script's shell dies at the notice while
  the trainer it started, in a group of its own under ``timeout``, still saves; a process
  that calls ``setsid()`` leaves the trial); the exit code is the first process's;
* relays a stop request: when ``stop-<attempt>`` appears in the artifacts folder the local
  stop file is created;
* relays live settings: when ``control-<attempt>.json`` is new or changed (a conditional read
  on its last version token) the trial's control file is replaced with it atomically;
* syncs the trial's events file to ``events-<attempt>.jsonl`` (whole lines, every ``sync_s``),
  and its own status (notices seen, exit code) to ``agent-<attempt>.json``. The events are
  always uploaded before a status that says the trial exited, so a reader who sees the exit has
  every event;
* keeps the trial's output (stdout and stderr together, in ``output-<attempt>.log`` beside its
  events file on the instance), copies it to the agent's own stdout (the agent's log) and
  uploads its last ``OUTPUT_TAIL_BYTES`` to ``output-<attempt>.log`` in the artifacts folder:
  every ``OUTPUT_SYNC_S`` while it grows, and before the status that says the trial exited
  (the controller fetches it into the job's ``logs`` folder and quotes its last line when the
  trial failed). It is the trial's own output: the agent adds nothing to it.

The artifacts folder is any :class:`~spotwise.providers.blobs.Blobs` (S3, GCS, Azure Blob, a
shared ``file://`` folder); the controller reads it with
:class:`~spotwise.providers.trialfiles.TrialFiles`. When the agent itself gets SIGTERM (the
machine is going down) it SIGTERMs the trial, waits up to ``kill_grace_s``, and uploads what
the trial wrote. ``shutdown_after_s`` after the trial ended or could not start (``< 0``: never)
it powers the machine off, so a lost controller cannot leave it running. An end it could not
upload is retried for ``FINAL_TRIES`` polls; if that fails too the machine is powered off at
once: the controller cannot learn the end any other way, and it takes an instance that ended
without an exit code for a failed attempt (waiting ``shutdown_after_s`` would only bill the
idle machine and hold the job). Storage failures are logged and retried at the next poll;
they never stop the trial.

Beside it: :mod:`~spotwise.providers.trial_config` (the :class:`TrialConfig` it runs, and the
controller's :func:`instance_argv` / :func:`instance_env`, re-exported here) and
:mod:`~spotwise.providers.trial_output` (reading the trial's output file).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from spotwise.errors import ProviderError
from spotwise.providers.blobs import Blobs
from spotwise.providers.proc_group import Group
from spotwise.providers.trial_config import (  # re-exported: the controller imports them here
    LOCAL_PATHS,  # noqa: F401 (re-exported)
    TrialConfig,
    instance_argv,  # noqa: F401 (re-exported)
    instance_env,  # noqa: F401 (re-exported)
)
from spotwise.providers.trial_output import echo_since, output_tail

log = logging.getLogger("spotwise.agent")

NoticeWatcher = Callable[[], list[dict[str, Any]]]
FINAL_TRIES = 30  # polls spent retrying the final upload before giving up
OUTPUT_TAIL_BYTES = 64 * 1024  # the end of the trial's output uploaded for the controller
OUTPUT_SYNC_S = 30.0  # a running trial's output tail is uploaded at most this often
OUTPUT_CONTENT_TYPE = "text/plain; charset=utf-8"


class TrialAgent:
    """Runs one trial attempt and keeps its channel (see the module docstring)."""

    def __init__(
        self,
        cfg: TrialConfig,
        blobs: Blobs,
        watch: NoticeWatcher,
        *,
        on_notice: Callable[[dict[str, Any]], object] | None = None,
        scrub_env: Sequence[str] = (),
    ) -> None:
        self.cfg = cfg
        self.blobs = blobs
        self.watch = watch
        self.on_notice = on_notice
        self.scrub_env = tuple(scrub_env)  # the agent's own variables, not the trial's
        base = Path(cfg.state_dir or Path.home() / ".spotwise-agent")
        self.dir = base / cfg.job_id / cfg.trial_id
        self.events = self.dir / f"events-{cfg.attempt}.jsonl"
        self.stop_file = self.dir / f"stop-{cfg.attempt}"
        self.control_file = self.dir / f"control-{cfg.attempt}.json"
        self.output = self.dir / f"output-{cfg.attempt}.log"  # the trial's stdout and stderr
        self.status: dict[str, Any] = {
            "launch_id": cfg.launch_id,
            "attempt": cfg.attempt,
            "state": "starting",
            "exit_code": None,
            "notices": [],
            "started_at": time.time(),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.group: Group | None = None  # proc's session: the trial is all of it
        self._uploaded_size = -1
        self._last_sync = 0.0
        self._term_at: float | None = None
        self._stop_relayed = False
        self._control_token = ""
        self._shutting_down = False
        self._final_tries = 0
        self._ended_at: float | None = None  # when the trial was first seen to have exited
        self._start_reported = False  # the status of a trial that could not start was written
        self._end_reported = False  # the status that says the trial exited was written
        self._echoed = 0  # bytes of the output copied to the agent's own stdout
        self._output_sent = -1  # the output's size at its last upload
        self._output_sync = -1e18  # monotonic time of the last output upload

    # ---- the channel --------------------------------------------------------------------
    def put_status(self) -> None:
        self.status["updated_at"] = time.time()
        body = json.dumps(self.status, sort_keys=True).encode()
        self.blobs.put(f"agent-{self.cfg.attempt}.json", body, "application/json")

    def sync_events(self, force: bool = False) -> None:
        if not self.events.exists():
            return
        data = self.events.read_bytes()
        end = data.rfind(b"\n") + 1  # whole lines only
        if end == self._uploaded_size and not force:
            return
        name = f"events-{self.cfg.attempt}.jsonl"
        self.blobs.put(name, data[:end], "application/x-ndjson")
        self._uploaded_size = end
        self._last_sync = time.monotonic()

    def output_tail(self) -> bytes:
        """The last ``OUTPUT_TAIL_BYTES`` of the trial's output, from a line start; a first line
        says how much was left out."""
        return output_tail(self.output, OUTPUT_TAIL_BYTES)

    def sync_output(self, force: bool = False) -> None:
        """Upload the output's tail when it grew, at most every ``OUTPUT_SYNC_S`` unless
        ``force`` (nothing while the trial has printed nothing)."""
        try:
            size = self.output.stat().st_size
        except OSError:
            return
        if size in (0, self._output_sent):
            return
        if not force and time.monotonic() - self._output_sync < OUTPUT_SYNC_S:
            return
        self._output_sync = time.monotonic()  # a failed upload too: tried again in a while
        self.blobs.put(f"output-{self.cfg.attempt}.log", self.output_tail(), OUTPUT_CONTENT_TYPE)
        self._output_sent = size

    def echo_output(self) -> None:
        """Copy what the trial printed since the last call to the agent's stdout (its log)."""
        self._echoed = echo_since(self.output, self._echoed)

    def stop_requested(self) -> bool:
        try:
            return self.blobs.exists(f"stop-{self.cfg.attempt}")
        except ProviderError as e:
            log.warning("cannot read the stop marker: %s", e)
            return False

    def relay_control(self) -> bool:
        """Replace the trial's control file with ``control-<attempt>.json`` when that is new or
        changed (a conditional read on the last version token); True when the file was
        written."""
        try:
            data, token = self.blobs.get(f"control-{self.cfg.attempt}.json", self._control_token)
        except ProviderError as e:
            log.warning("cannot read the control file: %s", e)
            return False
        if data is None:
            return False
        tmp = self.control_file.with_name(f".{self.control_file.name}.tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, self.control_file)  # the trial sees the old file or the new one
        except OSError as e:  # the old token is kept: fetched and tried again next poll
            log.warning("cannot write the control file: %s", e)
            return False
        self._control_token = token
        log.info("control file updated: %s", data[:200].decode(errors="replace"))
        return True

    def _try(self, what: str, fn: Callable[[], None]) -> bool:
        try:
            fn()
        except ProviderError as e:
            log.warning("cannot %s: %s", what, e)
            return False
        return True

    # ---- the trial ----------------------------------------------------------------------
    def start(self) -> None:
        """Start the trial; a failure before it runs (a program that is not there, an ``env``
        the OS refuses: a name with '=', a NUL byte; a folder that cannot be made) is written
        as its end with exit code 127, and :meth:`run` powers the machine off as after any
        trial (review-at AT4: a ValueError killed the agent with no status and no power-off,
        billing the instance until the job's budget, deadline or a cancel)."""
        try:
            self._start()
        except Exception as e:  # anything: the controller must hear of it, the machine must stop
            first = (str(e).strip().splitlines() or [""])[0]
            what = f"{e}" if isinstance(e, OSError) else f"{type(e).__name__}: {first}"
            program = (self.cfg.argv or ["?"])[0]
            program = sys.executable if program in ("python", "python3") else program
            why = f"cannot start {program!r}: {what}"
            log.warning("%s", why)
            self.proc = None
            self.status.update(state="exited", exit_code=127, error=why)
            self._start_reported = self._try("write the status", self.put_status)

    def _start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            **self.cfg.env,
            "SPOTWISE_EVENTS_FILE": str(self.events),
            "SPOTWISE_STOP_FILE": str(self.stop_file),
            "SPOTWISE_CONTROL_FILE": str(self.control_file),
        }
        for name in self.scrub_env:
            env.pop(name, None)
        argv = [
            sys.executable if i == 0 and a in ("python", "python3") else a
            for i, a in enumerate(self.cfg.argv)
        ]
        cwd = self.cfg.workdir if self.cfg.workdir and Path(self.cfg.workdir).is_dir() else None
        if self.cfg.workdir and cwd is None:
            log.warning(
                "workdir %s does not exist on this instance; running in %s",
                self.cfg.workdir,
                os.getcwd(),
            )
        log.info("starting trial %s attempt %s: %s", self.cfg.trial_id, self.cfg.attempt, argv)
        with open(self.output, "ab") as out:  # the trial keeps its own handle
            self.proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.group = Group(self.proc)
        log.info("trial pid %d", self.proc.pid)  # the instance emulator reads this line
        log.info("trial output in %s (copied below)", self.output)
        self.status.update(state="running", pid=self.proc.pid)
        self._try("write the status", self.put_status)

    def signal_trial(self, sig: signal.Signals) -> None:
        """``sig`` to every process group of the trial's session, its first process gone or
        not, until the whole session has ended."""
        if self.group is not None:
            self.group.signal(sig)

    def check_notices(self) -> None:
        for notice in self.watch():
            log.info("notice: %s", notice)
            # the trial first: its checkpoint races the deadline (30 s on GCE and Azure), and a
            # slow or retried upload below must not eat into that time
            if notice.get("kind") == "interruption" or self.cfg.rebalance == "stop":
                self.signal_trial(signal.SIGTERM)
                # and the stop file, which no handler can take away from the SDK (a
                # framework's over the SDK's), without the orchestrator's round trip
                with contextlib.suppress(OSError):  # no trial folder: nothing started to stop
                    self.stop_file.touch()
                self._term_at = time.monotonic()
                if self.group is not None:  # what the first process leaves has the same time
                    self.group.end_by(self._term_at + self.cfg.kill_grace_s)
            self.status["notices"].append(notice)
            if self.on_notice is not None:
                self.on_notice(notice)
            self._try("write the status", self.put_status)  # the controller hears of it at once

    def step(self) -> bool:
        """One poll; False once the trial has exited and everything is uploaded."""
        assert self.group is not None
        self.check_notices()
        if not self._stop_relayed and self.stop_requested():
            self.stop_file.touch()
            self._stop_relayed = True
            log.info("stop requested by the orchestrator")
        self.relay_control()
        if self._term_at is not None and time.monotonic() - self._term_at > self.cfg.kill_grace_s:
            self.signal_trial(signal.SIGKILL)
        code = self.group.poll(self.cfg.kill_grace_s)  # the first process's, once all are gone
        self.echo_output()
        if code is not None:
            if self._ended_at is None:
                self._ended_at = time.time()
            # the output (not required: its upload failing must not hold the exit back), then
            # the events, then the exit: the status says "exited" only once every event is
            # uploaded (a notice's status upload on a retry poll must not say it earlier)
            self._try("upload the output", lambda: self.sync_output(force=True))
            if self._try("upload the events", lambda: self.sync_events(force=True)):
                self.status.update(state="exited", exit_code=code, ended_at=self._ended_at)
                if self._try("write the status", self.put_status):
                    self._end_reported = True
                    log.info("trial exited with %s", code)
                    return False
            self._final_tries += 1
            if self._final_tries >= FINAL_TRIES:
                log.warning(
                    "trial exited with %s; giving up uploading its end after %d tries",
                    code,
                    self._final_tries,
                )
                return False
            return True
        if time.monotonic() - self._last_sync >= self.cfg.sync_s or self.status["notices"]:
            self._try("upload the events", self.sync_events)
        self._try("upload the output", self.sync_output)
        return True

    def run(self) -> int:
        """Run the trial to its end; the trial's exit code (127: it could not start; 143: this
        machine went down first)."""
        self.start()
        if self.proc is None:  # report it like any end, then power off like after any trial
            tries = 1
            while not self._start_reported and not self._shutting_down and tries < FINAL_TRIES:
                time.sleep(self.cfg.poll_s)
                self._start_reported = self._try("write the status", self.put_status)
                tries += 1
            if not self._start_reported:
                log.warning("giving up writing the status after %d tries", tries)
            if not self._shutting_down:
                self.maybe_shutdown(now=not self._start_reported)
            return 127
        while not self._shutting_down and self.step():
            time.sleep(self.cfg.poll_s)
        if self._shutting_down:  # the instance is going away: stop the trial, save its events
            assert self.group is not None
            self.group.stop(self.cfg.kill_grace_s)
            self.step()
            return 143
        self.maybe_shutdown(now=not self._end_reported)
        return int(self.proc.returncode)

    def maybe_shutdown(self, now: bool = False) -> None:
        """Power the machine off if nobody removed it a while after the trial ended, so a lost
        controller cannot leave it running; ``now``: at once (the end could not be reported,
        so nobody will come for the machine, and its end is the controller's only news)."""
        if self.cfg.shutdown_after_s < 0:
            return
        if now:
            log.warning("the trial's end could not be reported: shutting down now")
        else:
            time.sleep(self.cfg.shutdown_after_s)
            log.info(
                "trial ended %.0f s ago and the instance is still up: shutting down",
                self.cfg.shutdown_after_s,
            )
        subprocess.run(["shutdown", "-h", "now"], check=False)

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self._shutting_down = True

    def install_sigterm(self) -> None:
        """Route this process's SIGTERM to :meth:`on_sigterm` (main thread only)."""
        signal.signal(signal.SIGTERM, self.on_sigterm)
