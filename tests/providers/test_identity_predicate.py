"""One predicate for "the cloud cannot tell whether this listed instance is the launch its tag
names" (``unconfirmed_launch``), used by cancel's reconcile and a failed launch's cleanup, and
the line that names such an instance: it does not say another request made it, nor that the
job did not launch it (review-aa F4)."""

from __future__ import annotations

import pytest

from spotwise.providers.base import (
    Instance,
    InstanceState,
    Market,
    Offer,
    launched_by,
    not_ours_line,
    our_tags,
    unconfirmed_launch,
)

JOB = "j-00000000000000a1"
OFFER = Offer("aws", "us-east-1", "us-east-1a", "c5.xlarge", Market.SPOT, 0.1, 0.17)


def _inst(identity: str | None, launch: str = "l-1", job: str = JOB, iid: str = "i-1") -> Instance:
    return Instance(
        iid, OFFER, InstanceState.RUNNING, our_tags(job, "t-1", launch), launch_identity=identity
    )


@pytest.mark.parametrize(
    ("inst", "instance_ids", "expected"),
    [
        (_inst(None), (), "l-1"),  # its tag names a launch of the job; the cloud does not say
        (_inst("l-1"), (), ""),  # the cloud says that launch made it: the job's
        (_inst("l-other"), (), ""),  # the cloud says another request made it: not the job's
        (_inst(None, launch="l-nobody"), (), ""),  # the tag names no launch of the job
        (_inst(None, job="j-00000000000000b2"), (), ""),  # another job's tags
        (_inst(None, launch=""), (), ""),  # no launch tag
        (_inst(None), ("i-1",), ""),  # a launch of the job was answered with its id: the job's
    ],
    ids=["unknown", "confirmed", "another", "no-launch", "other-job", "untagged", "answered"],
)
def test_unconfirmed_launch_is_the_tagged_launch_only_when_the_cloud_cannot_tell(
    inst: Instance, instance_ids: tuple[str, ...], expected: str
) -> None:
    launches = {"l-1", "l-2"}
    assert unconfirmed_launch(inst, JOB, launches, instance_ids) == expected
    if expected:  # never also the job's: launched_by refuses it, and the two do not overlap
        assert not launched_by(inst, JOB, launches, instance_ids)


def test_unconfirmed_needs_the_managed_tag() -> None:
    inst = _inst(None)
    inst.tags["spotwise:managed"] = "false"
    assert unconfirmed_launch(inst, JOB, {"l-1"}) == ""


def test_the_line_for_an_unconfirmed_instance_does_not_say_the_job_did_not_launch_it() -> None:
    """It may be the launch's own instance: "was not launched by it" was not known."""
    line = not_ours_line(_inst(None), JOB, {"l-1"})
    assert line == (
        f"i-1 (us-east-1) carries job {JOB}'s tags but aws does not confirm that the job "
        "launched it: left alone (aws does not say which request created it)"
    )


def test_the_line_for_a_proven_copy_is_unchanged() -> None:
    line = not_ours_line(_inst("l-other"), JOB, {"l-1"})
    assert line == (
        f"i-1 (us-east-1) carries job {JOB}'s tags but was not launched by it: left alone "
        "(its launch tag names launch l-1, but aws says another request created it)"
    )
