"""An instance emulator for the GCP and Azure fakes: it plays the VMs the fakes only record.

When a fake receives an insert (GCE) or a VM PUT (ARM) it calls :meth:`VmEmulator.boot` with
the launch spec it received (the ``spotwise-launch`` metadata item, the JSON inside the custom
data). The emulator writes it to ``<root>/<name>/launch.json``, as the VM's startup would, and
starts the real agent on it — ``python -m spotwise.providers.gcp_agent --launch FILE`` or
``python -m spotwise.providers.azure_agent --launch FILE`` — with:

* a per-machine HTTP server standing in for the metadata server / IMDS (the fakes give the
  handler: GCE ``instance/preempted`` and guest attributes, Azure Scheduled Events), reached
  through ``SPOTWISE_GCE_METADATA_URL`` / ``SPOTWISE_AZURE_IMDS_URL``;
* ``HOME`` in the machine's folder (the agent keeps the trial's events, stop and control files
  under ``~/.spotwise-agent``), no ``SPOTWISE_*`` or cloud credential variables of the test
  process, and the agent settings a real launch leaves at their defaults made short (polls of
  0.2 s, no self-shutdown). Nothing else of the spec is changed.

:meth:`VmEmulator.preempt_after_checkpoint` arms one preemption: once a machine's trial has a
checkpoint manifest in its ``file://`` checkpoint folder, the machine's metadata says it is
being preempted (the agent SIGTERMs the trial, which checkpoints and exits), and ``lead_s``
later the fake takes the VM away (:meth:`VmEmulator.due`, called from the fake's request
handlers so its state only changes in the thread serving the client). A machine that the fake
deleted — by us or by the "provider" — is powered off: SIGTERM to the agent, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localhttp import LocalServer

Handler = Callable[["Machine", str, str, bytes], tuple[int, str]]
AGENT_SETTINGS = {"poll_s": 0.2, "sync_s": 0.2, "shutdown_after_s": -1, "kill_grace_s": 10}
SECRET_PREFIXES = ("SPOTWISE_", "GOOGLE_", "AZURE_", "AWS_", "CLOUDSDK_")


class MetadataServer(LocalServer):
    """A local HTTP server answering one machine's metadata requests through ``handle``."""

    def __init__(self, machine: Machine, handle: Handler) -> None:
        super().__init__(lambda command, path, _headers, body: handle(machine, command, path, body))
        self.start()


@dataclass
class Machine:
    name: str
    spec: dict[str, Any]
    log: Path
    agent: subprocess.Popen[bytes] | None = None
    server: MetadataServer | None = None
    noticed_at: float | None = None  # the metadata says "preempted" from then on
    reclaim_at: float | None = None  # when the provider takes the VM
    reclaimed: bool = False
    gone: bool = False
    powered_off: bool = False
    info: dict[str, Any] = field(default_factory=dict)  # what the fake needs (zone, ...)

    @property
    def checkpoint_dir(self) -> Path | None:
        uri = str(self.spec.get("env", {}).get("SPOTWISE_CHECKPOINT_URI", ""))
        return Path(uri.removeprefix("file://")) if uri.startswith("file:///") else None

    def has_checkpoint(self) -> bool:
        folder = self.checkpoint_dir
        return folder is not None and folder.is_dir() and any(folder.glob("ckpt-*.json"))


class VmEmulator:
    """Boots the agent of every VM a fake creates (see the module docstring)."""

    def __init__(self, root: Path, agent_module: str, handle: Handler) -> None:
        self.root = root
        self.agent_module = agent_module
        self.handle = handle
        self.machines: dict[str, Machine] = {}
        self.errors: list[str] = []
        self.preempt_lead_s: float | None = None
        self.hit: Machine | None = None
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(SECRET_PREFIXES)}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="vm-emulator")

    def __enter__(self) -> VmEmulator:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for m in list(self.machines.values()):
            if not m.powered_off:
                self._power_off(m)

    # ---- what the fakes call --------------------------------------------------------------
    def boot(self, name: str, spec: dict[str, Any], url_var: str, **info: Any) -> Machine:
        folder = self.root / name
        (folder / "home").mkdir(parents=True, exist_ok=True)
        launch = folder / "launch.json"
        launch.write_text(json.dumps({**spec, **AGENT_SETTINGS}))
        m = Machine(name, spec, folder / "agent.log", info=info)
        m.server = MetadataServer(m, self.handle)
        env = {**self.env, "HOME": str(folder / "home"), url_var: m.server.url}
        with open(m.log, "ab") as fh:
            m.agent = subprocess.Popen(
                [sys.executable, "-m", self.agent_module, "--launch", str(launch), "--poll", "0.2"],
                env=env,
                cwd=folder,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        with self._lock:
            self.machines[name] = m
        return m

    def deleted(self, name: str) -> None:
        """The fake removed the VM: the machine goes away."""
        with self._lock:
            m = self.machines.get(name)
        if m is not None:
            m.gone = True

    def due(self) -> list[Machine]:
        """Machines whose preemption deadline has passed and that the fake must take now."""
        now = time.time()
        with self._lock:
            out = [
                m
                for m in self.machines.values()
                if m.reclaim_at is not None and now >= m.reclaim_at and not m.reclaimed
            ]
            for m in out:
                m.reclaimed = m.gone = True
        return out

    # ---- control --------------------------------------------------------------------------
    def preempt_after_checkpoint(self, lead_s: float) -> None:
        """Preempt the first machine whose trial writes a checkpoint (once per emulator)."""
        self.preempt_lead_s = lead_s

    def log_of(self, name: str) -> str:
        m = self.machines.get(name)
        return m.log.read_text(errors="replace") if m and m.log.exists() else ""

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
            except Exception as e:  # keep playing; the test reads self.errors
                self.errors.append(f"{type(e).__name__}: {e}")
            self._stop.wait(0.1)

    def _tick(self) -> None:
        with self._lock:
            machines = list(self.machines.values())
        for m in machines:
            if self.preempt_lead_s is not None and self.hit is None and m.has_checkpoint():
                self.hit = m
                m.noticed_at = time.time()
                m.reclaim_at = m.noticed_at + self.preempt_lead_s
            if m.gone and not m.powered_off:
                self._power_off(m)

    def _power_off(self, m: Machine) -> None:
        """The machine goes away: the agent (and through it the trial) gets SIGTERM, then KILL;
        whatever is left of the trial's process group is killed too."""
        m.powered_off = True
        trial_pid = _trial_pid(m.log)
        if m.agent is not None and m.agent.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(m.agent.pid, signal.SIGTERM)
            try:
                m.agent.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(m.agent.pid, signal.SIGKILL)
                m.agent.wait()
        if trial_pid is not None and _is_trial(trial_pid, m.spec):  # never a reused pid
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(trial_pid, signal.SIGKILL)
        if m.server is not None:
            m.server.close()
            m.server = None


def _trial_pid(log: Path) -> int | None:
    """The trial's pid, from the agent's log line ``trial pid N``."""
    if not log.exists():
        return None
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if "trial pid " in line:
            try:
                return int(line.rsplit("trial pid ", 1)[1].split()[0])
            except ValueError:
                return None
    return None


def _is_trial(pid: int, spec: dict[str, Any]) -> bool:
    """Whether ``pid`` still runs this machine's trial command (its last argument)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return str(spec["argv"][-1]).encode() in cmdline


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000+00:00", time.gmtime())
