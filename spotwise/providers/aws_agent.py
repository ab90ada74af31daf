"""The trial agent of an EC2 instance: what the user-data runs (``python -m
spotwise.providers.aws_agent``).

The cloud-neutral work — run the trial (an argv list, never a shell) with the ``SPOTWISE_*``
environment, relay the stop marker and the control file, sync the events and the agent's status
(notices, exit code), SIGTERM the trial on a notice — is
:class:`~spotwise.providers.trial_agent.TrialAgent`'s; see there. What is EC2's is here:

* :class:`ImdsWatcher`, its notice watcher: IMDSv2 (a token ``PUT``, then ``GET``) for
  ``spot/instance-action`` (the two-minute interruption notice) and
  ``events/recommendations/rebalance`` (elevated risk; option ``rebalance: ignore`` keeps the
  trial running on one). The IMDS base URL comes from ``SPOTWISE_IMDS_URL`` (default
  ``http://169.254.169.254``), so tests and the instance emulator can serve their own. IMDS is
  read with plain ``urllib``.
* the artifacts folder is in S3 (:class:`~spotwise.providers.s3_blobs.S3Blobs` over
  :func:`spotwise.providers.aws.s3_client`): ``s3://bucket/prefix/<job>/<trial>`` (the trial's
  checkpoint location by default).
* the user-data format (:func:`render_user_data` / :func:`parse_user_data`): the
  :class:`AgentConfig` travels base64-encoded inside it, so the launcher and the emulator agree
  on it. Never put credentials in the environment of a launch: the instance gets them from its
  instance profile.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import shlex
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from spotwise.providers.trial_agent import TrialAgent, TrialConfig

log = logging.getLogger("spotwise.agent")

IMDS_URL = "http://169.254.169.254"
TOKEN_TTL_S = 21600
INSTANCE_ACTION = "latest/meta-data/spot/instance-action"
REBALANCE = "latest/meta-data/events/recommendations/rebalance"
CONFIG_VAR = "SPOTWISE_AGENT_CONFIG"
_CONFIG_RE = re.compile(CONFIG_VAR + r"='([A-Za-z0-9+/=]+)'")
NOTICE_LEAD_S = 120.0
#: The launch scripts' line that powers the VM off when the script fails (a setup line, an
#: agent that cannot start or fails), ``{what}`` naming what ran; an agent that exited 0 has
#: ended its trial and scheduled its own power-off (``shutdown_after_s``). The GCP and Azure
#: launch scripts carry the same line (:mod:`~spotwise.providers.gcp_launch`,
#: :mod:`~spotwise.providers.azure_launch`).
POWER_OFF_ON_FAILURE = (
    """trap 'rc=$?; if [ "$rc" -ne 0 ]; then echo "spotwise: {what} failed (exit $rc): """
    """powering off" >&2; shutdown -h now; fi' EXIT"""
)


@dataclass(kw_only=True)
class AgentConfig(TrialConfig):
    """Everything the agent needs: the cloud-neutral :class:`TrialConfig` plus where its
    artifacts live; travels as base64-encoded flat JSON inside the user-data."""

    artifacts: str  # s3://bucket/prefix/<job>/<trial>
    region: str
    extra: dict[str, Any] = field(default_factory=dict)

    def to_b64(self) -> str:
        return base64.b64encode(json.dumps(asdict(self), sort_keys=True).encode()).decode()

    @classmethod
    def from_b64(cls, text: str) -> AgentConfig:
        data = json.loads(base64.b64decode(text.encode()).decode())
        return cls(**data)

    def key(self, name: str) -> str:
        return f"{self.artifacts.rstrip('/')}/{name}"

    def trial(self) -> TrialConfig:
        """The cloud-neutral part, for :class:`~spotwise.providers.trial_agent.TrialAgent`."""
        part = {f.name: getattr(self, f.name) for f in fields(TrialConfig)}
        return TrialConfig(**{**part, "argv": list(self.argv), "env": dict(self.env)})


def render_user_data(
    cfg: AgentConfig,
    *,
    python: str = "python3",
    setup: str = "",
    log_file: str = "/var/log/spotwise-agent.log",
) -> str:
    """The instance's user-data: a bash script that runs ``setup`` then starts the agent.

    When ``setup`` fails, or the agent cannot start or fails (spotwise missing from the image,
    an import error, a crash), the script powers the machine off (:data:`POWER_OFF_ON_FAILURE`;
    ``InstanceInitiatedShutdownBehavior: terminate`` makes that the end of its bill): nothing
    else would, and the controller learns of it as an instance that ended without an exit
    code. An agent that ran powers off by itself ``shutdown_after_s`` after the trial; with
    ``shutdown_after_s < 0`` (never) the script does not either."""
    lines = [
        "#!/bin/bash",
        f"# spotwise trial agent: job {cfg.job_id} trial {cfg.trial_id} attempt {cfg.attempt} "
        f"(launch {cfg.launch_id})",
        "set -eu",
    ]
    if cfg.shutdown_after_s >= 0:
        lines.append(POWER_OFF_ON_FAILURE.format(what="setup or the trial agent"))
    if setup.strip():
        lines += ["# --- setup (providers[].options.setup) ---", setup.rstrip(), "# ---"]
    lines += [
        f"export {CONFIG_VAR}='{cfg.to_b64()}'",
        "# a child this script waits for (exec in a subshell): its failure reaches the trap",
        f"(exec {shlex.quote(python)} -m spotwise.providers.aws_agent "
        f">>{shlex.quote(log_file)} 2>&1)",
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
class ImdsWatcher:
    """The notice watcher of :class:`~spotwise.providers.trial_agent.TrialAgent` on EC2: each
    call polls ``spot/instance-action`` and ``events/recommendations/rebalance`` (each kind is
    returned once) and returns the new notices."""

    def __init__(self, imds: Imds) -> None:
        self.imds = imds
        self.seen: set[str] = set()
        self._down_logged = False

    def __call__(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for path in (INSTANCE_ACTION, REBALANCE):
            kind = "interruption" if path == INSTANCE_ACTION else "rebalance"
            if kind in self.seen:
                continue
            try:
                body = self.imds.get(path)
            except (OSError, urllib.error.URLError) as e:
                if not self._down_logged:
                    log.warning(
                        "IMDS unreachable at %s (%s); no interruption notices", self.imds.base, e
                    )
                    self._down_logged = True
                return out
            notice = parse_notice(path, body, time.time()) if body else None
            if notice is None:
                continue
            self.seen.add(kind)
            out.append(notice)
        return out


class Agent(TrialAgent):
    """The trial agent of an EC2 instance: its artifacts in S3, its notices from IMDSv2."""

    def __init__(self, cfg: AgentConfig, s3: Any = None, imds: Imds | None = None) -> None:
        from spotwise.providers import aws
        from spotwise.providers.s3_blobs import S3Blobs

        self.config = cfg
        self.imds = imds or Imds()
        blobs = S3Blobs.from_uri(
            cfg.artifacts, client=s3 if s3 is not None else aws.s3_client(cfg.region)
        )
        super().__init__(cfg.trial(), blobs, ImdsWatcher(self.imds), scrub_env=(CONFIG_VAR,))


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
    agent.install_sigterm()
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())
