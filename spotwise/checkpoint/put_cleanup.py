"""What a checkpoint put leaves when its manifest cannot be written (a full disk: review-bf BF6):
the data file it wrote first holds room on the full disk until a later save's retention passes
it. Split from :mod:`spotwise.checkpoint.base`, whose ``put`` calls it."""

from __future__ import annotations

import contextlib
import json
from typing import Any


def drop_unnamed(store: Any, target: str, mkey: str, keys: list[str] | None) -> None:
    """A put whose manifest write failed: its data file ``target``, new to the listing ``keys``
    and named by no manifest at ``mkey``, is removed, best effort, so it holds no room. Kept
    where the listing failed or had it already, or where the manifest may name it (a write that
    failed after it took effect, or a manifest that cannot be read)."""
    if keys is None or target in keys:
        return
    try:
        raw = store._read(mkey)
        named = json.loads(raw.decode()).get("file") if raw is not None else None
    except Exception:
        return
    if named != target:
        with contextlib.suppress(Exception):
            store._remove(target)
