"""The launch scripts power the VM off when the agent cannot start or fails (helper E, s22).

Each script ``exec``-ed the agent after ``set -eu``: a failing AWS ``setup`` line, spotwise
missing from the image or an import error left the VM up, with no status and no power-off,
billed until someone noticed. Here each generated script runs in a temp folder with a fake
``shutdown`` and a fake ``python3`` first on ``PATH``: a failure powers the machine off
(``shutdown -h now``), an agent that exited 0 (its trial done, its own power-off scheduled)
does not.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from spotwise.providers.aws_agent import AgentConfig, render_user_data
from spotwise.providers.azure_launch import custom_data
from spotwise.providers.gcp_launch import STARTUP_SCRIPT


def _bin(tmp: Path, agent_rc: int) -> Path:
    """A folder with a fake ``shutdown`` (records its arguments) and ``python3`` (records
    its arguments, exits ``agent_rc``)."""
    b = tmp / "bin"
    b.mkdir()
    for name, rc in (("shutdown", 0), ("python3", agent_rc)):
        f = b / name
        f.write_text(f'#!/bin/sh\necho "$@" >> "{tmp}/{name}.calls"\nexit {rc}\n')
        f.chmod(0o755)
    return b


def _run(tmp: Path, shell: str, script: str, agent_rc: int) -> tuple[int, str, str]:
    """Run ``script`` with ``shell``; (exit code, shutdown's calls, python3's calls)."""
    env = {**os.environ, "PATH": f"{_bin(tmp, agent_rc)}:{os.environ['PATH']}"}
    path = tmp / "launch.sh"
    path.write_text(script)
    res = subprocess.run([shell, str(path)], env=env, capture_output=True, text=True, timeout=30)
    calls = [tmp / f"{n}.calls" for n in ("shutdown", "python3")]
    shut, agent = (c.read_text() if c.exists() else "" for c in calls)
    return res.returncode, shut, agent


def _aws(tmp: Path, setup: str = "", **cfg: Any) -> str:
    config = AgentConfig(
        job_id="j",
        trial_id="t",
        attempt=0,
        launch_id="l",
        argv=["python", "train.py"],
        env={},
        artifacts="s3://b/p/j/t",
        region="us-east-1",
        **cfg,
    )
    return render_user_data(config, setup=setup, log_file=str(tmp / "agent.log"))


def _azure(tmp: Path) -> str:
    """The cloud-init script, its state folder moved into ``tmp`` (it writes there)."""
    spec = {"argv": ["python", "train.py"], "env": {}, "workdir": "", "artifacts": ""}
    script = base64.b64decode(custom_data(spec)).decode()
    return script.replace("/var/lib/spotwise", str(tmp / "state"))


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_an_agent_that_fails_powers_the_machine_off(tmp_path: Path, cloud: str) -> None:
    shell, script = {
        "aws": ("bash", _aws(tmp_path)),
        "gcp": ("bash", STARTUP_SCRIPT),
        "azure": ("sh", _azure(tmp_path)),
    }[cloud]
    rc, shut, agent = _run(tmp_path, shell, script, agent_rc=1)
    assert f"spotwise.providers.{cloud}_agent" in agent  # it did try to start the agent
    assert shut == "-h now\n"
    assert rc == 1


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_an_agent_that_exits_0_leaves_the_power_off_to_itself(tmp_path: Path, cloud: str) -> None:
    shell, script = {
        "aws": ("bash", _aws(tmp_path)),
        "gcp": ("bash", STARTUP_SCRIPT),
        "azure": ("sh", _azure(tmp_path)),
    }[cloud]
    rc, shut, agent = _run(tmp_path, shell, script, agent_rc=0)
    assert (rc, shut) == (0, "")
    assert agent.count(f"spotwise.providers.{cloud}_agent") == 1


def test_a_failing_aws_setup_line_powers_the_machine_off_before_the_agent(tmp_path: Path) -> None:
    rc, shut, agent = _run(tmp_path, "bash", _aws(tmp_path, setup="false"), agent_rc=0)
    assert (shut, agent) == ("-h now\n", "")
    assert rc == 1


def test_an_aws_agent_told_never_to_power_off_is_left_up(tmp_path: Path) -> None:
    """``shutdown_after_s < 0`` (never): the agent's own choice holds for a failure too; the
    controller's "no word" limit still ends the instance."""
    rc, shut, _ = _run(tmp_path, "bash", _aws(tmp_path, shutdown_after_s=-1.0), agent_rc=1)
    assert (rc, shut) == (1, "")


def test_the_launch_scripts_carry_one_power_off_line() -> None:
    """The same trap in each (bash, bash, sh), set before anything that can fail."""
    aws = render_user_data(
        AgentConfig(
            job_id="j",
            trial_id="t",
            attempt=0,
            launch_id="l",
            argv=["x"],
            env={},
            artifacts="s3://b/p",
            region="r",
        ),
        setup="true",
    )
    spec = {"argv": ["x"], "env": {}, "workdir": "", "artifacts": ""}
    azure = base64.b64decode(custom_data(spec)).decode()
    for script in (aws, STARTUP_SCRIPT, azure):
        lines = script.splitlines()
        trap = next(i for i, line in enumerate(lines) if line.startswith("trap "))
        assert lines[trap - 1].startswith("set -eu")
        assert re.search(r"shutdown -h now; fi' EXIT$", lines[trap])
        assert not any(line.startswith("exec ") for line in lines)
