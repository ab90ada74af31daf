"""A failed launch's cleanup that finds an ended instance carrying the launch's tag whose
cloud does not say which request made it (EC2 listing it without a ClientToken) bills it once
as the launch's, as `spotwise cancel` does (session 17, helper B).

It named the instance (an ``unconfirmed_ended`` event, on every try) but closed the record
``failed`` at $0 with no instance id, while a cancel of the same job billed the same life. Now
the record is closed on it with its life's bill (in the trial's and the job's spend), and it
is named once. One still holding a resource is left alone, as before; a launch whose own
instance the cloud confirms is closed on that one, the unconfirmed one not billed.

AWS on moto in this process (``_hide_token_of`` drops the ClientToken from its answer).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from test_ownership_identity import OFFER, AwsJob, _hide_token_of, _ledger, _states

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
HOUR = 3600.0


def _terminate_by_hand(*ids: str) -> None:
    boto3.client("ec2", region_name="us-east-1").terminate_instances(InstanceIds=list(ids))


def _tagged_launch(
    tmp_path: Path,
    bucket: str,
    monkeypatch: pytest.MonkeyPatch,
    now: float,
    *,
    ran: float = HOUR,
    confirmed: bool = False,
    copy_ran: float | None = None,
    **record: Any,
) -> tuple[AwsJob, str, str, str | None]:
    """A job on moto with one launch record (``record``: its fields) whose create went through
    ``ran`` seconds before ``now``: the job, the launch's id, the instance it made (EC2 lists it
    without its ClientToken unless ``confirmed``) and, with ``copy_ran``, another instance
    started that long before ``now`` with the launch's tags and no ClientToken (else None)."""
    job = AwsJob(tmp_path, bucket)
    launch = job.record(**record)
    made = job.launch(launch, now - ran)
    copy = None if copy_ran is None else job.copy_of(launch, now - copy_ran)
    for iid in ([] if confirmed else [made]) + ([] if copy is None else [copy]):
        _hide_token_of(monkeypatch, iid)
    return job, launch, made, copy


def _said(iid: str, launch: str, what: str) -> str:
    return (
        f"{iid} (us-east-1) carries launch {launch}'s tag and has ended; aws does not say "
        f"which request created it: {what}"
    )


def _named(led: Any) -> list[tuple[str, str]]:
    return [(d["instance"], d["message"]) for k, d in led.events if k == "unconfirmed_ended"]


def test_a_failed_launchs_cleanup_bills_its_unconfirmed_ended_instance_as_the_launchs(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time()
    job, failed, made, _ = _tagged_launch(tmp_path, bucket, monkeypatch, now)  # the call failed
    _terminate_by_hand(made)  # it ran an hour, then ended (reclaimed, or by hand)
    led = _ledger(job, now)
    t = led.trials[0]

    led._close_failed_launch(t, failed, now - HOUR, OFFER)

    row = led.store.get_instance(failed)
    assert (row.state, row.end_reason, row.provider_instance_id) == ("failed", "failed", made)
    assert row.launched_at == pytest.approx(now - HOUR, abs=2)
    assert row.market_seconds == pytest.approx(HOUR, abs=30)
    assert row.cost_usd == pytest.approx(0.9, abs=0.01)  # its hour at the offer's $0.9
    assert t.cost_usd == pytest.approx(row.cost_usd)  # the trial's spend
    assert led.store.get_trial(t.trial_id).cost_usd == pytest.approx(row.cost_usd)
    assert led.spent_usd == pytest.approx(row.cost_usd)  # the job's (the budget sees it)
    what = f"no instance of the launch is confirmed: billed as the launch's (${row.cost_usd:.4f})"
    assert _named(led) == [(made, _said(made, failed, what))]
    assert failed not in led.unconfirmed and led.leftover_ids == []
    led.store.close()


def test_it_is_named_and_billed_once_whatever_the_tries_while_another_still_runs(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time()
    # another instance with its tags, and no ClientToken either
    job, failed, made, other = _tagged_launch(tmp_path, bucket, monkeypatch, now, copy_ran=HOUR / 2)
    _terminate_by_hand(made)
    led = _ledger(job, now)
    t = led.trials[0]

    led._close_failed_launch(t, failed, now - HOUR, OFFER)
    led._close_failed_launch(t, failed, now - HOUR, OFFER)  # the loop's retry

    # the one still running is left alone (never terminated on its tags), the record open
    assert _states() == {made: "terminated", other: "running"}
    row = led.store.get_instance(failed)
    assert (row.state, row.end_reason, row.cost_usd) == ("requested", "unconfirmed", 0.0)
    assert [d["instance"] for k, d in led.events if k == "not_ours"] == [other, other]
    assert _named(led) == [] and led.spent_usd == 0.0  # nothing billed before it closes

    _terminate_by_hand(other)  # checked by hand: it was the job's after all
    led._close_failed_launch(t, failed, now - HOUR, OFFER)

    row = led.store.get_instance(failed)
    assert (row.state, row.provider_instance_id) == ("failed", made)  # the first listed
    assert row.cost_usd == pytest.approx(0.9, abs=0.01)  # its hour, once
    assert led.spent_usd == pytest.approx(row.cost_usd) and t.cost_usd == led.spent_usd
    billed = f"no instance of the launch is confirmed: billed as the launch's (${row.cost_usd:.4f})"
    assert _named(led) == [
        (made, _said(made, failed, billed)),
        (
            other,
            _said(other, failed, f"not billed ({made}, listed first, is billed as the launch's)"),
        ),
    ]
    led.store.close()


def test_the_last_try_names_it_left_to_cancel_and_bills_nothing(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time()
    job, failed, made, other = _tagged_launch(tmp_path, bucket, monkeypatch, now, copy_ran=HOUR / 2)
    _terminate_by_hand(made)
    led = _ledger(job, now)
    t = led.trials[0]

    led._close_failed_launch(t, failed, now - HOUR, OFFER)
    led._settle_unconfirmed(now)  # the drain's last try: still not confirmed

    assert _states() == {made: "terminated", other: "running"}
    row = led.store.get_instance(failed)
    assert (row.state, row.cost_usd, row.provider_instance_id) == ("requested", 0.0, None)
    assert led.leftover_ids == [f"launch {failed} (no instance id known)"]
    left = "its launch's cleanup is not confirmed: left to `spotwise cancel`"
    assert _named(led) == [(made, _said(made, failed, left))] and led.spent_usd == 0.0
    led.store.close()


def test_a_launch_whose_own_instance_is_confirmed_is_closed_on_it(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time()
    # its ClientToken says this launch made `own`; the copy, with its tags, has none
    job, failed, own, copy = _tagged_launch(
        tmp_path, bucket, monkeypatch, now, ran=60, confirmed=True, copy_ran=HOUR
    )
    _terminate_by_hand(copy)
    led = _ledger(job, now)
    t = led.trials[0]

    led._close_failed_launch(t, failed, now - 60, OFFER)

    assert _states() == {own: "terminated", copy: "terminated"}
    row = led.store.get_instance(failed)
    assert (row.state, row.provider_instance_id) == ("failed", own)
    assert row.cost_usd == pytest.approx(0.9 / 60, abs=0.002)  # its own minute, not the hour
    assert led.spent_usd == pytest.approx(row.cost_usd)
    why = f"not billed (the launch's own instance {own} is confirmed)"
    assert _named(led) == [(copy, _said(copy, failed, why))]
    led.store.close()


def test_a_launch_whose_own_confirmed_instance_has_ended_is_billed_its_life(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Helper B's note: the cleanup billed only what it terminated, so the launch's own
    instance (its ClientToken confirms it) found already ended closed the record at $0, no id,
    although it had run an hour. It is now the launch's life, billed once, as an unconfirmed one
    is."""
    now = time.time()
    # its ClientToken says this launch made `own`
    job, failed, own, _ = _tagged_launch(tmp_path, bucket, monkeypatch, now, confirmed=True)
    _terminate_by_hand(own)  # it ran an hour, then ended
    led = _ledger(job, now)
    t = led.trials[0]

    led._close_failed_launch(t, failed, now - HOUR, OFFER)

    row = led.store.get_instance(failed)
    assert (row.state, row.end_reason, row.provider_instance_id) == ("failed", "failed", own)
    assert row.market_seconds == pytest.approx(HOUR, abs=30)
    assert row.cost_usd == pytest.approx(0.9, abs=0.01)  # its hour at the offer's $0.9
    assert t.cost_usd == pytest.approx(row.cost_usd)
    assert led.spent_usd == pytest.approx(row.cost_usd)
    assert _named(led) == [] and failed not in led.unconfirmed  # closed: never looked at again
    led.store.close()


def test_the_own_instance_a_try_terminated_is_on_the_record_and_billed_once(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """review-ad F4: a try that terminated the launch's own instance while a tag copy still ran
    (not confirmed clean) billed it to the spend and the trial but not to the record, which the
    next try closed at $0: `report` showed less than `status`, and a later cancel, re-summing
    the records, dropped it. The record carries it now; the next try, finding it ended, does
    not bill it again, nor the copy."""
    now = time.time()
    # its ClientToken says this launch made `own`; the copy, with its tags, has none
    job, failed, own, copy = _tagged_launch(
        tmp_path, bucket, monkeypatch, now, confirmed=True, copy_ran=HOUR / 2
    )
    led = _ledger(job, now)
    t = led.trials[0]

    led._close_failed_launch(t, failed, now - HOUR, OFFER)  # terminates its own; the copy runs

    assert _states() == {own: "terminated", copy: "running"}
    row = led.store.get_instance(failed)
    assert (row.state, row.end_reason, row.provider_instance_id) == (
        "requested",
        "unconfirmed",
        own,
    )
    assert row.cost_usd == pytest.approx(0.9, abs=0.01)  # its hour, on the record now
    assert led.spent_usd == pytest.approx(row.cost_usd) and t.cost_usd == pytest.approx(
        row.cost_usd
    )

    _terminate_by_hand(copy)  # checked by hand
    led._close_failed_launch(t, failed, now - HOUR, OFFER)

    row = led.store.get_instance(failed)
    assert (row.state, row.provider_instance_id) == ("failed", own)
    assert row.cost_usd == pytest.approx(0.9, abs=0.01)  # once: not its hour again
    assert led.spent_usd == pytest.approx(row.cost_usd) and t.cost_usd == pytest.approx(
        row.cost_usd
    )
    why = f"not billed (the launch's own instance {own} is confirmed)"
    assert _named(led) == [(copy, _said(copy, failed, why))]
    led.store.close()
