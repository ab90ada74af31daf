"""An instance carrying a launch's tag whose cloud does not say which request made it (EC2
listing it without a ClientToken), once it has ended (session 16, helper E).

Cancel's first answer for such an instance is "left alone and the record kept open; check it
by hand (terminate it if it is the job's), then run the cancel again". Following that advice
closed the record ``not found`` at $0 (the hour it ran was lost): the ended instance is now
billed as the launch's, and the answer says the cloud did not confirm it. A failed launch's
cleanup that finds such an ended instance bills it once as the launch's (session 17:
test_s17_unconfirmed_cleanup.py). A finished job's sweep no longer says
"record kept open" of a record already closed.

AWS on moto in this process (``_hide_token_of`` drops the ClientToken from its answer).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_ownership_identity import OFFER, _ledger, _states
from test_s17_unconfirmed_cleanup import _tagged_launch, _terminate_by_hand

from spotwise import jobs
from spotwise.errors import ProviderError
from spotwise.store import Store

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
HOUR = 3600.0


def test_cancel_bills_an_unconfirmed_instance_ended_by_hand_as_the_launchs(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time()
    # the orchestrator died in the call
    job, unanswered, made, _ = _tagged_launch(
        tmp_path, bucket, monkeypatch, now, requested_at=now - HOUR
    )
    with Store.open_existing(job.db) as s:
        s.update_job(job.id, state="running", pid=0)

    first = jobs.cancel(job.id, db=job.db)

    assert first["open_instances"] == [made] and _states() == {made: "running"}
    assert "once it has ended, it is billed as the job's" in first["records"][0]["error"]

    _terminate_by_hand(made)  # as the first answer advises
    again = jobs.cancel(job.id, db=job.db)

    (rec,) = again["records"]
    assert (rec["outcome"], rec["instance_id"]) == ("ended", made)
    note = (
        f"{made} billed as the job's: it carries launch {unanswered}'s tag and has ended; "
        "aws does not say which request created it"
    )
    assert rec["note"] == note
    assert note in again["message"] and "1 already ended" in again["message"]
    assert again["open_instances"] == [] and again["errors"] == []
    with Store.open_existing(job.db) as s:
        row = s.get_instance(unanswered)
        cost = s.get_job(job.id).cost_usd
    assert (row.state, row.provider_instance_id) == ("terminated", made)
    assert row.launched_at == pytest.approx(now - HOUR, abs=2)
    assert row.market_seconds == pytest.approx(HOUR, abs=30)
    assert row.cost_usd == pytest.approx(0.9, abs=0.01)  # its hour at the record's price
    assert cost == pytest.approx(0.9, abs=0.01)


def test_a_failed_launchs_discard_leaves_its_unconfirmed_ended_instance_to_the_close(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Naming and billing it happen once, when the record is closed
    (test_s17_unconfirmed_cleanup.py): the discard itself, tried again on each retry, does
    neither."""
    now = time.time()
    # the create went through, the call failed
    job, failed, made, _ = _tagged_launch(tmp_path, bucket, monkeypatch, now, ran=60)
    _terminate_by_hand(made)
    led = _ledger(job, now)

    confirmed, held, cost, seconds = led._discard_launch(led.trials[0], failed, now - 60, OFFER)

    assert (confirmed, held, cost, seconds) == (True, [], 0.0, 0.0)  # nothing of it runs
    assert led.events == [] and led.spent_usd == 0.0
    led.store.close()


def test_a_finished_jobs_sweep_does_not_say_a_closed_record_is_kept_open(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time()
    job, lost, made, _ = _tagged_launch(
        tmp_path, bucket, monkeypatch, now, state="failed", end_reason="failed", ended_at=now - HOUR
    )
    with Store.open_existing(job.db) as s:
        s.update_job(job.id, state="succeeded", ended_at=now - HOUR / 2)

    with pytest.raises(ProviderError) as err:
        jobs.cancel(job.id, db=job.db)

    line = (
        f"aws: {made} carries launch {lost}'s tag but aws does not confirm that launch made "
        "it: left alone; check it by hand (terminate it if it is the job's)"
    )
    assert line in str(err.value) and "kept open" not in str(err.value)
    assert _states() == {made: "running"}  # never terminated on its tags alone
    with Store.open_existing(job.db) as s:
        row = s.get_instance(lost)
    assert (row.state, row.cost_usd) == ("failed", 0.0)  # closed as it was, not billed
