"""Whether the job running in this process was asked to stop by a signal, for the providers'
long waits (review-bb F1).

A cloud create can take minutes (a GCE zone operation, an ARM long-running operation: up to
``operation_timeout_s``, 600 s by default). The orchestrator hears a stop signal only between
its passes, so a stop that lands in such a wait used to wait it out, far past the ~70 s its
stderr line promises and a supervisor's SIGKILL (whose VMs then run, billed, until `spotwise
cancel`). :mod:`spotwise.planner.signals`' handler calls :func:`set` (its restore,
:func:`clear`); the GCP and Azure provisioners look at :func:`requested` at least every
:data:`HEAR_EVERY_S` while they wait for a create, and end the launch as a refused one (a
:class:`~spotwise.errors.CapacityError`: no failure of the trial), whose cleanup finds the VM
by its launch tag and deletes it.

No imports: it is set from a signal handler, and the providers never import the planner.
"""

from __future__ import annotations

#: How often a provider waiting for a create looks whether a stop was asked, wall s.
HEAR_EVERY_S = 0.25

_asked = False


def set() -> None:
    """A stop was asked (a signal's handler calls it)."""
    global _asked
    _asked = True


def clear() -> None:
    """No stop is asked (the job's handlers are restored, or a new job installs them)."""
    global _asked
    _asked = False


def requested() -> bool:
    """Whether a stop was asked since the last :func:`clear`."""
    return _asked
