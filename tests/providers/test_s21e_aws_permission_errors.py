"""AWS permission and account refusals name the fix, in one short line (review-an F5).

``UnauthorizedOperation`` / ``AccessDenied`` / ``OptInRequired`` / ``PendingVerification`` were
plain ProviderErrors carrying the whole SDK text: for EC2's UnauthorizedOperation a ~2.8 KB
line, most of it the encoded authorization message, and no hint. GCP's and Azure's permission
refusals are a ProviderUnavailable naming the role to grant; AWS's now name the IAM action."""

from __future__ import annotations

import logging

import pytest
from botocore.exceptions import ClientError

from spotwise.errors import ProviderError, ProviderUnavailable
from spotwise.providers import aws

ACTION = "launching p3.2xlarge (spot) in us-east-1a"
BLOB = "A" * 1800 + "-" + "b" * 600  # EC2's encoded authorization message, as long as they come
KEY = "AKIAIOSFODNN7EXAMPLE"


def _error(code: str, message: str, status: int = 400) -> ClientError:
    body = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(body, "RunInstances")  # type: ignore[arg-type]


def test_unauthorized_operation_names_the_iam_action_without_the_encoded_blob(
    caplog: pytest.LogCaptureFixture,
) -> None:
    exc = _error(
        "UnauthorizedOperation",
        "You are not authorized to perform this operation. User: arn:aws:iam::123456789012:user/"
        "dev is not authorized to perform: ec2:RunInstances on resource: arn:aws:ec2:us-east-1:"
        "123456789012:instance/* because no identity-based policy allows the ec2:RunInstances "
        f"action. Encoded authorization failure message: {BLOB}",
    )
    with caplog.at_level(logging.DEBUG, logger="spotwise.providers.aws_denied"):
        err = aws.provider_error(exc, ACTION)
    assert type(err) is ProviderUnavailable
    assert err.message == (
        f"aws: {ACTION}: permission denied (UnauthorizedOperation: not authorized to perform "
        "ec2:RunInstances on arn:aws:ec2:us-east-1:123456789012:instance/*)"
    )
    assert BLOB[:40] not in err.message and len(err.message) < 250
    hint = err.hint or ""
    assert "ec2:RunInstances" in hint and "iam:PassRole for options.instance_profile" in hint
    assert "aws sts decode-authorization-message" in hint and BLOB[:40] not in hint
    assert BLOB in caplog.text  # kept where a user who turns debug logging on can decode it


def test_access_denied_for_pass_role_names_the_role() -> None:
    exc = _error(
        "AccessDenied",
        "User: arn:aws:sts::123456789012:assumed-role/dev/session is not authorized to perform: "
        "iam:PassRole on resource: arn:aws:iam::123456789012:role/spotwise",
        403,
    )
    err = aws.provider_error(exc, ACTION)
    assert type(err) is ProviderUnavailable
    assert err.message == (
        f"aws: {ACTION}: permission denied (AccessDenied: not authorized to perform iam:PassRole "
        "on arn:aws:iam::123456789012:role/spotwise)"
    )
    assert "decode-authorization-message" not in (err.hint or "")  # no encoded message here


def test_a_refusal_naming_no_action_says_its_first_sentence_and_never_a_key() -> None:
    exc = _error(
        "UnauthorizedOperation",
        f"You are not authorized to perform this operation. Key {KEY} was used. "
        f"Encoded authorization failure message: {BLOB}",
    )
    err = aws.provider_error(exc, ACTION)
    assert err.message == (
        f"aws: {ACTION}: permission denied (UnauthorizedOperation: You are not authorized to "
        "perform this operation)"
    )
    assert KEY not in f"{err.message} {err.hint}"


@pytest.mark.parametrize(
    ("code", "message", "fix"),
    [
        (
            "OptInRequired",
            "You are not subscribed to this service. Please go to http://aws.amazon.com to "
            "subscribe.",
            "enable the region for this account",
        ),
        (
            "PendingVerification",
            "Your request for accessing resources in this region is being validated",
            "AWS is still verifying this account for the region",
        ),
    ],
)
def test_an_account_not_enabled_for_ec2_says_so(code: str, message: str, fix: str) -> None:
    err = aws.provider_error(_error(code, message), ACTION)
    assert type(err) is ProviderUnavailable
    assert err.message == (
        f"aws: {ACTION}: this account is not enabled for EC2 in this region yet ({code})"
    )
    assert (err.hint or "").startswith(fix) and "choose another region" in (err.hint or "")


def test_other_errors_are_mapped_as_before() -> None:
    err = aws.provider_error(_error("InvalidAMIID.NotFound", "The image id does not exist"), ACTION)
    assert type(err) is ProviderError and err.hint is None
    auth = aws.provider_error(_error("AuthFailure", "AWS was not able to validate"), ACTION)
    assert auth.message == f"aws: credentials rejected while {ACTION} (AuthFailure)"
