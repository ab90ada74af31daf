"""One trial attempt as the agent on an instance runs it, and what the controller changes in
its launch to fit an instance.

:class:`TrialConfig` is what :class:`~spotwise.providers.trial_agent.TrialAgent` runs (the
controller's launch spec becomes one, see :mod:`spotwise.providers.channel`).
:func:`instance_argv` and :func:`instance_env` are the controller's side: its interpreter path
and its local ``SPOTWISE_*`` paths mean nothing on an instance (the agent sets its own, listed
in :data:`LOCAL_PATHS`). Cloud-neutral, and standard library only.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

LOCAL_PATHS = ("SPOTWISE_EVENTS_FILE", "SPOTWISE_STOP_FILE", "SPOTWISE_CONTROL_FILE")


@dataclass
class TrialConfig:
    """What one trial attempt on one instance needs (cloud-neutral)."""

    job_id: str
    trial_id: str
    attempt: int
    launch_id: str
    argv: list[str]
    env: dict[str, str]
    workdir: str = ""
    poll_s: float = 2.0
    sync_s: float = 5.0
    rebalance: str = "stop"  # stop | ignore
    shutdown_after_s: float = 600.0  # power off this long after the trial ends (< 0: never)
    state_dir: str = ""  # where the trial's events, stop and control files live on the instance
    kill_grace_s: float = 100.0  # SIGKILL the trial this long after a notice's SIGTERM


def instance_argv(argv: Sequence[str]) -> list[str]:
    """The controller's interpreter path means nothing on an instance: ``python`` instead."""
    return [("python" if i == 0 and a == sys.executable else a) for i, a in enumerate(argv)]


def instance_env(env: dict[str, str]) -> dict[str, str]:
    """The launch env without the controller-local paths (the agent sets its own)."""
    return {k: v for k, v in env.items() if k not in LOCAL_PATHS}
