"""The SDK's SIGTERM handler next to the script's own (review-ak F5), with real signals.

A stop request (a spot interruption notice, a migration, an early stop) reaches a trial as
SIGTERM. The SDK's handler silently replaced a handler the script had installed before its
first call (that handler never ran again), and a handler installed after it (PyTorch
Lightning's signal connector during ``fit``, a graceful-shutdown handler) silently disabled
``should_stop()``: every notice then lost the work since the last periodic checkpoint. Now the
SDK's handler calls the one it replaced, takes SIGTERM back (chained) from a later one on its
next call, and says once when it takes it back from ``SIG_DFL``/``SIG_IGN``.

Each case runs in its own interpreter (a signal handler is process-wide) and prints what it saw.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

PRELUDE = """
import json, os, signal, sys
from spotwise import sdk
seen = []
def script_handler(signum, frame):
    seen.append("script")
def term():
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(1000):  # a Python handler runs between bytecodes, at once in practice
        if seen or sdk._runtime.stop_requested:
            break
def out(**kw):
    print(json.dumps(kw))
"""


def _run(tmp_path: Path, body: str) -> tuple[dict[str, Any], str, list[dict[str, Any]]]:
    events = tmp_path / "events.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTWISE_")}
    env["SPOTWISE_EVENTS_FILE"] = str(events)
    code = PRELUDE + textwrap.dedent(body)
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    lines = events.read_text().splitlines() if events.exists() else []
    return json.loads(proc.stdout.splitlines()[-1]), proc.stderr, [json.loads(x) for x in lines]


def test_a_handler_installed_before_the_sdk_still_runs(tmp_path: Path) -> None:
    got, err, _ = _run(
        tmp_path,
        """
        signal.signal(signal.SIGTERM, script_handler)
        sdk.params()  # the SDK's first call installs its handler
        term()
        out(seen=seen, stop=sdk.should_stop())
        """,
    )
    assert got == {"seen": ["script"], "stop": True}
    assert err == ""


def test_a_handler_installed_after_the_sdk_leaves_should_stop_working(tmp_path: Path) -> None:
    """A framework's handler set during training: taken back at the SDK's next call, chained."""
    got, err, events = _run(
        tmp_path,
        """
        sdk.params()
        signal.signal(signal.SIGTERM, script_handler)  # e.g. Lightning's, at fit()
        sdk.report(1, 0.5)  # the SDK's next call
        term()
        out(seen=seen, stop=sdk.should_stop())
        """,
    )
    assert got == {"seen": ["script"], "stop": True}
    assert err == ""  # a Python handler is called, not overridden: nothing to warn about
    assert [e["type"] for e in events] == ["report", "stopping"]
    assert events[1]["reason"] == "signal" and events[1]["step"] == 1


def test_a_script_handler_that_exits_still_leaves_the_stop_seen(tmp_path: Path) -> None:
    """The flag is set before the script's handler runs, so its SystemExit does not lose it."""
    got, _, _ = _run(
        tmp_path,
        """
        sdk.params()
        def leave(signum, frame):
            raise SystemExit(3)
        signal.signal(signal.SIGTERM, leave)
        sdk.should_stop()
        try:
            term()
        except SystemExit as e:
            out(code=e.code, stop=sdk.should_stop())
        """,
    )
    assert got == {"code": 3, "stop": True}


@pytest.mark.parametrize("reset", ["SIG_IGN", "SIG_DFL"])
def test_a_reset_to_ignore_or_default_is_taken_back_with_one_warning(
    tmp_path: Path, reset: str
) -> None:
    """SIG_DFL would kill the trial at the notice, without a checkpoint; SIG_IGN would hide the
    notice from should_stop(). The SDK's handler never ends the process itself."""
    got, err, events = _run(
        tmp_path,
        f"""
        sdk.report(4, 0.5)
        signal.signal(signal.SIGTERM, signal.{reset})
        sdk.should_stop(); sdk.should_stop()
        signal.signal(signal.SIGTERM, signal.{reset})
        sdk.should_stop()  # taken back again, said only once
        term()
        out(stop=sdk.should_stop(), alive=True)
        """,
    )
    assert got == {"stop": True, "alive": True}
    warning = (
        f"spotwise: SIGTERM's handler was set to {reset} after the SDK's; the SDK took it back "
        "(a stop request, such as a spot interruption notice, comes as SIGTERM and must reach "
        "should_stop()): install a Python handler instead, which the SDK calls after its own\n"
    )
    assert err == warning
    said = [e for e in events if e["type"] == "sigterm_handler_reset"]
    assert [(e["step"], e["handler"]) for e in said] == [(4, reset)]


def test_a_framework_that_puts_the_sdk_handler_back_is_not_wrapped_again(
    tmp_path: Path,
) -> None:
    """Lightning's teardown restores the handler it found: the SDK keeps that one (no chain
    that grows with every fit), and the script's first handler runs once per SIGTERM."""
    got, _, _ = _run(
        tmp_path,
        """
        signal.signal(signal.SIGTERM, script_handler)
        sdk.params()
        first = signal.getsignal(signal.SIGTERM)
        for _ in range(3):  # three fits
            found = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, lambda s, f: seen.append("framework"))
            sdk.should_stop()  # taken back, chained to the framework's
            signal.signal(signal.SIGTERM, found)  # its teardown
            sdk.should_stop()
        term()
        out(same=signal.getsignal(signal.SIGTERM) is first, seen=seen, stop=sdk.should_stop())
        """,
    )
    assert got == {"same": True, "seen": ["script"], "stop": True}
