"""A trial attempt's output as the orchestrator quotes it when the attempt ends.

Every instance life leaves its trial's output in the job's ``logs`` folder as
``<instance id>.log``: the local provisioner writes it there as the trial runs; a cloud trial's
agent uploads the end of it to the trial's artifacts folder
(:func:`~spotwise.providers.channel.read_output`), fetched here when the life ends. A failed
attempt's error quotes the last line of that output (a traceback's exception line). Split out
of :mod:`spotwise.planner.trialbook`, which uses it.

:func:`attempts_events` reads back the events files (``events-<attempt>.jsonl``) of a trial's
other attempts, which the orchestrator no longer follows or never did (a lost launch's copy of
the trial: :mod:`spotwise.planner.resumed_end`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from spotwise.errors import ProviderError
from spotwise.planner.runstate import Life, TrialRun
from spotwise.sdk_io import MAX_STEP
from spotwise.spec import JobSpec

LAST_LINE_CHARS = 300  # of a trial's last output line, quoted in its error
ATTEMPTS_READ = 20  # a trial's newest other attempts whose events files are read back
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


Records = list[dict[str, Any]]


def attempts_events(
    owner: Owner, t: TrialRun, life: Life, only: Sequence[int] | None = None
) -> tuple[dict[int, Records], str]:
    """``({attempt: its records}, why some could not be read)``: the events files of the trial's
    attempts other than ``life``'s (the newest ``ATTEMPTS_READ``, or those in ``only``; every
    launch uses up an attempt number, a lost one too), each from the first place that has it:
    the trial's folder of the job's run folder (where the local provider's trials write
    theirs), then the artifacts folder of each cloud provider of the job (see
    :mod:`spotwise.providers.channel`), the life's own first. An attempt whose file is found
    nowhere is left out. Only whole lines that are JSON objects are kept. A place that cannot
    be read is left out of the rest of this call after its first error (said once): a failing
    bucket costs one failed call, not one per attempt (each may take tens of seconds, inside
    the orchestrator's pass)."""
    places = _places(owner, t, life)
    found: dict[int, Records] = {}
    unread: list[str] = []
    numbers = [a for a in range(max(t.attempt, life.attempt), -1, -1) if a != life.attempt]
    if only is not None:
        numbers = [a for a in only if a != life.attempt]
    for attempt in numbers[:ATTEMPTS_READ]:
        for place in list(places):
            where, read = place
            try:
                data = read(f"events-{attempt}.jsonl")
            except (ProviderError, OSError) as e:
                unread.append(f"{where}: {e}")
                places.remove(place)  # not asked again for the other attempts
                continue
            if data is not None:
                found[attempt] = _records(data)
                break
    return found, "; ".join(unread)


def record_step(step: object) -> int | None:
    """A progress record's step as :meth:`~spotwise.planner.trialbook.TrialBook._read_progress`
    takes it (an int, within the store's range), None otherwise."""
    if not isinstance(step, int):
        return None
    return step if 0 <= step <= MAX_STEP else None


def record_metric(metric: object) -> float | None:
    """A report's metric as :meth:`~spotwise.planner.trialbook.TrialBook._read_progress` takes
    it: a float of an int or float (a bool too), None when it is none or not finite (NaN/inf:
    the SDK sends null)."""
    value = float(metric) if isinstance(metric, int | float) else None
    return value if value is not None and math.isfinite(value) else None


def _records(data: bytes) -> Records:
    out: Records = []
    for line in data.splitlines():
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


Reader = Callable[[str], bytes | None]


def _places(owner: Owner, t: TrialRun, life: Life) -> list[tuple[str, Reader]]:
    """Where a trial's channel files may be: ``(what to call it, a reader of one name)``."""
    folder = owner.run_dir / t.trial_id

    def local(name: str) -> bytes | None:
        try:
            return (folder / name).read_bytes()
        except FileNotFoundError:
            return None

    places: list[tuple[str, Reader]] = [(str(folder), local)]
    from spotwise.providers.channel import REACH, artifacts_uri

    own = life.offer.provider
    seen: set[str] = set()
    for p in sorted(owner.spec.providers, key=lambda q: q.name != own):
        if p.name not in REACH:
            continue
        try:
            uri = artifacts_uri(p.name, p.options, t.checkpoint_uri or "", owner.job_id, t.trial_id)
        except ProviderError:  # not a folder its instances can reach: no attempt ran there
            continue
        if uri not in seen:
            seen.add(uri)
            region = life.offer.region if p.name == own else ""
            places.append((uri, _blob_reader(p.options, uri, region)))
    return places


def _blob_reader(options: dict[str, str], uri: str, region: str) -> Reader:
    """A reader of the artifacts folder ``uri``, opened at its first read as
    :func:`~spotwise.providers.channel.read_output` opens it
    (:func:`~spotwise.providers.channel.open_artifacts`)."""
    opened: list[Any] = []

    def read(name: str) -> bytes | None:
        if not opened:
            from spotwise.providers.channel import open_artifacts

            opened.append(open_artifacts(uri, options, region))
        data, _ = opened[0].get(name)
        return data  # type: ignore[no-any-return]

    return read
