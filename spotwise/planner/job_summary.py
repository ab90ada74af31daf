"""The job's totals as the orchestrator shows and records them: its summary at the end, its
snapshot while it runs, and the job row's last write (:class:`JobSummary`, a mixin of
:class:`~spotwise.planner.orchestrator.Orchestrator` over
:class:`~spotwise.planner.actions.Actions`).
"""

from __future__ import annotations

import time
from typing import Any

from spotwise.planner.actions import Actions
from spotwise.planner.policy import Policy
from spotwise.planner.report import best_trial, resumable, snapshot, summary
from spotwise.planner.resume import ResumePlan


class JobSummary(Actions):
    policy: Policy
    resume: ResumePlan | None

    def _totals(self) -> dict[str, float]:
        return {
            "cost_usd": self.spent_usd,
            "on_demand_cost_usd": self.on_demand_usd,
            "revocations": self.revocations,
            "migrations": self.migrations,
            "early_stopped": self.early_stopped,
        }

    def summary(self, wall_seconds: float) -> dict[str, Any]:
        job = self.store.get_job(self.job_id)
        state = job.state.value if hasattr(job.state, "value") else str(job.state)
        direction = self.spec.metric.direction
        out = summary(
            self.job_id,
            state,
            self.policy.name,
            self.trials,
            direction,
            self._totals(),
            wall_seconds,
        )
        out["trials_planned"] = self.spec.trials
        out["resumable"] = resumable(self.trials, self.spec.trials)
        if self.resume:
            out["resumed"] = {
                "previous_state": self.resume.from_state.value,
                "requeued_trials": [t.trial_id for t in self.resume.requeued],
            }
        if job.error:
            out["error"] = job.error
        if self.leftover_ids:  # the drain could not terminate them: `tune` exits non-zero
            out["leftover_instances"] = self.leftovers()
        return out

    def snapshot(self, now: float) -> dict[str, Any]:
        cost = self.spent_usd + self._running_cost(now)
        total = self.spec.trials * self.spec.steps
        return snapshot(
            self.job_id, self.policy.name, self.trials, now, cost, self._totals(), total
        )

    def _finish_job(self, state: str, error: str | None) -> None:
        best = best_trial(self.trials, self.spec.metric.direction)
        self.store.update_job(
            self.job_id,
            state=state,
            ended_at=time.time(),
            error=error,
            best_trial_id=best.trial_id if best else None,
            best_metric=best.final_metric if best else None,
            cost_usd=self.spent_usd,
            on_demand_cost_usd=self.on_demand_usd,
            revocations=self.revocations,
            migrations=self.migrations,
            early_stopped=self.early_stopped,
        )
