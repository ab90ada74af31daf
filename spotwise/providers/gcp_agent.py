"""Trial-side agent for GCE: start the trial, watch for preemption, pass the notice on.

Started by the fixed startup script of every spotwise instance::

    python3 -m spotwise.providers.gcp_agent --from-metadata

It reads the launch spec from the ``spotwise-launch`` metadata item (JSON, never parsed by a
shell; see :mod:`spotwise.providers.channel`) and polls ``instance/preempted`` on the metadata
server. When it turns ``TRUE`` the notice (``{"received_at", "deadline"}``, deadline 30 s on)
goes to the controller and the trial's session gets SIGTERM, so ``spotwise.sdk`` checkpoints
and exits. The agent also writes the ``spotwise/notice`` guest attribute, which
:meth:`GcpProvisioner.notices` reads as well.

* With an ``artifacts`` folder in the spec (what :class:`GcpProvisioner` always sends) the
  trial runs under :class:`~spotwise.providers.trial_agent.TrialAgent`: its events, the
  notice and its exit code go to the folder (``gs://`` through
  :mod:`spotwise.providers.gcs_blobs`, which needs ``google-cloud-storage`` on the image and
  takes the VM's service account from the metadata server; ``file://`` needs nothing), a stop
  marker and live settings come back from it.
* Without one (a hand-written spec) it only runs the trial (:func:`run_trial`: its whole
  session, as the agent does) and appends the notice to the trial's ``SPOTWISE_EVENTS_FILE``,
  if the spec names one.

The metadata base URL is ``$SPOTWISE_GCE_METADATA_URL`` (default
``http://metadata.google.internal``) so tests can point it at a local server; it is read with
the standard library. :func:`run_trial` is cloud-neutral and also drives
:mod:`spotwise.providers.azure_agent` without a folder.
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

from spotwise.providers.channel import parse_launch
from spotwise.providers.proc_group import Group

DEFAULT_METADATA_URL = "http://metadata.google.internal"
NOTICE_LEAD_S = 30.0  # GCE gives ~30 s between the preemption notice and the stop
KILL_GRACE_S = 25.0  # SIGKILL what is left of the trial this long after the notice's SIGTERM
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
    kill_grace_s: float = KILL_GRACE_S,
) -> int:
    """Run the trial; on the first notice call ``on_notice`` and SIGTERM the trial's session.

    The trial is its whole session, as under the agent
    (:class:`~spotwise.providers.proc_group.Group`): this returns once no process of it is
    left, not when its first one exits (a wrapper's shell dies at the notice while its trainer
    saves); what the first process leaves behind, or what a notice's SIGTERM leaves of a
    trial whose first process exited, is SIGKILLed ``kill_grace_s`` later. Ctrl-C stops it the
    same way. Returns the first process's exit code (the agent's own exit code).
    """
    full_env = {**os.environ, **dict(env)}
    proc = subprocess.Popen(
        list(argv),
        env=full_env,
        cwd=workdir or None,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    group = Group(proc)
    noticed = False
    try:
        while (code := group.poll(kill_grace_s)) is None:
            if not noticed:
                hit = watch()
                if hit is not None:
                    noticed = True
                    record_notice(env, *hit)
                    on_notice(*hit)
                    group.signal(signal.SIGTERM, time.monotonic() + kill_grace_s)
            time.sleep(poll_s)
    except KeyboardInterrupt:
        return group.stop(kill_grace_s)
    return code


def run_channel(
    spec: Mapping[str, Any],
    watch: Watch,
    on_notice: Callable[[float, float], object],
    poll_s: float,
) -> int:
    """Run a launch that names an artifacts folder under the cloud-neutral trial agent:
    ``watch`` (``(received_at, deadline)`` once preempted) becomes its notice watcher."""
    import logging

    from spotwise.providers.blobs_open import open_blobs
    from spotwise.providers.channel import trial_config
    from spotwise.providers.trial_agent import TrialAgent

    logging.basicConfig(level=logging.INFO, format="%(asctime)s spotwise-agent %(message)s")
    noticed: list[bool] = []

    def watcher() -> list[dict[str, Any]]:
        hit = None if noticed else watch()
        if hit is None:
            return []
        noticed.append(True)
        return [{"kind": "interruption", "received_at": hit[0], "deadline": hit[1]}]

    agent = TrialAgent(
        # SIGKILL a trial that ignores the notice before the VM goes (30 s on GCE and Azure)
        trial_config(spec, poll_s=poll_s, sync_s=max(poll_s, 2.0), kill_grace_s=KILL_GRACE_S),
        open_blobs(spec["artifacts"], channel=True),
        watcher,
        on_notice=lambda n: on_notice(float(n["received_at"]), float(n["deadline"])),
    )
    old = signal.getsignal(signal.SIGTERM)
    agent.install_sigterm()
    try:
        return agent.run()
    finally:
        signal.signal(signal.SIGTERM, old)


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
    if spec["artifacts"]:
        return run_channel(
            spec,
            lambda: preempted(base),
            lambda at, deadline: report_notice(at, deadline, base),
            ns.poll,
        )
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
