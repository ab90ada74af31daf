"""Carrying out a policy's actions: launch a trial on an offer, ask it to stop (to migrate or
early), change its checkpoint interval.

A mixin of :class:`~spotwise.planner.orchestrator.Orchestrator` (over
:class:`~spotwise.planner.ledger.Ledger`), kept apart so each file stays readable. A launch is
recorded in the store *before* the provider is called, so a crash can be reconciled by tags.
A launch that fails may still have started an instance (the cloud accepted it, then waiting
on it failed): whatever carries that launch's tag is terminated at once
(:meth:`~spotwise.planner.ledger.Ledger._close_failed_launch`), and every new launch uses up
its attempt number, so two instances never run (or checkpoint as) one attempt. A launch call
that failed for a passing reason (a 5xx, a timeout, a throttled answer) is first called again
with the same request, which the providers' idempotency makes the same launch
(:mod:`spotwise.planner.launch_retry`). A lasting refusal of an offer blocks it for a doubling
backoff, and a refusal for a region's quota pauses that region for 30 min: a resume restores
both (:mod:`spotwise.planner.lasting_refusals`). Asking a trial to stop, and terminating the
instances of a pass's budget stops together at its end, are
:class:`~spotwise.planner.stops.Stops`'.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
import uuid
from pathlib import Path
from typing import Any

from spotwise.errors import (
    CapacityError,
    MachineShortError,
    ProviderError,
    QuotaError,
    ThrottledError,
    TransientError,
)
from spotwise.planner.lasting_refusals import LastingRefusals, market_on_wall_clock
from spotwise.planner.launch_retry import SAME_REQUEST_RETRIES, SameRequest
from spotwise.planner.machine_short import short_of
from spotwise.planner.policy import Action, Checkpoint, Launch, Phase, SetCheckpointEvery, StopEarly
from spotwise.planner.runstate import (
    Life,
    TrialRun,
    control_file,
    trial_argv,
    trial_env,
    write_control,
)
from spotwise.planner.stops import Stops
from spotwise.planner.trialbook import MAX_FAILURES
from spotwise.providers.base import LaunchRequest, our_tags
from spotwise.store.bills import InstanceBills

THROTTLE_PAUSE_WALL_S = 5.0  # first pause of a provider whose API throttles our launches
THROTTLE_PAUSE_MAX_WALL_S = 300.0  # the pause doubles per throttled launch up to this
QUOTA_PAUSE_WALL_S = 1800.0  # a region whose quota refused a launch is avoided this long
LASTING_BLOCK_WALL_S = 300.0  # first avoidance of an offer after a lasting refusal of it
LASTING_BLOCK_MAX_WALL_S = 3600.0  # it doubles per lasting refusal of the offer up to this


class Actions(Stops):
    base_dir: Path
    blocked: dict[str, float]  # offer key → market time until which it is avoided
    # provider → (market time until which it is not launched on, the last pause in wall s)
    throttled: dict[str, tuple[float, float]]
    cancel_requested: bool  # set by a signal handler; the loop cancels at its next pass
    quota_full: dict[tuple[str, str], float]  # (provider, region) → market time it is avoided to
    cancelled: bool
    migrations: int

    def _tick_s(self) -> float:
        tick = self.backend.info.get("tick_s", 0.0)
        return float(tick) if isinstance(tick, int | float) else 0.0

    def _execute(self, action: Action, offers: list[Any], now: float) -> None:
        t = next((x for x in self.trials if x.trial_id == action.trial_id), None)
        if t is None or t.phase is Phase.DONE:
            return
        if isinstance(action, Launch):
            # a Ctrl-C (or `spotwise cancel`) in the middle of a pass buys nothing more
            cancelling = self.cancelled or self.cancel_requested
            if cancelling or t.phase not in (Phase.QUEUED, Phase.WAITING):
                return
            retry = self.same_requests.get(t.trial_id)
            if retry is not None:  # its last call failed for a passing reason: call it again
                if not self._retry_due(retry, now):
                    return  # its pause is on: the trial waits for it
                if action.offer_key == retry.offer.key:
                    if not self._refused_lately(retry.offer, now):
                        self.same_requests.pop(t.trial_id)
                        retry.retries += 1
                        self._call_launch(retry, now)
                    return
                self._abandon_same_request(retry, now, "the policy chose another offer")
            if self._held_by_unconfirmed(t):  # its failed launch may still be running it
                return
            offer = next((o for o in offers if o.key == action.offer_key), None)
            # this pass's offers were read before a launch in it was refused: ask again later
            if offer is not None and not self._refused_lately(offer, now):
                self._launch(t, offer, now)
        elif isinstance(action, Checkpoint | StopEarly):
            if isinstance(action, StopEarly):
                if t.stopping == "early":  # asked already (a guard repeats itself each tick)
                    self._also_stopped_by(t, action, now)
                    self._stop_paying(t, action, now)
                    return
                t.predicted_final = action.predicted_final
                t.stop_reason = action.reason
                self._event(
                    "stop_early", now, t, reason=action.reason, predicted=action.predicted_final
                )
            reason = "early" if isinstance(action, StopEarly) else "migrate"
            if t.phase is Phase.RUNNING and t.life is not None:
                self._request_stop(t, reason)
                if isinstance(action, StopEarly):
                    self._stop_paying(t, action, now)
            elif isinstance(action, StopEarly):
                self._close_trial(t, "stopped_early", now)
        elif isinstance(action, SetCheckpointEvery):
            self._set_checkpoint_every(t, max(1, action.every), now)

    def _set_checkpoint_every(self, t: TrialRun, every: int, now: float) -> None:
        """A relaunch starts with ``every`` (its env); a running trial gets it now through its
        control file (``SPOTWISE_CONTROL_FILE``; on a cloud the provisioner relays it through the
        trial's artifacts folder)."""
        if every == t.checkpoint_every:
            return  # what the trial already uses: nothing to rewrite
        t.checkpoint_every = every
        if t.phase is Phase.RUNNING and t.life is not None:
            write_control(control_file(self._trial_dir(t), t.life.attempt), every)
            self._event("checkpoint_every", now, t, every=every)

    def _launch(self, t: TrialRun, offer: Any, now: float) -> None:
        launch_id = uuid.uuid4().hex[:16]
        tags = our_tags(self.job_id, t.trial_id, launch_id)
        self.store.record_launch(
            id=launch_id,
            job_id=self.job_id,
            trial_id=t.trial_id,
            provider=offer.provider,
            region=offer.region,
            zone=offer.zone,
            instance_type=offer.instance_type,
            market=offer.market.value,
            offer_key=offer.key,
            price_per_hour=offer.price_per_hour,
            tags_json=json.dumps(tags),
            requested_at=time.time(),
        )
        # every launch uses up its attempt number (its events/stop/control files): an instance a
        # failed launch left behind must never share them with the next launch's; a retry of
        # the same request (:meth:`_call_launch`) is the same launch, and keeps it
        t.attempt = attempt = t.attempt + 1
        env = trial_env(self.job_id, t, attempt, self._trial_dir(t), self.spec.env)
        # the checkpoint this attempt should resume from: the SDK warns (and records an event)
        # when it finds an older one, or none, rather than silently training those steps again
        env["SPOTWISE_RESUME_STEP"] = str(t.checkpoint_step)
        argv = trial_argv(self.spec.command)
        req = LaunchRequest(offer, argv, env, tags, launch_id, str(self.base_dir))
        self._call_launch(SameRequest(t, req, now, attempt), now)

    def _call_launch(self, p: SameRequest, now: float) -> None:
        """Call the provider with ``p``'s request: its first call, or a retry of the same
        request (``p.retries`` > 0) after one failed for a passing reason."""
        t, offer, launch_id = p.trial, p.offer, p.launch_id
        try:
            inst = self.backend.provisioner.launch(p.request)
            if inst.state.is_terminal():  # an earlier call's create, ended since: no life
                raise CapacityError(
                    f"{offer.provider}: launch {launch_id} answered with instance "
                    f"{inst.instance_id}, which had already ended ({inst.state.value}: its "
                    "capacity was lost after the create was accepted)"
                )
        except MachineShortError as e:  # nothing started, for want of this machine's resources
            short_of(self, p, e, now)
            return
        except TransientError as e:  # a hiccup of the API (throttled, 5xx, timeout): no failure
            self._launch_hiccup(p, e, now)
            return
        except (CapacityError, ProviderError) as e:
            blocked: dict[str, Any] = {}  # what the event records of a long block or pause
            if isinstance(e, CapacityError) and e.lasting:  # avoided long, not for one pass
                blocked = self._block_lasting(offer.key, now)
                self.last_lasting_refusal = f"{e.message}; {e.hint}" if e.hint else e.message
            else:
                self._block_a_tick(offer.key, now)
            if isinstance(e, QuotaError):  # still a failure, but the retry goes to another region
                blocked = self._pause_region(offer, now)
            retried = {"retry_of_same_request": p.retries} if p.retries else {}
            hint = {"hint": e.hint} if e.hint else {}  # e.g. raise max_price (review-ai F2)
            what = {"error": str(e), **hint, **retried, **blocked}
            self._event("launch_failed", now, t, offer=offer.key, **what)
            # a retry's refusal says nothing of an earlier call's create: looked for as after
            # a passing failure (an empty listing trusted only after the provider's lag)
            self._close_failed_launch(t, launch_id, p.asked_at, offer, unsure=p.retries > 0)
            if not isinstance(e, CapacityError):
                t.last_error = str(e)
                t.failures += 1
                if t.failures >= MAX_FAILURES:
                    self._close_trial(t, "failed", now)
            return
        except BaseException:  # a crash mid-launch: leave no untracked instance, then re-raise
            # the record stays open (the cloud may still be creating it): cancel settles it,
            # from the bill written here (else it billed the terminated instance a second time)
            with contextlib.suppress(Exception):  # the launch's own error is the one to raise
                _, held, cost, seconds = self._discard_launch(t, launch_id, p.asked_at, offer)
                if cost or seconds:
                    found = {"provider_instance_id": held[0].instance_id} if len(held) == 1 else {}
                    self.store.update_instance(
                        launch_id, cost_usd=cost, market_seconds=seconds, **found
                    )
            raise
        # only while its record is open: a `cancel --force` of this job (frozen in the call
        # past the heartbeat's limit) may have closed it; reopened, it was billed again
        started = {"provider_instance_id": inst.instance_id, "launched_at": time.time()}
        closed = self._write_open(launch_id, state="running", **started)
        if closed is not None:
            self._launched_after_close(t, inst, closed, p)
            return
        self.throttled.pop(offer.provider, None)  # a launch went through: no more pause
        self.machine_short = 0
        self.lasting_blocks.pop(offer.key, None)  # nor a doubled block of its offer
        self.last_lasting_refusal = ""
        if t.lives_started > 0 and not t.retrying:  # moved after a notice, loss or rebalance
            t.migrations += 1
            self.migrations += 1
        t.retrying = False
        t.lives_started += 1
        t.life = Life(
            launch_id,
            inst.instance_id,
            offer,
            inst.launched_at or now,
            t.checkpoint_step,
            p.attempt,
        )
        self.lives[inst.instance_id] = (t, t.life)
        t.phase, t.state, t.stopping = Phase.RUNNING, "running", None
        self._trial_write(  # a takeover landed in the call: the row is the other run's
            t,
            state="running",
            started_at=time.time(),
            migrations=t.migrations,
            revocations=t.revocations,
        )
        self._event(
            "launch",
            now,
            t,
            offer=offer.key,
            price=offer.price_per_hour,
            on_demand=offer.on_demand_price_per_hour,  # a cancel's reference, its VM gone
            attempt=p.attempt,
            resume_step=int(p.request.env["SPOTWISE_RESUME_STEP"]),
            **({"retry_of_same_request": p.retries} if p.retries else {}),
        )
        sent = p.request.env.get("SPOTWISE_CHECKPOINT_EVERY")
        if sent is not None and sent != str(t.checkpoint_every):  # set while a retry waited
            write_control(control_file(self._trial_dir(t), p.attempt), t.checkpoint_every)
            self._event("checkpoint_every", now, t, every=t.checkpoint_every)

    def _launched_after_close(self, t: TrialRun, inst: Any, row: Any, p: SameRequest) -> None:
        """A launch answered after another process closed its record (`spotwise cancel
        --force` while this process was frozen in the call): no life. Its instance is
        terminated and billed to the record as a part naming it, as the stray sweep bills an
        instance that outlived its record, unless the closer billed it (its own life, or a
        part); one that will not terminate is a leftover (`spotwise cancel` finds it by its
        tags). The cancel itself reaches the loop from the job's row."""
        now, iid = self.backend.now(), inst.instance_id
        line = f"launch {p.launch_id}'s record was closed by another process ({row.end_reason})"
        self._event("error", now, t, error=f"{line}: its instance {iid} is terminated")
        if not self._terminate_quietly(t, [iid], now, "the instance of a closed launch"):
            self.leftover_ids.append(iid)
            return
        bills = InstanceBills(self.store, {row.id: row})
        if row.provider_instance_id == iid or bills.elsewhere(row.id, iid):
            return  # the closer found it and billed it
        cost, seconds = self._bill_discarded(t, [inst], p.asked_at, now, p.offer)
        self._bill_stray(t, row.id, inst, cost, seconds, bills)

    def _launch_hiccup(self, p: SameRequest, e: TransientError, now: float) -> None:
        """A launch call failed for a passing reason: it is no failure of the trial. The same
        request is called again after a pause, up to :data:`SAME_REQUEST_RETRIES` times (it
        waits in :attr:`same_requests`, its record ``requested``); after that, the create
        may have taken effect before a call failed (a timed-out try of the SDK's own retries,
        the last one throttled): it is looked for by its launch tag, as for any failed
        launch, an empty listing trusted only after the provider's lag."""
        t, offer = p.trial, p.offer
        throttled = isinstance(e, ThrottledError)
        if throttled:  # no launch there for a doubling pause
            self._throttle(offer.provider, now)
        else:  # a 5xx or a timeout: this offer waits a tick, as after a refusal
            self._block_a_tick(offer.key, now)
        again = p.retries < SAME_REQUEST_RETRIES
        kind = "launch_throttled" if throttled else "launch_interrupted"
        retried = {"retry_of_same_request": p.retries} if p.retries else {}
        what = {"launch": p.launch_id, "then": "retry" if again else "cleanup", **retried}
        self._event(kind, now, t, offer=offer.key, error=str(e), **what)
        if not again:
            self._close_failed_launch(t, p.launch_id, p.asked_at, offer, unsure=True)
            return
        # a throttled call waits for its provider's pause (:meth:`_retry_due`); a 5xx or a
        # timeout for the request's own, doubling with its retries as a throttled provider's,
        # and at least as long as its offer is avoided (else the policy sees another as best)
        pause = min(THROTTLE_PAUSE_WALL_S * 2**p.retries, THROTTLE_PAUSE_MAX_WALL_S)
        own = self._refused_at(now) + pause * self.backend.speedup
        p.retry_at = now if throttled else max(own, self.blocked[offer.key])
        p.passed_over = 0
        self.same_requests[t.trial_id] = p

    machine_short = 0  # starts this machine refused in a row with none of the job running

    last_lasting_refusal: str = ""  # what the last lasting refusal said: the no-offer warning's

    @functools.cached_property
    def lasting_blocks(self) -> dict[str, float]:
        """Offer key → its last block after a lasting refusal, in wall s (doubled at the next)."""
        return {}

    def _block_lasting(self, key: str, now: float) -> dict[str, Any]:
        """A lasting refusal of offer ``key`` (its Spot price above the job's max price, a size
        or type not offered there: :attr:`CapacityError.lasting`): avoided for a block that
        doubles with each such refusal of it, from :data:`LASTING_BLOCK_WALL_S` to
        :data:`LASTING_BLOCK_MAX_WALL_S` (times the replay's speedup: market s), until a launch
        on it goes through. A one-pass block sent the same refused request about once a pass
        for the whole job (the catalog keeps its live prices). Returns what the
        ``launch_failed`` event records of it."""
        pause = min(
            max(self.lasting_blocks.get(key, 0.0) * 2, LASTING_BLOCK_WALL_S),
            LASTING_BLOCK_MAX_WALL_S,
        )
        self.lasting_blocks[key] = pause
        until = max(
            self._refused_at(now) + pause * self.backend.speedup, now + max(self._tick_s(), 1.0)
        )
        self.blocked[key] = max(self.blocked.get(key, 0.0), until)
        return {"lasting": True, "blocked_until": until, "blocked_wall_s": pause}

    def _block_a_tick(self, key: str, now: float) -> None:
        """A refusal, or a passing failure, of a launch on offer ``key``: it is avoided for a
        tick of its market (at least 1 market s) from when the call was answered
        (:meth:`_refused_at`). From the pass's start, a call that took longer than a tick (a
        cloud's operation wait timing out; on the replay, a launch slowed by a loaded machine)
        left the offer avoided until a time already past, and the next pass launched on the
        refused offer again. A longer block of it (a notice's, a lasting refusal's) is kept."""
        until = self._refused_at(now) + max(self._tick_s(), 1.0)
        self.blocked[key] = max(self.blocked.get(key, 0.0), until)

    def _pause_region(self, offer: Any, now: float) -> dict[str, Any]:
        """The quota of ``offer``'s region refused a launch: no launch in that region (of its
        provider) for :data:`QUOTA_PAUSE_WALL_S` (times the replay's speedup: market s). The
        pause is not cleared by a launch: none goes through in the region while it is on
        (:meth:`_refused_lately`). Returns what the ``launch_failed`` event records of it,
        which a resume reads back (:mod:`~spotwise.planner.lasting_refusals`)."""
        until = now + QUOTA_PAUSE_WALL_S * self.backend.speedup
        self.quota_full[(offer.provider, offer.region)] = until
        return {
            "provider": offer.provider,
            "region": offer.region,
            "quota_until": until,
            "quota_wall_s": QUOTA_PAUSE_WALL_S,
        }

    def _restore_lasting(self, refused: LastingRefusals, now: float) -> None:
        """A resumed job's lasting refusals as its earlier runs left them: each offer's backoff
        level, so its next refusal doubles its last block instead of starting again at
        :data:`LASTING_BLOCK_WALL_S`; and, where the market's clock is the wall clock (a
        cloud's), the block itself while it lasts, no longer than its level from now (a clock
        set back does not stretch it), and each region's quota pause while it lasts, no longer
        than its length from now. A replay's clock starts again on a resume: an earlier run's
        block end is no time of this run's, so only the level is kept there (and its local
        provider refuses no launch for a quota)."""
        on_wall_clock = market_on_wall_clock(self.backend)
        for key, wall_s in refused.levels.items():
            self.lasting_blocks[key] = min(wall_s, LASTING_BLOCK_MAX_WALL_S)
            until = refused.until.get(key)
            if until is not None and until > now and on_wall_clock:
                until = min(until, now + wall_s * self.backend.speedup)
                self.blocked[key] = max(self.blocked.get(key, 0.0), until)
        for region, (until, wall_s) in refused.quota.items():
            if until > now and on_wall_clock:
                until = min(until, now + wall_s * self.backend.speedup)
                self.quota_full[region] = max(self.quota_full.get(region, 0.0), until)
        self.last_lasting_refusal = refused.said

    def _refused_lately(self, offer: Any, now: float) -> bool:
        """The offer refused a launch, its provider throttled one, or its region's quota is
        used up, and the pause is on."""
        until, _ = self.throttled.get(offer.provider, (0.0, 0.0))
        full = self.quota_full.get((offer.provider, offer.region), 0.0)
        return max(self.blocked.get(offer.key, 0.0), until, full) > now

    def _throttle(self, provider: str, now: float) -> None:
        """No launch on ``provider`` for a pause that doubles with each throttled launch."""
        _, last = self.throttled.get(provider, (now, 0.0))
        pause = min(max(last * 2, THROTTLE_PAUSE_WALL_S), THROTTLE_PAUSE_MAX_WALL_S)
        self.throttled[provider] = (self._refused_at(now) + pause * self.backend.speedup, pause)

    def _refused_at(self, now: float) -> float:
        """When a call this pass refused was answered (market clock): a pause runs from the
        refusal, not the pass's start."""
        return max(now, self.backend.now())
