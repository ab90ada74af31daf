"""A trial attempt's output as the orchestrator quotes it when the attempt ends.

Every instance life leaves its trial's output in the job's ``logs`` folder as
``<instance id>.log``: the local provisioner writes it there as the trial runs; a cloud trial's
agent uploads the end of it to the trial's artifacts folder
(:func:`~spotwise.providers.channel.read_output`), fetched here when the life ends. A failed
attempt's error quotes the last line of that output (a traceback's exception line). Split out
of :mod:`spotwise.planner.trialbook`, which uses it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

from spotwise.errors import ProviderError
from spotwise.planner.runstate import Life, TrialRun
from spotwise.spec import JobSpec

LAST_LINE_CHARS = 300  # of a trial's last output line, quoted in its error
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]")  # ANSI, controls


def last_line(data: bytes) -> str:
    """The last line of a trial's output that says something (a progress bar's last state
    after ``\\r``), without terminal escapes; at most ``LAST_LINE_CHARS`` characters."""
    for raw in reversed(data[-8192:].decode("utf-8", errors="replace").splitlines()):
        line = _CONTROL.sub("", raw.rsplit("\r", 1)[-1]).strip()
        if line:
            if len(line) > LAST_LINE_CHARS:
                line = line[: LAST_LINE_CHARS - 3] + "..."
            return line
    return ""


class Owner(Protocol):
    """What :func:`life_log` reads of its orchestrator (its spec and job id only for a cloud)."""

    run_dir: Path
    spec: JobSpec
    job_id: str


def life_log(owner: Owner, t: TrialRun, life: Life) -> tuple[Path | None, str, str]:
    """``(log file, its last output line, why the output could not be read)`` of one
    instance life (see the module docstring): the file is ``<logs>/<instance id>.log``,
    None when there is none; a cloud life's is fetched from its artifacts folder the first
    time (when that fails, the file says why)."""
    path = owner.run_dir / "logs" / f"{life.instance_id}.log"
    if path.exists():
        try:
            with open(path, "rb") as fh:
                fh.seek(max(fh.seek(0, 2) - 8192, 0))
                return path, last_line(fh.read()), ""
        except OSError:
            return path, "", ""
    from spotwise.providers.channel import REACH, read_output

    cloud = life.offer.provider
    if cloud not in REACH:
        return None, "", ""
    p = next((q for q in owner.spec.providers if q.name == cloud), None)
    if p is None:  # the local provisioner writes its own (none: nothing ran)
        return None, "", ""
    output, unread = b"", ""
    try:
        where, data = read_output(
            cloud,
            p.options,
            t.checkpoint_uri or "",
            owner.job_id,
            t.trial_id,
            life.attempt,
            life.offer.region,
        )
    except ProviderError as e:
        unread = str(e) + (f" ({e.hint})" if e.hint else "")
        text = f"spotwise: cannot read the trial's output: {unread}\n".encode()
    else:
        output = data or b""
        text = (
            output
            if data is not None
            else (
                f"spotwise: no output of the trial was uploaded to {where} (it printed "
                "nothing, or its agent could not write there)\n".encode()
            )
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text)
    except OSError:
        return None, last_line(output), unread
    return path, last_line(output), unread
