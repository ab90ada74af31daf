"""One deadline for a whole cloud API call, whatever its server does; provider-neutral.

The SDKs' own timeouts bound each request, and requests' ``timeout`` each socket read, not an
answer: a listing of many pages, each within its bounds, takes pages × those bounds, and a
server that trickles its answer holds the caller for as long as it trickles.
:func:`call_within` runs the call in a daemon thread and waits for it until the deadline, then
raises :class:`CallDeadlineExceeded`. The thread is left to end on its own (its request times
out or ends; the SDK wrappers cut what it may still send to the time that was left).

Used by :class:`spotwise.providers.gcp_errors.BoundedClient` (Compute Engine) and
:class:`spotwise.providers.azure_token.BoundedARM` (Azure Resource Manager).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class CallDeadlineExceeded(TimeoutError):
    """A call (a listing: all its pages) had no complete answer within ``api_deadline_s``;
    ``last`` is the last failure it retried, if any (the providers' ``api_error`` reports that
    one when it is a failure that passes)."""

    def __init__(self, deadline_s: float, last: Exception | None = None) -> None:
        super().__init__(f"no complete answer within api_deadline_s = {deadline_s:g} s")
        self.deadline_s = deadline_s
        self.last = last


def _none() -> Exception | None:
    return None


def call_within(
    end: float,
    deadline_s: float,
    work: Callable[[], T],
    *,
    last: Callable[[], Exception | None] = _none,
    name: str = "spotwise-call",
) -> T:
    """``work()``'s result (or its exception), or :class:`CallDeadlineExceeded` (``deadline_s``,
    ``last()``) when it has not ended by ``end`` (``time.monotonic()``): it runs in a daemon
    thread named ``name`` that the caller waits for until then."""
    left = end - time.monotonic()
    if left <= 0:
        raise CallDeadlineExceeded(deadline_s, last())
    box: list[tuple[bool, Any]] = []
    done = threading.Event()

    def run() -> None:
        try:
            box.append((True, work()))
        except BaseException as e:  # handed to the caller, who may be gone
            box.append((False, e))
        finally:
            done.set()

    threading.Thread(target=run, name=name, daemon=True).start()
    if not done.wait(left):
        raise CallDeadlineExceeded(deadline_s, last())
    ok, value = box[0]
    if not ok:
        raise value
    result: T = value
    return result
