"""The trial's output on the instance (its stdout and stderr in one file), as the agent reads it.

:func:`output_tail` is what the agent uploads for the controller (the end of the output, from
a line start); :func:`echo_since` copies what is new to the agent's own stdout, its log. Both
only read the file and never raise for a file that is missing or cut short: the trial's output
is news, never a reason to stop the trial. The upload itself, and how often, is
:class:`~spotwise.providers.trial_agent.TrialAgent`'s.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def output_tail(path: Path, limit: int) -> bytes:
    """The last ``limit`` bytes of the output at ``path``, from a line start; a first line
    says how much was left out (``b""`` when the file cannot be read)."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            start = max(size - limit, 0)
            fh.seek(start)
            data = fh.read(size - start)
    except OSError:
        return b""
    if start == 0:
        return data
    cut = data.find(b"\n") + 1  # drop the partial first line (none: keep it all)
    data = data[cut:]
    return b"[spotwise: the first %d bytes of the output are left out]\n" % (start + cut) + data


def echo_since(path: Path, offset: int) -> int:
    """Copy the output at ``path`` from byte ``offset`` on to this process's stdout; the offset
    reached (unchanged when there is no output yet or stdout is closed)."""
    sink = getattr(sys.stdout, "buffer", None)
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            while chunk := fh.read(1 << 20):
                offset += len(chunk)
                if sink is not None:
                    sink.write(chunk)
        if sink is not None:
            sink.flush()
    except (OSError, ValueError):  # no output yet, or the agent's stdout is closed
        pass
    return offset
