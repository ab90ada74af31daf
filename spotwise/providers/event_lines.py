"""Reading a trial's events file (JSON lines the SDK appends) a piece at a time."""

from __future__ import annotations

import json
from pathlib import Path


def read_new(path: Path, pos: int) -> tuple[int, list[dict[str, object]]]:
    """The whole lines appended to ``path`` after byte ``pos``, parsed, and the position after
    them: a line still being written is left for the next call, a line that is not a JSON
    object is skipped. A file not written yet reads as nothing new."""
    try:
        with open(path, "rb") as fh:
            fh.seek(pos)
            data = fh.read()
    except FileNotFoundError:
        return pos, []
    end = data.rfind(b"\n")
    if end < 0:
        return pos, []
    out: list[dict[str, object]] = []
    for line in data[: end + 1].splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return pos + end + 1, out
