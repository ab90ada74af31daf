"""Trial-side agent for GCE: start the trial, watch for preemption, pass the notice on.

Started by the fixed startup script of every spotwise instance::

    python3 -m spotwise.providers.gcp_agent --from-metadata

It reads the trial's ``argv``/``env``/``workdir`` from the ``spotwise-launch`` metadata item
(JSON; never parsed by a shell), runs the trial as a child process (argv list, own session),
and polls ``instance/preempted`` on the metadata server. When it turns ``TRUE`` the agent

1. writes the ``spotwise/notice`` guest attribute (``{"received_at", "deadline"}``), which the
   controller's :meth:`GcpProvisioner.notices` reads, and
2. sends SIGTERM to the trial's process group so ``spotwise.sdk`` checkpoints and exits.

The metadata base URL is ``$SPOTWISE_GCE_METADATA_URL`` (default
``http://metadata.google.internal``) so tests can point it at a local server. Only the
standard library is used (the instance image needs spotwise, nothing else).

:func:`run_trial` is cloud-neutral and also drives :mod:`spotwise.providers.azure_agent`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any

DEFAULT_METADATA_URL = "http://metadata.google.internal"
NOTICE_LEAD_S = 30.0  # GCE gives ~30 s between the preemption notice and the stop
Watch = Callable[[], "tuple[float, float] | None"]  # → (received_at, deadline) once preempted


def metadata_base() -> str:
    base = os.environ.get("SPOTWISE_GCE_METADATA_URL") or DEFAULT_METADATA_URL
    return base.rstrip("/") + "/computeMetadata/v1"


def _request(
    url: str, *, data: bytes | None = None, method: str = "GET", timeout: float = 5.0
) -> str:
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Metadata-Flavor": "Google"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        body: bytes = resp.read()
    return body.decode("utf-8")


def read_launch(base: str | None = None) -> dict[str, Any]:
    """The launch spec the controller put in the ``spotwise-launch`` metadata item."""
    text = _request(f"{base or metadata_base()}/instance/attributes/spotwise-launch")
    return parse_launch(text)


def parse_launch(text: str) -> dict[str, Any]:
    spec = json.loads(text)
    argv = spec.get("argv") if isinstance(spec, dict) else None
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError("spotwise-launch: 'argv' must be a non-empty list of strings")
    env = spec.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise ValueError("spotwise-launch: 'env' must map names to strings")
    return {"argv": argv, "env": env, "workdir": str(spec.get("workdir") or "")}


def preempted(
    base: str | None = None, clock: Callable[[], float] = time.time
) -> tuple[float, float] | None:
    """(received_at, deadline) if the metadata server says this VM is being preempted."""
    try:
        value = _request(f"{base or metadata_base()}/instance/preempted", timeout=2.0)
    except (urllib.error.URLError, OSError):
        return None
    if value.strip().upper() == "TRUE":
        now = clock()
        return now, now + NOTICE_LEAD_S
    return None


def report_notice(received_at: float, deadline: float, base: str | None = None) -> bool:
    """Write the ``spotwise/notice`` guest attribute; False when the server refuses it."""
    body = json.dumps({"type": "notice", "received_at": received_at, "deadline": deadline})
    try:
        _request(
            f"{base or metadata_base()}/instance/guest-attributes/spotwise/notice",
            data=body.encode(),
            method="PUT",
        )
    except (urllib.error.URLError, OSError):
        return False
    return True


def record_notice(env: Mapping[str, str], received_at: float, deadline: float) -> None:
    """Append a ``notice`` record to the trial's ``SPOTWISE_EVENTS_FILE`` (the stream a progress
    store carries to the controller), when the launch set one."""
    path = env.get("SPOTWISE_EVENTS_FILE")
    if not path:
        return
    rec = {"type": "notice", "received_at": received_at, "deadline": deadline, "time": time.time()}
    with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(rec) + "\n")


def run_trial(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    watch: Watch,
    on_notice: Callable[[float, float], object],
    workdir: str = "",
    poll_s: float = 1.0,
) -> int:
    """Run the trial; on the first notice call ``on_notice`` and SIGTERM the trial's group.

    Returns the trial's exit code (the agent's own exit code).
    """
    full_env = {**os.environ, **dict(env)}
    proc = subprocess.Popen(
        list(argv),
        env=full_env,
        cwd=workdir or None,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    noticed = False
    try:
        while proc.poll() is None:
            if not noticed:
                hit = watch()
                if hit is not None:
                    noticed = True
                    record_notice(env, *hit)
                    on_notice(*hit)
                    _signal_group(proc, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=poll_s)
    except KeyboardInterrupt:
        _signal_group(proc, signal.SIGTERM)
        proc.wait()
    return int(proc.returncode)


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def main(args: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spotwise.providers.gcp_agent")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--from-metadata", action="store_true", help="read spotwise-launch from metadata"
    )
    src.add_argument("--launch", metavar="FILE", help="read the launch JSON from a file")
    parser.add_argument("--poll", type=float, default=1.0, help="seconds between metadata polls")
    ns = parser.parse_args(args)
    base = metadata_base()
    if ns.launch:
        with open(ns.launch, encoding="utf-8") as fh:
            spec = parse_launch(fh.read())
    else:
        spec = read_launch(base)
    return run_trial(
        spec["argv"],
        spec["env"],
        workdir=spec["workdir"],
        poll_s=ns.poll,
        watch=lambda: preempted(base),
        on_notice=lambda at, deadline: report_notice(at, deadline, base),
    )


if __name__ == "__main__":
    sys.exit(main())
