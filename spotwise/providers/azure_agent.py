"""Trial-side agent for Azure: start the trial, watch Scheduled Events, pass a Preempt on.

Started by the VM's cloud-init custom data::

    python3 -m spotwise.providers.azure_agent --launch /var/lib/spotwise/launch.json

It polls the Instance Metadata Service's Scheduled Events
(``GET /metadata/scheduledevents?api-version=2020-07-01``, header ``Metadata: true``). On an
``EventType: "Preempt"`` event (a Spot eviction; ``NotBefore`` is at least 30 s away) the notice
(deadline = ``NotBefore``) goes to the controller and the trial's process group gets SIGTERM so
it checkpoints.

* With an ``artifacts`` folder in the launch spec (what :class:`AzureProvisioner` always sends)
  the trial runs under :class:`~spotwise.providers.trial_agent.TrialAgent` (see
  :func:`spotwise.providers.gcp_agent.run_channel`): its events, the notice and its exit code
  go to the folder (``az://`` through :mod:`spotwise.providers.azure_blobs`, which needs
  ``azure-storage-blob`` on the image and the VM's managed identity; ``file://`` needs
  nothing), a stop marker and live settings come back from it.
* Without one it only runs the trial and appends a ``notice`` record to the trial's
  ``SPOTWISE_EVENTS_FILE``, if the spec names one.

The IMDS base URL is ``$SPOTWISE_AZURE_IMDS_URL`` (default ``http://169.254.169.254``), read
with the standard library.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from email.utils import parsedate_to_datetime
from typing import Any

from spotwise.providers.channel import parse_launch
from spotwise.providers.gcp_agent import run_channel, run_trial

DEFAULT_IMDS_URL = "http://169.254.169.254"
API_VERSION = "2020-07-01"
MIN_LEAD_S = 30.0  # Preempt events come at least 30 s before NotBefore


def imds_base() -> str:
    return (os.environ.get("SPOTWISE_AZURE_IMDS_URL") or DEFAULT_IMDS_URL).rstrip("/")


def scheduled_events(base: str | None = None, timeout: float = 2.0) -> dict[str, Any]:
    url = f"{base or imds_base()}/metadata/scheduledevents?api-version={API_VERSION}"
    req = urllib.request.Request(url, headers={"Metadata": "true"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        doc = json.loads(resp.read().decode("utf-8"))
    return doc if isinstance(doc, dict) else {}


def preempt_notice(
    doc: dict[str, Any], clock: Callable[[], float] = time.time
) -> tuple[float, float] | None:
    """(received_at, deadline) for a ``Preempt`` event in a Scheduled Events document."""
    for event in doc.get("Events") or []:
        if not isinstance(event, dict) or event.get("EventType") != "Preempt":
            continue
        now = clock()
        try:
            deadline = parsedate_to_datetime(str(event.get("NotBefore"))).timestamp()
        except (TypeError, ValueError):
            deadline = now + MIN_LEAD_S
        return now, max(now, deadline)
    return None


def watch(base: str | None = None) -> tuple[float, float] | None:
    try:
        return preempt_notice(scheduled_events(base))
    except (urllib.error.URLError, OSError, ValueError):
        return None


def main(args: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spotwise.providers.azure_agent")
    parser.add_argument("--launch", metavar="FILE", required=True, help="the launch JSON")
    parser.add_argument("--poll", type=float, default=1.0, help="seconds between IMDS polls")
    ns = parser.parse_args(args)
    with open(ns.launch, encoding="utf-8") as fh:
        spec = parse_launch(fh.read())
    base = imds_base()
    if spec["artifacts"]:
        return run_channel(spec, lambda: watch(base), lambda at, deadline: None, ns.poll)
    return run_trial(
        spec["argv"],
        spec["env"],
        workdir=spec["workdir"],
        poll_s=ns.poll,
        watch=lambda: watch(base),
        on_notice=lambda at, deadline: None,
    )


if __name__ == "__main__":
    sys.exit(main())
