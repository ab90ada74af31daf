"""The "no word" limit: an instance life that has said nothing since its launch is released.

A life ends when its agent reports an exit code, the cloud lists its instance ended, a notice
comes, or the planner stops it. An agent that never starts (a failing AWS ``setup`` line,
spotwise missing from the image, an import error, a crash before it writes its status) says
none of these: its VM ran on, billed, holding one of the job's ``parallel`` slots, and
the start-up spare of the budget's shedding (``_starting``) called it "starting" for ever
(helper E, s22). So a life from which nothing has been heard ``no_word_limit_s`` after its
launch (its instance's start as its provider gives it) is ended here: its attempt fails with
a one-line reason naming the limit and what to check, its instance is terminated and billed
to now as any release. The failure counts toward the trial's (two and the trial has failed;
two trials failed with no step reported and the job stops: ``_broken``).

*Word* is any record the trial wrote through the SDK (a report, a checkpoint, a warning), or
the agent's status where its provisioner says it has read one (an optional
``agent_heard(instance_id) -> bool`` method, :func:`agent_heard`; a provisioner without it is
judged on the trial's records alone). A life under a notice or a rebalance (the agent wrote
it), or one asked to stop (the overdue stop ends it), is left to those rules.

The limit is market time (on a replay, trace seconds): ``budget.start_timeout_minutes`` when
the spec sets it, else :data:`NO_WORD_S` and at least :data:`NO_WORD_MIN_WALL_S` of the
market's wall clock (a replay runs hundreds of market seconds a wall second: a trial's
imports alone would be minutes of it); never below :data:`STARTUP_FACTOR` times the longest
start-up (launch to first report) the job has measured.
"""

from __future__ import annotations

import logging

from spotwise.planner.job_summary import JobSummary
from spotwise.planner.policy import Event
from spotwise.planner.runstate import Life, TrialRun
from spotwise.providers.base import InstanceState

log = logging.getLogger("spotwise.planner")
NO_WORD_S = 1800.0  # market seconds a life may stay silent by default (30 minutes)
NO_WORD_MIN_WALL_S = 600.0  # ... and at least this many wall seconds of the market's clock
STARTUP_FACTOR = 3.0  # never below this many times the job's longest measured start-up


def no_word_limit_s(minutes: float | None, trials: list[TrialRun], speedup: float) -> float:
    """Market seconds a life may go without a word from its launch (see the module docstring):
    ``minutes`` (the spec's ``budget.start_timeout_minutes``) or the default, and never below
    :data:`STARTUP_FACTOR` times the longest start-up measured (``restart_overhead_s``)."""
    base = minutes * 60.0 if minutes is not None else max(NO_WORD_S, NO_WORD_MIN_WALL_S * speedup)
    measured = [t.restart_overhead_s for t in trials if t.restart_overhead_s is not None]
    return max(base, STARTUP_FACTOR * max(measured, default=0.0))


def agent_heard(provisioner: object, instance_id: str) -> bool:
    """Whether ``provisioner`` has read a status written by ``instance_id``'s agent: its
    optional ``agent_heard`` method (as :func:`~spotwise.providers.base.ended_unlisted` reads
    an optional one); False for a provisioner without it."""
    method = getattr(provisioner, "agent_heard", None)
    return bool(method(instance_id)) if method is not None else False


def no_word_reason(life: Life, limit_s: float, speedup: float, local: bool) -> str:
    """The failed attempt's error: the limit, what was not heard, what to check."""
    said = f"{limit_s / 60.0:.4g} min"
    if local:
        wall = f" ({limit_s / speedup:.3g} wall s at the replay's speedup)" if speedup != 1 else ""
        return (
            f"its trial reported nothing in {said} of market time{wall} from its start "
            "(budget.start_timeout_minutes): ended as a failed attempt; check that the command "
            "starts and calls spotwise.sdk.report() (its log), or raise the limit"
        )
    cloud = life.offer.provider
    setup = ", options.setup" if cloud == "aws" else ""
    return (
        f"its instance sent no word (no agent status, no trial record) in {said} from its "
        f"launch (budget.start_timeout_minutes): released as a failed attempt; check the "
        f"instance's console/serial log, the image (spotwise installed: python3 -m "
        f"spotwise.providers.{cloud}_agent){setup}, or raise the limit if the trial's first "
        "report takes longer"
    )


class NoWord(JobSummary):
    """The orchestrator's side of the limit (a mixin of
    :class:`~spotwise.planner.orchestrator.Orchestrator`, over
    :class:`~spotwise.planner.job_summary.JobSummary`)."""

    def _no_word_s(self) -> float:
        """This job's limit now (it rises with the start-ups measured)."""
        minutes = self.spec.budget.start_timeout_minutes
        return no_word_limit_s(minutes, self.trials, self.backend.speedup)

    def _release_silent(self, now: float) -> list[Event]:
        """End each life that has said nothing for the limit (see the module docstring):
        its attempt failed, its instance terminated and billed to ``now`` (a refused
        terminate is retried by the ledger as for any exited life); returns the exits, as
        events for the policy."""
        events: list[Event] = []
        limit: float | None = None
        prov = self.backend.provisioner
        for iid, (t, life) in list(self.lives.items()):
            if life.exited or life.heard or t.life is not life or t.stopping is not None:
                continue
            if life.notice_deadline is not None or life.rebalanced:
                continue  # the agent wrote the notice; the provider is ending the life
            if agent_heard(prov, iid):
                life.heard = True
                continue
            limit = self._no_word_s() if limit is None else limit
            silent = now - life.launched_at
            if silent < limit:
                continue
            local = any(p.name == "local" for p in self.spec.providers)
            why = no_word_reason(life, limit, self.backend.speedup, local)
            log.warning("%s: trial %s: %s", self.job_id, t.trial_id, why)
            self._event("no_word", now, t, limit_s=limit, silent_s=silent)
            events.append(self._on_exit(t, None, InstanceState.RUNNING, now, why=why))
            if self._try_release(t, iid, life, now, "the instance that sent no word"):
                self._bill(t, life, InstanceState.TERMINATED, now)
        return events
