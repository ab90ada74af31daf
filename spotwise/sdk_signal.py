"""How the trial SDK holds SIGTERM: a flag for :func:`spotwise.sdk.should_stop`, without taking
the signal away from the script's own handlers.

A spot interruption notice reaches a trial as SIGTERM, so the SDK must see every SIGTERM, and a
script or a framework may want it too (a graceful-shutdown handler, PyTorch Lightning's signal
connector during ``fit``). The rules, applied from the main thread on every call into the SDK
(signals can be set only there):

- On the first call the SDK installs its handler over the one in place. When that one is a
  Python callable, the SDK's handler sets its flag and then calls it (:class:`Chained`);
  when it is ``SIG_DFL``, ``SIG_IGN`` or a handler set from C (``None``), only the flag is set:
  the SDK's handler never ends the process (replacing the default "terminate" is its purpose:
  the script saves a checkpoint and exits 0; the kill grace's SIGKILL is the backstop).
- When a handler installed *after* the SDK's is found on a later call, the SDK takes SIGTERM
  back the same way, chained to it: that handler still runs on every SIGTERM, after the flag
  is set. Were it left alone, :func:`~spotwise.sdk.should_stop` would never turn True and every
  notice would lose the work since the last periodic checkpoint. A handler that puts one of the
  SDK's handlers back (a framework's teardown) is simply kept.
- Taking it back from ``SIG_DFL``, ``SIG_IGN`` or a C handler set after the SDK's overrides a
  choice someone made: it is said once, on stderr and as an event (:data:`RESET_EVENT`).

A SIGTERM that arrives while another handler holds the signal, before the SDK's next call,
reaches only that handler; the stop file (``SPOTWISE_STOP_FILE``) is the way no handler can
take away.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

Handler = Callable[[int, FrameType | None], Any]
RESET_EVENT = "sigterm_handler_reset"  # the SDK took SIGTERM back from SIG_DFL/SIG_IGN/C


class Chained:
    """The SDK's handler over a script's: the flag first (it holds even if the script's handler
    raises, e.g. ``SystemExit``), then the script's handler, as it would have run alone."""

    def __init__(self, flag: Handler, previous: Handler) -> None:
        self.flag, self.previous = flag, previous

    def __call__(self, signum: int, frame: FrameType | None) -> Any:
        self.flag(signum, frame)
        return self.previous(signum, frame)

    def __repr__(self) -> str:
        return f"<spotwise.sdk SIGTERM handler, then {describe(self.previous)}>"


def describe(handler: object) -> str:
    """A handler as a message names it: ``SIG_DFL``, ``SIG_IGN``, ``a handler set from C`` or
    the callable's module and name."""
    if handler is None:
        return "a handler set from C"
    if isinstance(handler, signal.Handlers):
        return handler.name
    name = getattr(handler, "__qualname__", None) or type(handler).__qualname__
    return f"{getattr(handler, '__module__', None) or '?'}.{name}"


def is_ours(handler: object, flag: Handler) -> bool:
    return handler is flag or isinstance(handler, Chained)


def hold_sigterm(flag: Handler, held: object) -> tuple[object, str | None]:
    """Make SIGTERM's handler the SDK's (see the module docstring). ``held`` is the handler the
    SDK installed last (None before the first call). Returns ``(the SDK's handler now
    installed, what a later installation had set that was not a Python callable, else
    None)``; the caller warns about the second once. Never raises: where signals cannot be
    set (an embedded interpreter) the handler stays as it is."""
    try:
        current = signal.getsignal(signal.SIGTERM)
        if current is held and held is not None:
            return held, None  # the usual case: nothing changed
        if is_ours(current, flag):
            return current, None  # one of the SDK's, put back by whoever replaced it
        mine: Handler = Chained(flag, current) if callable(current) else flag
        signal.signal(signal.SIGTERM, mine)
    except (ValueError, OSError):  # no signal support here
        return held, None
    overridden = held is not None and not callable(current)
    return mine, (describe(current) if overridden else None)


def say_reset(overridden: str, step: int, emit: Callable[[dict[str, Any]], None]) -> None:
    """Say on stderr, and as an event, that SIGTERM was taken back from ``overridden``."""
    print(
        f"spotwise: SIGTERM's handler was set to {overridden} after the SDK's; the SDK took "
        "it back (a stop request, such as a spot interruption notice, comes as SIGTERM and "
        "must reach should_stop()): install a Python handler instead, which the SDK calls "
        "after its own",
        file=sys.stderr,
        flush=True,
    )
    emit({"type": RESET_EVENT, "step": step, "handler": overridden})
