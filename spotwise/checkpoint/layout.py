"""What a trial's checkpoint folder is made of: its file names, the manifest's reserved keys,
and the errors that say a checkpoint itself is unusable.

The layout is described in :mod:`spotwise.checkpoint.base` (re-exported from there: import the
public names from :mod:`spotwise.checkpoint.base` or :mod:`spotwise.checkpoint`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

from spotwise.errors import CheckpointError

Manifest = dict[str, Any]
Manifests = list[Manifest]
StepKeys = list[tuple[int, str]]  # (step, manifest key)
T = TypeVar("T")
Decoder = Callable[[bytes, Manifest, str], T]  # (data, manifest, location) -> decoded

LATEST = "LATEST"
DEFAULT_KEEP = 2
CORRUPT_SUFFIX = ".corrupt"  # a checkpoint set aside after a load rejected it
FOREIGN_SUFFIX = ".foreign"  # ... because it belongs to another trial
RESERVED_KEYS = ("file", "sha256", "size", "created_at")
MANIFEST_RE = re.compile(r"^ckpt-(\d{8,})\.json$")
# ckpt-00000005.pt, or ckpt-00000005-<sha256 prefix>.pt for a step saved again (see content_name)
DATA_RE = re.compile(r"^ckpt-(\d{8,})(?:-[0-9a-f]{12}|-[0-9a-f]{64})?\.pt$")
CONTENT_HEX = 12  # hex digits of the SHA-256 in a content name (all 64 if those clash)


def checkpoint_name(step: int) -> str:
    """The data file name of the checkpoint taken after ``step``: ``ckpt-00000005.pt``."""
    return f"ckpt-{check_step(step):08d}.pt"


def manifest_name(step: int) -> str:
    """The manifest name of the checkpoint taken after ``step``: ``ckpt-00000005.json``."""
    return f"ckpt-{check_step(step):08d}.json"


def content_name(name: str, digest: str, *, full: bool = False) -> str:
    """``name`` with the start of the data's SHA-256 before its extension, for a step saved
    again: ``ckpt-00000005.pt`` -> ``ckpt-00000005-0123456789ab.pt``. Writing there never
    overwrites the bytes the step's existing manifest names."""
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem:
        stem, ext = name, ""
    tag = digest if full else digest[:CONTENT_HEX]
    return f"{stem}-{tag}.{ext}" if ext else f"{stem}-{tag}"


def is_data_name(name: object) -> bool:
    """Whether ``name`` may be a checkpoint's data file: a plain file name in the folder, not a
    dot name (``.``, ``..``, temporary files), not ``LATEST``, not a manifest, and without a
    control character (a NUL made every store's open raise ValueError: review-at AT2)."""
    return (
        isinstance(name, str)
        and bool(name)
        and "/" not in name
        and "\\" not in name
        and not name.startswith(".")
        and name != LATEST
        and not name.endswith(".json")
        and not any(c < " " or c == "\x7f" for c in name)
    )


def check_step(step: object) -> int:
    """``step`` if it is an int >= 0 (not a bool), else ValueError."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be an int >= 0, got {step!r}")
    return step


class UnusableCheckpointError(CheckpointError):
    """This checkpoint itself cannot be used, now or later: its data or manifest is missing,
    partial, corrupt or malformed, or its decoder rejects it (not a torch file, a damaged
    archive, objects safe loading refuses, not a dict). Loads skip it (and the SDK sets it
    aside); any other :class:`~spotwise.errors.CheckpointError` (the store could not be read)
    propagates instead."""


class ForeignCheckpointError(UnusableCheckpointError):
    """A checkpoint that verifies but belongs to another trial (its manifest says so)."""
