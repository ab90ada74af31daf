"""How the Azure Provisioner waits for a create's ARM long-running operation (an azure-core
``LROPoller``): at most ``operation_timeout_s``, cut short by a stop signal
(:mod:`spotwise.providers.stopping`, review-bb F1), and how it leaves a poller it gave up on.
Split from :mod:`spotwise.providers.azure_provisioner` so that each file stays readable."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from spotwise.providers import stopping


def wait_or_stop(poller: Any, timeout_s: float) -> bool:
    """Wait for the create's operation at most ``timeout_s``, looking every
    :data:`~spotwise.providers.stopping.HEAR_EVERY_S` whether a stop was asked: whether one was
    (the operation may still run). Raises the operation's own failure (``LROPoller.wait``)."""
    end = time.monotonic() + timeout_s
    while not poller.done():
        if stopping.requested():
            return True
        left = end - time.monotonic()
        if left <= 0:
            return False
        poller.wait(min(left, stopping.HEAR_EVERY_S))
    poller.wait(0)  # ended: its failure, if any, raised
    return False


def stop_polling(poller: Any) -> None:
    """End the poller's thread at its next pause between polls (at most one more GET) rather
    than let it poll ARM until the operation ends: the launch gave up on it. azure-core has no
    public way to stop an LROPoller; ``LROBasePolling._sleep`` is where its loop waits (pinned
    azure-core; were it renamed, the thread would merely poll on)."""

    def stop(delay: float) -> None:
        raise _Abandoned("the launch stopped waiting for this operation")

    with contextlib.suppress(Exception):
        poller.polling_method()._sleep = stop


class _Abandoned(Exception):
    """Ends an abandoned LROPoller's thread (kept by the poller, never raised to a caller)."""
