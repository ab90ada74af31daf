"""The trial-side agent: what the user-data runs on an EC2 instance (``python -m
spotwise.providers.aws_agent``).

It runs the trial command (an argv list, never a shell) with the ``SPOTWISE_*`` environment,
and every ``poll_s`` seconds:

* polls IMDSv2 (a token ``PUT``, then ``GET``) for ``spot/instance-action`` (the two-minute
  interruption notice) and ``events/recommendations/rebalance`` (elevated risk). A notice is
  written to S3 at once and turned into SIGTERM for the trial's process group — the SDK's
  contract: checkpoint and exit. (Option ``rebalance: ignore`` keeps running on a rebalance
  recommendation.)
* relays a stop request: when ``<artifacts>/stop-<attempt>`` appears in S3 (the provisioner
  puts it when the orchestrator asks the trial to stop) the local stop file is created.
* relays live settings: when ``<artifacts>/control-<attempt>.json`` is new or changed (a
  conditional ``GET`` on its last ETag) the trial's control file (``SPOTWISE_CONTROL_FILE``,
  e.g. ``{"checkpoint_every": N}``) is replaced with it atomically.
* syncs the trial's events file to ``<artifacts>/events-<attempt>.jsonl``, and its own status
  (notices seen, exit code) to ``<artifacts>/agent-<attempt>.json``. The events are always
  uploaded before a status that says the trial exited, so a reader who sees the exit has
  every event.

``<artifacts>`` is ``s3://bucket/prefix/<job>/<trial>`` (the trial's checkpoint location by
default). The IMDS base URL comes from ``SPOTWISE_IMDS_URL`` (default
``http://169.254.169.254``), so tests and the instance emulator can serve their own. IMDS is
read with plain ``urllib``; S3 goes through :func:`spotwise.providers.aws.s3_client`.

The user-data format is defined here too (:func:`render_user_data` / :func:`parse_user_data`),
so the launcher and the emulator agree on it. Never put credentials in the environment of a
launch: the instance gets them from its instance profile.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

log = logging.getLogger("spotwise.agent")

IMDS_URL = "http://169.254.169.254"
TOKEN_TTL_S = 21600
INSTANCE_ACTION = "latest/meta-data/spot/instance-action"
REBALANCE = "latest/meta-data/events/recommendations/rebalance"
CONFIG_VAR = "SPOTWISE_AGENT_CONFIG"
_CONFIG_RE = re.compile(CONFIG_VAR + r"='([A-Za-z0-9+/=]+)'")
NOTICE_LEAD_S = 120.0


@dataclass
class AgentConfig:
    """Everything the agent needs; travels base64-encoded JSON inside the user-data."""

    job_id: str
    trial_id: str
    attempt: int
    launch_id: str
    argv: list[str]
    env: dict[str, str]
    artifacts: str  # s3://bucket/prefix/<job>/<trial>
    region: str
    workdir: str = ""
    poll_s: float = 2.0
    sync_s: float = 5.0
    rebalance: str = "stop"  # stop | ignore
    shutdown_after_s: float = 600.0  # power off this long after the trial ends (< 0: never)
    state_dir: str = ""  # where the trial's events and stop files live on the instance
    kill_grace_s: float = 100.0  # SIGKILL the trial this long after a notice's SIGTERM
    extra: dict[str, Any] = field(default_factory=dict)

    def to_b64(self) -> str:
        return base64.b64encode(json.dumps(asdict(self), sort_keys=True).encode()).decode()

    @classmethod
    def from_b64(cls, text: str) -> AgentConfig:
        data = json.loads(base64.b64decode(text.encode()).decode())
        return cls(**data)

    def key(self, name: str) -> str:
        return f"{self.artifacts.rstrip('/')}/{name}"


def render_user_data(
    cfg: AgentConfig,
    *,
    python: str = "python3",
    setup: str = "",
    log_file: str = "/var/log/spotwise-agent.log",
) -> str:
    """The instance's user-data: a bash script that runs ``setup`` then starts the agent."""
    lines = [
        "#!/bin/bash",
        f"# spotwise trial agent: job {cfg.job_id} trial {cfg.trial_id} attempt {cfg.attempt} "
        f"(launch {cfg.launch_id})",
        "set -eu",
    ]
    if setup.strip():
        lines += ["# --- setup (providers[].options.setup) ---", setup.rstrip(), "# ---"]
    lines += [
        f"export {CONFIG_VAR}='{cfg.to_b64()}'",
        f"exec {shlex.quote(python)} -m spotwise.providers.aws_agent "
        f">>{shlex.quote(log_file)} 2>&1",
        "",
    ]
    return "\n".join(lines)


def parse_user_data(text: str) -> AgentConfig:
    """The agent config inside user-data rendered by :func:`render_user_data`."""
    m = _CONFIG_RE.search(text)
    if m is None:
        raise ValueError("user-data does not start the spotwise agent (no SPOTWISE_AGENT_CONFIG)")
    return AgentConfig.from_b64(m.group(1))


# ---- IMDSv2 ---------------------------------------------------------------------------------
class Imds:
    """A minimal IMDSv2 client: token PUT, then GETs carrying the token."""

    def __init__(self, base: str | None = None, timeout: float = 1.0) -> None:
        self.base = (base or os.environ.get("SPOTWISE_IMDS_URL") or IMDS_URL).rstrip("/")
        self.timeout = timeout
        self._token = ""
        self._token_at = 0.0

    def _fetch_token(self) -> str:
        headers = {"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_S)}
        req = urllib.request.Request(f"{self.base}/latest/api/token", method="PUT", headers=headers)
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            return str(resp.read().decode().strip())

    def get(self, path: str) -> str | None:
        """The body at ``path``; None for 404 (no such notice). Raises OSError when unreachable."""
        if not self._token or time.monotonic() - self._token_at > TOKEN_TTL_S / 2:
            self._token, self._token_at = self._fetch_token(), time.monotonic()
        req = urllib.request.Request(
            f"{self.base}/{path}", headers={"X-aws-ec2-metadata-token": self._token}
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return str(resp.read().decode())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            if e.code == 401:  # token expired or revoked: fetch a new one next time
                self._token = ""
            raise


def parse_notice(path: str, body: str, now: float) -> dict[str, Any] | None:
    """An IMDS notice body → ``{"kind", "action", "received_at", "deadline"}``."""
    try:
        doc = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    if path == INSTANCE_ACTION:
        when = _parse_time(doc.get("time"))
        return {
            "kind": "interruption",
            "action": str(doc.get("action", "terminate")),
            "received_at": now,
            "deadline": when if when is not None else now + NOTICE_LEAD_S,
        }
    when = _parse_time(doc.get("noticeTime"))
    return {
        "kind": "rebalance",
        "action": "rebalance",
        "received_at": now,
        "deadline": None,
        "notice_time": when,
    }


def _parse_time(value: Any) -> float | None:
    from datetime import datetime

    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


# ---- the agent ------------------------------------------------------------------------------
class Agent:
    def __init__(self, cfg: AgentConfig, s3: Any = None, imds: Imds | None = None) -> None:
        from spotwise.providers import aws

        self.cfg = cfg
        self.bucket, self.prefix = aws.parse_s3_uri(cfg.artifacts)
        self.s3 = s3 if s3 is not None else aws.s3_client(cfg.region)
        self.imds = imds or Imds()
        base = Path(cfg.state_dir or Path.home() / ".spotwise-agent")
        self.dir = base / cfg.job_id / cfg.trial_id
        self.events = self.dir / f"events-{cfg.attempt}.jsonl"
        self.stop_file = self.dir / f"stop-{cfg.attempt}"
        self.control_file = self.dir / f"control-{cfg.attempt}.json"
        self.status: dict[str, Any] = {
            "launch_id": cfg.launch_id,
            "attempt": cfg.attempt,
            "state": "starting",
            "exit_code": None,
            "notices": [],
            "started_at": time.time(),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self._uploaded_size = -1
        self._last_sync = 0.0
        self._term_at: float | None = None
        self._imds_down_logged = False
        self._stop_relayed = False
        self._control_etag = ""
        self._shutting_down = False

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    # ---- S3 -----------------------------------------------------------------------------
    def put_status(self) -> None:
        self.status["updated_at"] = time.time()
        body = json.dumps(self.status, sort_keys=True).encode()
        self.s3.put_object(
            Bucket=self.bucket,
            Key=self._key(f"agent-{self.cfg.attempt}.json"),
            Body=body,
            ContentType="application/json",
        )

    def sync_events(self, force: bool = False) -> None:
        if not self.events.exists():
            return
        data = self.events.read_bytes()
        end = data.rfind(b"\n") + 1  # whole lines only
        if end == self._uploaded_size and not force:
            return
        self.s3.put_object(
            Bucket=self.bucket,
            Key=self._key(f"events-{self.cfg.attempt}.jsonl"),
            Body=data[:end],
            ContentType="application/x-ndjson",
        )
        self._uploaded_size = end
        self._last_sync = time.monotonic()

    def stop_requested(self) -> bool:
        try:
            self.s3.head_object(Bucket=self.bucket, Key=self._key(f"stop-{self.cfg.attempt}"))
        except Exception as e:
            code = getattr(e, "response", {}).get("Error", {}).get("Code")
            if code in ("404", "NoSuchKey", "NotFound"):
                return False
            log.warning("cannot read the stop marker: %s", e)
            return False
        return True

    def relay_control(self) -> bool:
        """Replace the trial's control file with ``control-<attempt>.json`` from S3 when that is
        new or changed (``IfNoneMatch`` on the last ETag); True when the file was written."""
        args = {"Bucket": self.bucket, "Key": self._key(f"control-{self.cfg.attempt}.json")}
        if self._control_etag:
            args["IfNoneMatch"] = self._control_etag
        try:
            resp = self.s3.get_object(**args)
            data = resp["Body"].read()
        except Exception as e:
            code = getattr(e, "response", {}).get("Error", {}).get("Code")
            if code not in ("304", "NotModified", "404", "NoSuchKey", "NotFound"):
                log.warning("cannot read the control file: %s", e)
            return False
        tmp = self.control_file.with_name(f".{self.control_file.name}.tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, self.control_file)  # the trial sees the old file or the new one
        except OSError as e:  # the old ETag is kept: fetched and tried again next poll
            log.warning("cannot write the control file: %s", e)
            return False
        self._control_etag = str(resp.get("ETag", ""))
        log.info("control file updated: %s", data[:200].decode(errors="replace"))
        return True

    # ---- the trial ----------------------------------------------------------------------
    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            **self.cfg.env,
            "SPOTWISE_EVENTS_FILE": str(self.events),
            "SPOTWISE_STOP_FILE": str(self.stop_file),
            "SPOTWISE_CONTROL_FILE": str(self.control_file),
        }
        env.pop(CONFIG_VAR, None)
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
        try:
            self.proc = subprocess.Popen(
                argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, start_new_session=True
            )
        except OSError as e:
            why = f"cannot start {argv[0]!r}: {e}"
            self.status.update(state="exited", exit_code=127, error=why)
            self.put_status()
            return
        log.info("trial pid %d", self.proc.pid)
        self.status.update(state="running", pid=self.proc.pid)
        self.put_status()

    def signal_trial(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def check_notices(self) -> None:
        kinds = {n["kind"] for n in self.status["notices"]}
        for path in (INSTANCE_ACTION, REBALANCE):
            kind = "interruption" if path == INSTANCE_ACTION else "rebalance"
            if kind in kinds:
                continue
            try:
                body = self.imds.get(path)
            except (OSError, urllib.error.URLError) as e:
                if not self._imds_down_logged:
                    log.warning(
                        "IMDS unreachable at %s (%s); no interruption notices", self.imds.base, e
                    )
                    self._imds_down_logged = True
                return
            notice = parse_notice(path, body, time.time()) if body else None
            if notice is None:
                continue
            log.info("notice: %s", notice)
            self.status["notices"].append(notice)
            self.put_status()  # the orchestrator hears of it at once
            if kind == "interruption" or self.cfg.rebalance == "stop":
                self.signal_trial(signal.SIGTERM)
                self._term_at = time.monotonic()

    def step(self) -> bool:
        """One poll; False once the trial has exited and everything is uploaded."""
        assert self.proc is not None
        self.check_notices()
        if not self._stop_relayed and self.stop_requested():
            self.stop_file.touch()
            self._stop_relayed = True
            log.info("stop requested by the orchestrator")
        self.relay_control()
        if self._term_at is not None and time.monotonic() - self._term_at > self.cfg.kill_grace_s:
            self.signal_trial(signal.SIGKILL)
        code = self.proc.poll()
        if code is not None:
            self.sync_events(force=True)  # events first, then the exit
            self.status.update(state="exited", exit_code=code, ended_at=time.time())
            self.put_status()
            log.info("trial exited with %s", code)
            return False
        if time.monotonic() - self._last_sync >= self.cfg.sync_s or self.status["notices"]:
            self.sync_events()
        return True

    def run(self) -> int:
        self.start()
        if self.proc is None:
            return 127
        while not self._shutting_down and self.step():
            time.sleep(self.cfg.poll_s)
        if self._shutting_down:  # the instance is going away: stop the trial, save its events
            self.signal_trial(signal.SIGTERM)
            try:
                self.proc.wait(self.cfg.kill_grace_s)
            except subprocess.TimeoutExpired:
                self.signal_trial(signal.SIGKILL)
            self.step()
            return 143
        self.maybe_shutdown()
        return 0

    def maybe_shutdown(self) -> None:
        """Power the instance off if nobody terminated it a while after the trial ended, so a
        lost orchestrator cannot leave it running (launched with shutdown behaviour terminate)."""
        if self.cfg.shutdown_after_s < 0:
            return
        time.sleep(self.cfg.shutdown_after_s)
        log.info(
            "trial ended %.0f s ago and the instance is still up: shutting down",
            self.cfg.shutdown_after_s,
        )
        subprocess.run(["shutdown", "-h", "now"], check=False)

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self._shutting_down = True


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s spotwise-agent %(message)s")
    text = os.environ.get(CONFIG_VAR, "")
    args = argv if argv is not None else sys.argv[1:]
    if args and args[0] == "--user-data":
        text = Path(args[1]).read_text()
        cfg = parse_user_data(text)
    elif text:
        cfg = AgentConfig.from_b64(text)
    else:
        print(f"spotwise-agent: set {CONFIG_VAR} or pass --user-data FILE", file=sys.stderr)
        return 2
    agent = Agent(cfg)
    signal.signal(signal.SIGTERM, agent.on_sigterm)
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())
