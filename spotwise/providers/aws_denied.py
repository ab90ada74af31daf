"""AWS refusals that are no failure of the call but of the account: a missing IAM permission
(EC2 ``UnauthorizedOperation``; IAM, STS, S3 ``AccessDenied``; the Pricing API's
``AccessDeniedException``) or an account or region not enabled for EC2 (``OptInRequired``,
``PendingVerification``). Each becomes a one-line
:class:`~spotwise.errors.ProviderUnavailable` with the fix as its hint, as GCP's and Azure's
permission refusals do.

EC2 appends an *encoded authorization message* to ``UnauthorizedOperation`` (a few KB, the
request's context): it is left out of the line and logged at debug level; ``aws sts
decode-authorization-message`` decodes it. The text given here is already redacted
(:func:`spotwise.providers.aws.redact`); nothing here reads credentials.
"""

from __future__ import annotations

import logging
import re

from spotwise.errors import ProviderUnavailable

log = logging.getLogger(__name__)
PERMISSION_CODES = frozenset(
    {"UnauthorizedOperation", "AccessDenied", "AccessDeniedException", "AuthorizationError"}
)
PERMISSION_HINT = (
    "grant this identity the IAM action named (spotwise calls ec2:RunInstances, ec2:CreateTags, "
    "ec2:DescribeInstances, ec2:TerminateInstances, ec2:DescribeSpotPriceHistory, "
    "ec2:DescribeInstanceTypes, ec2:DescribeInstanceTypeOfferings, pricing:GetProducts, "
    "iam:PassRole for options.instance_profile, and ssm:GetParameters for a resolve:ssm: image)"
)
DECODE_HINT = (
    "; EC2's encoded authorization message says why (left out here, logged at debug level): "
    "`aws sts decode-authorization-message --encoded-message <message>` decodes it"
)
NOT_ENABLED_HINTS = {
    "OptInRequired": "enable the region for this account (AWS console: Account, AWS Regions) or "
    "finish the account's sign-up; or choose another region",
    "PendingVerification": "AWS is still verifying this account for the region (minutes, at "
    "most a few hours): try again later, or choose another region",
}
_ENCODED = re.compile(r"\s*Encoded authorization failure message:\s*(\S+)", re.IGNORECASE)
_NOT_AUTHORIZED = re.compile(
    r"not authorized to perform:?\s*([\w-]+:[\w*]+)(?:\s+on resource:?\s*(\S+?))?[.,;]?(?:\s|$)"
)
_MAX_SAID = 200


def account_error(code: str, message: str, action: str) -> ProviderUnavailable | None:
    """The refusal ``code`` (with its redacted ``message``) of ``action`` as a one-line
    ProviderUnavailable with the fix, or None when ``code`` is no such refusal."""
    if code in NOT_ENABLED_HINTS:
        return ProviderUnavailable(
            f"aws: {action}: this account is not enabled for EC2 in this region yet ({code})",
            hint=NOT_ENABLED_HINTS[code],
        )
    if code not in PERMISSION_CODES:
        return None
    encoded = _ENCODED.search(message)
    if encoded:
        log.debug("aws: EC2's encoded authorization message (%s): %s", action, encoded.group(1))
    text = " ".join(_ENCODED.sub("", message).split())
    named = _NOT_AUTHORIZED.search(text)
    if named:
        on = f" on {named.group(2)}" if named.group(2) else ""
        said = f"not authorized to perform {named.group(1)}{on}"
    else:
        said = text.split(". ", 1)[0].rstrip(".") or "access denied"
    if len(said) > _MAX_SAID:
        said = said[: _MAX_SAID - 1] + "…"
    return ProviderUnavailable(
        f"aws: {action}: permission denied ({code}: {said})",
        hint=PERMISSION_HINT + (DECODE_HINT if encoded else ""),
    )
