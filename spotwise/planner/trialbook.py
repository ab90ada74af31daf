"""How the orchestrator takes in what a trial reports and how a trial attempt ends.

A mixin of :class:`~spotwise.planner.orchestrator.Orchestrator`, kept apart so each file stays
readable: progress records become observations and events; an instance's end becomes the
trial's next phase (completed, stopped early, failed, or waiting to resume elsewhere).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from spotwise.planner.backend import Backend
from spotwise.planner.policy import Event, InstanceLost, Phase, Progress, TrialExited
from spotwise.planner.report import best_of
from spotwise.planner.runstate import Life, TrialRun
from spotwise.planner.search import Search
from spotwise.providers.base import InstanceState
from spotwise.spec import JobSpec

MAX_FAILURES = 2  # attempts of a trial that may crash before it is marked failed


class TrialBook:
    backend: Backend
    store: Any
    spec: JobSpec
    search: Search
    run_dir: Path
    trials: list[TrialRun]
    revocations: int
    early_stopped: int

    def _event(self, kind: str, now: float, t: TrialRun | None = None, **detail: Any) -> None:
        raise NotImplementedError

    def _read_progress(self, t: TrialRun, life: Life, now: float) -> list[Event]:
        events: list[Event] = []
        for rec in self.backend.provisioner.progress(life.instance_id):
            kind, step = rec.get("type"), rec.get("step")
            if not isinstance(step, int):
                continue
            if kind == "report":
                metric = rec.get("metric")
                value = float(metric) if isinstance(metric, int | float) else None
                if life.first_report_at is None:
                    life.first_report_at, life.first_report_step = now, step
                    t.restart_overhead_s = now - life.launched_at
                elif step > life.first_report_step:
                    t.seconds_per_step = (now - life.first_report_at) / (
                        step - life.first_report_step
                    )
                life.max_step = max(life.max_step, step)
                t.step = max(t.step, step)
                t.furthest = max(t.furthest, step)
                if value is not None:
                    t.curve[step] = value
                self.store.add_observation(
                    t.trial_id,
                    step,
                    value if value is not None else float("nan"),
                    time.time(),
                    market_time=now,
                    instance_id=life.launch_id,
                )
                events.append(Progress(t.trial_id, step, value))
            elif kind == "checkpoint":
                t.checkpoint_step = max(t.checkpoint_step, step)
                self.store.update_trial(
                    t.trial_id, checkpoint_step=t.checkpoint_step, checkpoint_uri=t.checkpoint_uri
                )
        if events:
            self.store.update_trial(
                t.trial_id,
                step=t.step,
                metric=t.last_metric,
                best_metric=best_of(t, self.spec.metric.direction),
            )
        return events

    def _on_exit(self, t: TrialRun, code: int | None, state: InstanceState, now: float) -> Event:
        life = t.life
        assert life is not None
        life.exited = True
        t.life = None
        # every step reported: the trial is complete even if its instance was taken afterwards
        finished = t.step >= t.steps_total
        if finished:
            self._close_trial(t, "completed", now)
        elif t.stopping == "early":
            self._close_trial(t, "stopped_early", now)
        elif t.stopping == "cancel":
            self._close_trial(t, "cancelled", now)
        elif (
            life.notice_deadline is None
            and not life.rebalanced  # the agent stopped it to move it: migrate, not a failure
            and state is not InstanceState.REVOKED
            # exit 0 with steps left, unasked: a crash too; and so is an instance that ended
            # unasked without reporting any exit (an agent that could not write its channel
            # powers the machine off: relaunching it without a cap would loop forever)
            and (t.stopping is None or (code is not None and code != 0))
        ):
            t.failures += 1
            detail: dict[str, Any] = {"exit_code": code, "log": str(self.run_dir / "logs")}
            if code is None:
                detail["error"] = (
                    f"the instance ended ({state.value}) without reporting an exit code"
                )
            t.crashed = code is not None  # an exit code: the trial's own failure
            t.last_error = detail.get("error") or (
                f"the trial exited with code {code} at step {t.step} of {t.steps_total}"
                + (" without being asked to stop" if code == 0 else "")
            )
            self._event("error", now, t, **detail)
            if t.failures >= MAX_FAILURES:
                self._close_trial(t, "failed", now)
            else:
                self._to_waiting(t)
                t.retrying = True
        else:  # revoked, noticed, migrated or asked to stop: resume from the checkpoint elsewhere
            self._to_waiting(t)
        if life.notice_deadline is not None or state is InstanceState.REVOKED:
            t.revocations += 1
            self.revocations += 1
            self._event(
                "revoked", now, t, zone=life.offer.zone, step=t.step, checkpoint=t.checkpoint_step
            )
            return InstanceLost(t.trial_id, life.instance_id)
        return TrialExited(t.trial_id, life.instance_id, finished)

    def _to_waiting(self, t: TrialRun) -> None:
        t.phase, t.state, t.stopping = Phase.WAITING, "waiting", None
        t.step = t.checkpoint_step  # work after the checkpoint is lost
        t.curve = {k: v for k, v in t.curve.items() if k <= t.step}
        self.store.update_trial(t.trial_id, state="waiting", step=t.step)

    def _broken(self) -> bool:
        """Two trials failed and none ever reported a step: the command itself is broken (a
        typo, a missing file), and every new trial would only pay for more failed launches."""
        failed = sum(1 for t in self.trials if t.state == "failed")
        return failed >= 2 and not any(t.furthest > 0 for t in self.trials)

    def _close_trial(self, t: TrialRun, state: str, now: float) -> None:
        t.phase, t.state = Phase.DONE, state
        final = t.final_metric if state == "completed" else None
        if state == "completed" and final is not None:
            self.search.tell(t.params, final)
        elif state == "stopped_early":
            self.early_stopped += 1
            guess = t.predicted_final if t.predicted_final is not None else t.last_metric
            if guess is not None:
                self.search.tell(t.params, guess)
            else:
                self.search.forget(t.params)
        elif state == "failed" and t.crashed:
            self.search.tell_failure(t.params)  # else the search proposes it again
        else:
            self.search.forget(t.params)
        self.store.update_trial(
            t.trial_id,
            state=state,
            final_metric=final,
            predicted_final=t.predicted_final,
            ended_at=time.time(),
            step=t.step,
        )
        self._event(state, now, t, step=t.step, metric=t.last_metric)
