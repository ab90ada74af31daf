"""The AWS adapter's entry points: ``open_catalog``, ``open_provisioner``, ``check``, and the one
place where boto3 clients are made (for EC2, the Pricing API, STS and S3).

The adapter is split by concern, each module under ~400 lines:

* :mod:`spotwise.providers.aws` — this module: SDK import, clients, errors, regions, ``check``.
* :mod:`spotwise.providers.aws_catalog` — :class:`AwsCatalog`: ``describe_instance_types``
  joined with on-demand prices (Pricing API, falling back to the shipped 2017 catalog), spot
  prices and history from ``describe_spot_price_history``.
* :mod:`spotwise.providers.aws_provisioner` — :class:`AwsProvisioner`: ``run_instances`` with
  our tags and an idempotency ``ClientToken``, describe / terminate of tagged instances only,
  notices and progress read back from S3.
* :mod:`spotwise.providers.aws_agent` — the trial-side agent the user-data starts on the
  instance: runs the trial, polls IMDSv2 for notices, syncs events to S3.

boto3 is imported lazily (inside functions, never at module level), so ``spotwise --help`` and
every non-AWS command stay fast, and a missing SDK becomes
:class:`~spotwise.errors.ProviderUnavailable` with the install hint. Clients honour the usual
AWS environment (``AWS_PROFILE``, ``AWS_REGION``, ``AWS_ENDPOINT_URL`` and the per-service
``AWS_ENDPOINT_URL_<SERVICE>``), which is how tests point them at moto.
"""

from __future__ import annotations

import contextlib
import os
import re
from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING, Any

from spotwise.errors import (
    CapacityError,
    NotFoundError,
    ProviderError,
    ProviderUnavailable,
    QuotaError,
    ThrottledError,
    TransientError,
    did_you_mean,
)
from spotwise.providers.aws_denied import account_error
from spotwise.providers.registry import INSTALL_HINT, CheckResult, ProviderConfig

if TYPE_CHECKING:
    from spotwise.providers.aws_catalog import AwsCatalog
    from spotwise.providers.aws_provisioner import AwsProvisioner

NAME = "aws"
HINT = INSTALL_HINT[NAME]
DEFAULT_REGION = "us-east-1"
PRICING_REGION = "us-east-1"  # the Pricing API answers in us-east-1, eu-central-1, ap-south-1
CAPACITY_CODES = frozenset({
    "InsufficientInstanceCapacity", "InsufficientCapacity", "SpotMaxPriceTooLow",
    "InsufficientHostCapacity", "Unsupported",
    "InsufficientFreeAddressesInSubnet", "UnfulfillableCapacity",
})  # fmt: skip
# refusals of the offer that do not pass within minutes (EC2's error codes: SpotMaxPriceTooLow,
# the Spot price above the request's max price; Unsupported, e.g. "Your requested instance type
# (...) is not supported in your requested Availability Zone (...)"): the orchestrator avoids the
# offer for a doubling backoff rather than asking again each pass
LASTING_CAPACITY_CODES = frozenset({"SpotMaxPriceTooLow", "Unsupported"})
# the account's vCPU/instance limits (Service Quotas): no capacity is coming until it is raised
QUOTA_CODES = frozenset(
    {"VcpuLimitExceeded", "InstanceLimitExceeded", "MaxSpotInstanceCountExceeded"}
)
THROTTLE_CODES = frozenset({
    "RequestLimitExceeded", "Throttling", "ThrottlingException", "ThrottledException",
    "RequestThrottled", "RequestThrottledException", "TooManyRequestsException", "SlowDown",
})  # fmt: skip
# server-side failures that pass (EC2's InternalError/Unavailable, S3's 5xx, a request the
# server timed out): the same call later succeeds; any other answer with HTTP status >= 500 too
TRANSIENT_CODES = frozenset({
    "InternalError", "InternalFailure", "InternalServerError", "InternalServiceError",
    "ServiceUnavailable", "ServiceUnavailableException", "Unavailable",
    "RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete",
    "OperationAborted", "IDPCommunicationError",
})  # fmt: skip
# botocore's failures to reach AWS or to read its answer, by class name (SSLError and
# ProxyConnectionError are left out: a certificate or proxy problem does not pass by itself)
TRANSIENT_CONNECTION = (
    "EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError",
    "ConnectionClosedError", "ResponseStreamingError", "IncompleteReadError",
)  # fmt: skip
TRANSIENT_HINT = (
    "nothing to fix if it passes: spotwise pauses the provider and tries again; if it lasts, "
    "see https://health.aws.amazon.com"
)
_KEY_RE = re.compile(r"\b(AKIA|ASIA|AROA|AIDA)[A-Z0-9]{12,}\b")
_USERINFO_RE = re.compile(r"//[^/\s@]+@")  # a URL's user:password@ part


def sdk() -> ModuleType:
    """``boto3``, imported on first use; ProviderUnavailable with the install hint if missing."""
    try:
        import boto3
    except ImportError as e:
        raise ProviderUnavailable(f"aws: boto3 is not installed ({e})", hint=HINT) from None
    return boto3


def _config(connect_timeout: float = 5.0, read_timeout: float = 30.0, attempts: int = 4) -> Any:
    from botocore.config import Config

    return Config(
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        # total_max_attempts counts the first try; max_attempts would count retries only
        retries={"mode": "standard", "total_max_attempts": attempts},
        user_agent_extra="spotwise",
    )


_LOADER: list[Any] = []  # botocore's model loader, shared: parsing a service model takes ~1 s


def session(profile: str | None = None) -> Any:
    """A fresh boto3 session (credentials resolved anew: profile from the argument, else
    ``AWS_PROFILE`` / the default chain) sharing one botocore model loader."""
    boto3 = sdk()
    import botocore.session

    core = botocore.session.Session(profile=profile)
    if _LOADER:
        core.register_component("data_loader", _LOADER[0])
    else:
        _LOADER.append(core.get_component("data_loader"))
    return boto3.Session(botocore_session=core)


def client(
    service: str, region: str | None = None, *, profile: str | None = None, fast: bool = False
) -> Any:
    """A boto3 client for ``service`` in ``region``; ``fast`` = short timeouts, one attempt."""
    cfg = _config(2.0, 5.0, 1) if fast else _config()
    try:
        return session(profile).client(service, region_name=region or default_region(), config=cfg)
    except Exception as e:
        if type(e).__name__ in ("ProfileNotFound", "InvalidConfigError"):
            raise ProviderUnavailable(
                f"aws: cannot use profile {profile!r}: {redact(str(e))}",
                hint="aws configure list-profiles",
            ) from None
        raise


def s3_client(region: str | None = None, profile: str | None = None) -> Any:
    """The S3 client every S3 user in spotwise goes through (checkpoints, agent, provisioner)."""
    return client("s3", region, profile=profile)


def default_region(config: ProviderConfig | None = None) -> str:
    """The first region of the config, else ``AWS_REGION``/``AWS_DEFAULT_REGION``, else the
    profile's region, else us-east-1."""
    if config is not None and config.regions:
        return config.regions[0]
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if os.environ.get(var):
            return os.environ[var]
    try:
        import boto3

        return boto3.Session().region_name or DEFAULT_REGION
    except Exception:
        return DEFAULT_REGION


@cache
def known_regions() -> tuple[str, ...]:
    """EC2 regions known offline (botocore's endpoint data, plus the shipped catalog's)."""
    from spotwise.providers.aws_offline import offline_regions

    names: set[str] = set(offline_regions())
    with contextlib.suppress(ProviderUnavailable):
        names.update(sdk().Session().get_available_regions("ec2"))
    return tuple(sorted(names))


def check_region(region: str) -> str:
    """``region`` if AWS has it, else NotFoundError with "did you mean"."""
    regions = known_regions()
    if region not in regions:
        raise NotFoundError(f"aws: unknown region {region!r}{did_you_mean(region, list(regions))}")
    return region


def redact(text: str) -> str:
    """Remove anything shaped like an AWS access key id, and the ``user:password@`` part of
    any URL, from a message."""
    return _USERINFO_RE.sub("//", _KEY_RE.sub("<redacted>", text))


def safe_url(url: str) -> str:
    """An endpoint URL fit to print: no ``user:password@``, no query string."""
    return redact(url.split("?", 1)[0].split("#", 1)[0])


def error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore ClientError (``""`` for other exceptions)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        if code:
            return str(code)
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return str(status) if status else ""
    return ""


def error_message(exc: BaseException) -> str:
    """The message of a botocore ClientError's answer, else the exception's text."""
    response = getattr(exc, "response", None)
    error = response.get("Error") if isinstance(response, dict) else None
    return str(error.get("Message") or exc) if isinstance(error, dict) else str(exc)


def is_sdk_error(exc: BaseException) -> bool:
    """True for botocore's ClientError / BotoCoreError (without importing botocore here);
    BotoCoreError covers the failures to reach AWS (``EndpointConnectionError``,
    ``ConnectTimeoutError``, ``ReadTimeoutError``, ``ConnectionClosedError``)."""
    try:
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:
        return False
    return isinstance(exc, BotoCoreError | ClientError)


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of a botocore ClientError's answer (None for other exceptions)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status if isinstance(status, int) else None


def _connection_failure(exc: BaseException) -> bool:
    """True for botocore's failures to reach AWS or to read its answer that pass."""
    try:
        from botocore.exceptions import BotoCoreError
    except ImportError:
        return False
    return isinstance(exc, BotoCoreError) and any(
        c.__name__ in TRANSIENT_CONNECTION for c in type(exc).__mro__
    )


def transient_error(exc: BaseException, action: str) -> TransientError | None:
    """A TransientError when ``exc`` is a failure that passes (a 5xx answer, EC2's
    ``InternalError``/``Unavailable``, a timeout, a dropped connection), else None."""
    code, status = error_code(exc), http_status(exc)
    if code in TRANSIENT_CODES or (status is not None and status >= 500):
        why = code if not status or code == str(status) else f"{code}, HTTP {status}"
        return TransientError(
            f"aws: a passing failure of the AWS API ({why}) while {action}", hint=TRANSIENT_HINT
        )
    if _connection_failure(exc):
        # botocore names the URL it could not reach; never a query string (a signature)
        text = re.sub(r"\?[^\s\"']*", "", " ".join(redact(str(exc)).split())).rstrip(".")
        endpoint = safe_url(os.environ.get("AWS_ENDPOINT_URL", ""))
        also = f" and AWS_ENDPOINT_URL ({endpoint})" if endpoint else ""
        return TransientError(
            f"aws: a passing failure of the AWS API ({text}) while {action}",
            hint="nothing to fix if it passes: spotwise pauses the provider and tries again; "
            f"if it lasts, check this machine's network{also}",
        )
    return None


def provider_error(exc: BaseException, action: str) -> ProviderError:
    """Map a botocore error to our tree: no credentials → ProviderUnavailable, throttling →
    ThrottledError, a missing IAM permission or a region not enabled → ProviderUnavailable
    with the fix (:mod:`spotwise.providers.aws_denied`), quota → QuotaError, no capacity →
    CapacityError (``lasting`` for :data:`LASTING_CAPACITY_CODES`), a failure that passes
    (5xx, timeout, dropped connection) → TransientError, anything else → ProviderError. The
    message never carries a secret."""
    from botocore.exceptions import NoCredentialsError, PartialCredentialsError

    code = error_code(exc)
    msg = redact(str(exc))
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return ProviderUnavailable(
            f"aws: no credentials for {action}",
            hint="aws configure (or set AWS_PROFILE), then spotwise check",
        )
    if code in (
        "AuthFailure",
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "ExpiredToken",
        "SignatureDoesNotMatch",
    ):
        return ProviderUnavailable(
            f"aws: credentials rejected while {action} ({code})", hint="spotwise check"
        )
    denied = account_error(code, redact(error_message(exc)), action)
    if denied is not None:  # a missing IAM permission, a region not enabled: the fix, one line
        return denied
    if code in THROTTLE_CODES:  # botocore's own retries gave up; spotwise's back-off is next
        return ThrottledError(
            f"aws: the AWS API is throttling requests ({code}) while {action}",
            hint="nothing to fix: spotwise backs off and retries the call later",
        )
    if code in QUOTA_CODES:
        return QuotaError(
            f"aws: quota reached while {action} ({code}): {msg}",
            hint="request an increase of the EC2 Running On-Demand/Spot vCPU quota for this "
            "instance family in Service Quotas, or choose another region",
        )
    if code in CAPACITY_CODES:  # before the 5xx: EC2 answers InsufficientInstanceCapacity with 500
        lasting = code in LASTING_CAPACITY_CODES
        return CapacityError(f"aws: no capacity for {action}: {msg}", lasting=lasting)
    transient = transient_error(exc, action)
    if transient is not None:
        return transient
    return ProviderError(f"aws: {action} failed: {msg}")


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` → ``("bucket", "some/prefix")`` (prefix without slashes at
    the ends). Also repairs ``s3:/bucket/...`` (a URI collapsed by ``pathlib``)."""
    m = re.match(r"^s3:/{1,2}([^/]+)/?(.*)$", uri.strip())
    if m is None or not re.fullmatch(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]", m.group(1)):
        raise ProviderError(f"aws: {uri!r} is not an S3 location; expected s3://bucket/prefix")
    return m.group(1), m.group(2).strip("/")


def s3_uri(bucket: str, prefix: str) -> str:
    return f"s3://{bucket}/{prefix}".rstrip("/")


# ---- the three functions of a cloud module ----------------------------------------------------
def check() -> CheckResult:
    """Is AWS usable here? Names the credential *source* and the account, never a secret."""
    try:
        sess = sdk().Session()
    except ProviderUnavailable as e:
        return CheckResult(NAME, False, f"{e.message}; {HINT}")
    details: dict[str, str] = {"region": sess.region_name or f"{DEFAULT_REGION} (default)"}
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        details["endpoint"] = safe_url(endpoint)
    try:
        creds = sess.get_credentials()
    except Exception as e:
        return CheckResult(NAME, False, f"cannot load AWS credentials: {redact(str(e))}", details)
    if creds is None:
        return CheckResult(
            NAME,
            False,
            "no AWS credentials found (environment, ~/.aws, SSO or instance role); "
            "run `aws configure` or set AWS_PROFILE",
            details,
        )
    details["credentials"] = str(getattr(creds, "method", "") or "found")
    try:
        sts = sess.client(
            "sts", region_name=sess.region_name or DEFAULT_REGION, config=_config(2.0, 5.0, 1)
        )
        ident = sts.get_caller_identity()
    except Exception as e:
        code = error_code(e) or type(e).__name__
        return CheckResult(
            NAME,
            False,
            f"AWS credentials from {details['credentials']} could not be verified by STS ({code})",
            details,
        )
    details["account"] = str(ident.get("Account", ""))
    return CheckResult(
        NAME,
        True,
        f"credentials from {details['credentials']}, account {details['account']}",
        details,
    )


def open_catalog(config: ProviderConfig) -> AwsCatalog:
    from spotwise.providers.aws_catalog import AwsCatalog

    sdk()
    return AwsCatalog(config)


def open_provisioner(config: ProviderConfig) -> AwsProvisioner:
    from spotwise.providers.aws_provisioner import AwsProvisioner

    sdk()
    return AwsProvisioner(config)
