"""What a revocation model was fitted on, and whether ``predictor eval`` would score it there.

A fitted model records the ticks it saw (:func:`record`): the zones, the timestamps of its first
and last tick, how many ticks, and a digest of their times and availability. The record is saved
with the model (``trained_on``), so ``predictor eval --model FILE`` can find those ticks in the
evaluated trace (:func:`locate`, cheap: one hash of the ticks in that time range) and refuse a
model whose training ticks reach into the test ticks (:func:`check_model_ticks`): its scores
would be in-sample. A model fitted on other data (another trace: transfer) is scored as usual;
a file without a record (older files) is scored with a warning that nothing was checked.

The shipped model's file predates the record. It was trained on the first 70 % of the shipped
SkyNomad trace (``--until 0.7``, docs/predictors.md): :data:`SHIPPED_RECORD` is that record,
given to a file whose SHA-256 is the shipped file's (:func:`read_record`).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spotwise.errors import SpecError

if TYPE_CHECKING:
    from spotwise.traces import TraceSet

SHIPPED_SHA256 = "875401739061b4a871c6e242d02165b20d5a4c2be0ec4e889b60a0f7cf0f8bb9"
SHIPPED_RECORD: dict[str, Any] = {  # ticks 0..14110 of builtin:skynomad-v100-2023
    "zones": [
        "us-east-1a",
        "us-east-1c",
        "us-east-1d",
        "us-east-1f",
        "us-east-2a",
        "us-east-2b",
        "us-west-2a",
        "us-west-2b",
        "us-west-2c",
    ],
    "first": 1676498896.0,  # 2023-02-15 22:08:16 UTC
    "until": 1679252506.0,  # 2023-03-19 19:01:46 UTC, the last tick before the test part
    "ticks": 14111,
    "instance_type": "p3.2xlarge",
    "digest": "bc3c54ac21a4498b465152f20591b72e0076a132819bdca0ee6afbde320e2465",
}


def digest(ts: TraceSet) -> str:
    """SHA-256 of the zones, tick times and availability of ``ts``."""
    import numpy as np

    h = hashlib.sha256("\n".join(ts.zones).encode())
    h.update(np.ascontiguousarray(ts.times, dtype="<f8").tobytes())
    h.update(np.ascontiguousarray(ts.available, dtype=np.uint8).tobytes())
    return h.hexdigest()


def record(ts: TraceSet) -> dict[str, Any]:
    """The ``trained_on`` record of a model fitted on all of ``ts`` (plain types only)."""
    return {
        "zones": list(ts.zones),
        "first": float(ts.times[0]),
        "until": float(ts.times[-1]),
        "ticks": int(ts.n_ticks),
        "instance_type": ts.instance_type,
        "digest": digest(ts),
    }


def read_record(doc: dict[str, Any], path: Path) -> dict[str, Any] | None:
    """The record saved in a model document; the shipped one for the shipped file; else None
    (a file written before records, or one whose record is malformed: nothing to check)."""
    rec = doc.get("trained_on")
    if rec is None:
        same = hashlib.sha256(path.read_bytes()).hexdigest() == SHIPPED_SHA256
        return dict(SHIPPED_RECORD) if same else None
    try:
        zones = [str(z) for z in rec["zones"]]
        first, until, ticks = float(rec["first"]), float(rec["until"]), int(rec["ticks"])
        sha, itype = str(rec["digest"]), str(rec.get("instance_type", ""))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if ticks < 1 or not math.isfinite(first + until):
        return None
    return {
        "zones": zones,
        "first": first,
        "until": until,
        "ticks": ticks,
        "instance_type": itype,
        "digest": sha,
    }


def locate(rec: dict[str, Any], ts: TraceSet) -> tuple[int, int] | None:
    """The ticks ``[lo, hi)`` of ``ts`` the model was fitted on, or None when ``ts`` does not
    hold them (another trace, other zones, other availability)."""
    import numpy as np

    if list(ts.zones) != list(rec["zones"]):
        return None
    lo = int(np.searchsorted(ts.times, rec["first"], side="left"))
    hi = lo + int(rec["ticks"])
    if hi > ts.n_ticks or ts.times[lo] != rec["first"] or ts.times[hi - 1] != rec["until"]:
        return None
    return (lo, hi) if digest(ts.slice(lo, hi)) == rec["digest"] else None


def _fraction(test_fraction: float) -> str:
    """The largest ``--until`` that keeps training before the test ticks, as a user types it."""
    return f"{math.floor((1 - test_fraction) * 1e4 + 1e-6) / 1e4:g}"


def check_model_ticks(
    rec: dict[str, Any] | None, ts: TraceSet, test: tuple[int, int], test_fraction: float, path: str
) -> tuple[dict[str, Any], list[str]]:
    """What the given model's row says about its training data, and warnings to print.

    Refuses (SpecError, one line naming the fix) a model fitted on ticks of ``ts`` that reach
    into the test ticks ``test``.
    """
    until = _fraction(test_fraction)
    if rec is None:
        return {"trained_on": None, "overlap_checked": False}, [
            f"--model {path} does not record what it was trained on (an older file): whether "
            f"it saw the test ticks cannot be checked; retrain it with --until {until} to know"
        ]
    where = locate(rec, ts)
    if where is not None:
        lo, hi = where
        if hi > test[0]:
            raise SpecError(
                f"--model {path} was trained on ticks {lo}..{hi - 1} of this trace, which "
                f"overlap its test ticks {test[0]}..{test[1] - 1}: its scores would be "
                f"in-sample; train it with --until {until} or less (the eval's training part, "
                f"--test-fraction {test_fraction:g})"
            )
        return {"trained_on": f"ticks {lo}..{hi - 1} of this trace", "overlap_checked": True}, []
    shared = set(rec["zones"]) & set(ts.zones)
    if (
        shared
        and rec.get("instance_type", "") == ts.instance_type
        and rec["first"] <= float(ts.times[test[1] - 1])
        and rec["until"] >= float(ts.times[test[0]])
    ):
        return {"trained_on": "another trace", "overlap_checked": False}, [
            f"--model {path} was trained on another trace of the same zones and instance type "
            "over the same times as the test ticks: if it holds the same data, the scores are "
            "in-sample"
        ]
    return {"trained_on": "another trace", "overlap_checked": True}, []
