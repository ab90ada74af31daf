"""A launch whose call failed for a passing reason, re-issued with the SAME request.

A launch call that fails with a :class:`~spotwise.errors.TransientError` (a 5xx, a timeout, a
throttled answer) says nothing of the create: the cloud may have made the instance and lost
the answer. Every provisioner is idempotent on ``LaunchRequest.client_token`` (the launch id
recorded before the call: AWS's ``ClientToken`` and ``spotwise:launch`` tag, GCP's instance name
and ``requestId``, Azure's VM name), so calling again with the same request either returns the
instance the first call made (adopted: nothing wasted, nothing terminated, no relaunch hold)
or makes it now, which the trial needs anyway. Its record stays ``requested`` meanwhile, with
its launch tag, so a drain or `spotwise cancel` finds it as any launch in flight.

The rules (:class:`~spotwise.planner.actions.Actions` makes the calls):

- after a failed call the trial waits a pause (a throttled one: its provider's doubling
  pause; a 5xx or a timeout: the same doubling pause, for this request alone), then its next
  launch the policy asks for re-issues the request, same launch id, attempt, offer and env,
  provided the policy names the same offer (its budget and deadline checks were then made on
  exactly this launch, at the offer's current price);
- at most :data:`SAME_REQUEST_RETRIES` retries; after the last one fails, or once the policy
  no longer asks for the trial on that offer (it names another, or none for
  :data:`PASSED_OVER_PASSES` passes after the pause: a budget wait, a stop, a cancel), or
  at the end of the job, the launch goes the way of any failed launch that may have left an
  instance (:meth:`~spotwise.planner.launch_cleanup.LaunchCleanup._close_failed_launch`,
  ``unsure``): looked for by its launch tag, terminated and billed, its trial held meanwhile;
- a retry that fails with a capacity or provider error goes that way at once (an earlier
  call's create may still have happened).

A retry that returns an instance is a normal launch; its ``launch`` event says
``retry_of_same_request: N`` (the N-th retry: the instance is the one an earlier call made, or
this call's, which the provider cannot tell apart). Each failed call writes its
``launch_interrupted`` / ``launch_throttled`` event with its launch id, its retry number and
``then`` (``retry`` or ``cleanup``); a request given up on between calls writes
``launch_abandoned`` with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from spotwise.planner.ledger import Ledger
from spotwise.planner.policy import Phase
from spotwise.planner.runstate import TrialRun
from spotwise.providers.base import LaunchRequest, Offer

#: Calls of the same launch request after the first one failed for a passing reason (a 5xx, a
#: timeout, a throttled answer): four calls in all, on a doubling pause, before the launch is
#: cleaned up as any failed launch that may have left an instance, and the trial relaunched.
SAME_REQUEST_RETRIES = 3
#: Passes, once a retry's pause is over, in which the policy may leave the trial unlaunched
#: before the request is given up on (the first may have been decided on offers read while
#: the pause was still on). Its instance, if the cloud made one, is running meanwhile.
PASSED_OVER_PASSES = 3


@dataclass
class SameRequest:
    """A launch whose last call failed for a passing reason, to be called again as is."""

    trial: TrialRun
    request: LaunchRequest  # the very request: same launch id (client token), env, offer
    asked_at: float  # market time of its first call (its record's request)
    attempt: int  # the attempt number its env carries
    retries: int = 0  # calls made after the first
    retry_at: float = 0.0  # market time before which it is not called again
    passed_over: int = 0  # passes since its pause ended in which the policy did not ask

    @property
    def launch_id(self) -> str:
        return self.request.client_token

    @property
    def offer(self) -> Offer:
        return self.request.offer


class LaunchRetry(Ledger):
    """The bookkeeping of launches waiting for a same-request retry (a mixin of the
    orchestrator, under :class:`~spotwise.planner.actions.Actions`)."""

    throttled: dict[str, tuple[float, float]]  # provider → (until, last pause)
    cancelled: bool

    @cached_property
    def same_requests(self) -> dict[str, SameRequest]:
        """Trial id → its launch waiting for a same-request retry (at most one a trial)."""
        return {}

    def _retry_due(self, p: SameRequest, now: float) -> bool:
        """Whether ``p``'s pause is over (its own, and its provider's throttle pause)."""
        until, _ = self.throttled.get(p.offer.provider, (0.0, 0.0))
        return now >= max(p.retry_at, until)

    def _abandon_same_request(self, p: SameRequest, now: float, reason: str) -> None:
        """No more retries of ``p``: clean it up as any launch whose call failed for a passing
        reason (its instance, if an earlier call made one, found by its launch tag,
        terminated and billed; its trial held while that is unconfirmed)."""
        self.same_requests.pop(p.trial.trial_id, None)
        self._event(
            "launch_abandoned", now, p.trial, offer=p.offer.key, launch=p.launch_id, reason=reason
        )
        self._close_failed_launch(p.trial, p.launch_id, p.asked_at, p.offer, unsure=True)

    def _settle_same_requests(self, now: float) -> None:
        """Each pass: give up the retries the job will not make (its trial is done or the job
        cancelled; or the policy left it unlaunched :data:`PASSED_OVER_PASSES` passes after
        its pause)."""
        for p in list(self.same_requests.values()):
            if self.cancelled or p.trial.phase not in (Phase.QUEUED, Phase.WAITING):
                self._abandon_same_request(p, now, "its trial is no longer to be launched")
            elif self._retry_due(p, now):
                p.passed_over += 1
                if p.passed_over >= PASSED_OVER_PASSES:
                    self._abandon_same_request(p, now, "the policy did not launch its trial")

    def _retry_unconfirmed(self) -> None:
        """Each pass of the loop: the failed launches' cleanups, and the retries given up."""
        super()._retry_unconfirmed()
        if self.same_requests:  # (a replayed clock may move when read: only when needed)
            self._settle_same_requests(self.backend.now())

    def _settle_unconfirmed(self, now: float) -> None:
        """The drain: a launch still waiting for a retry is cleaned up with the others."""
        for p in list(self.same_requests.values()):
            self._abandon_same_request(p, now, "the job is ending")
        super()._settle_unconfirmed(now)

    def _running_cost(self, now: float) -> float:
        """As the ledger's, with each launch waiting for a retry counted, as a failed launch
        not confirmed clean is, at its offer's price from its first call: the cloud may have
        made its instance, running and billed."""
        total = super()._running_cost(now)
        for p in self.same_requests.values():
            segs = self.backend.segments(p.offer, min(p.asked_at, now), now)
            total += sum(s * price for s, price in segs) / 3600.0
        return total
