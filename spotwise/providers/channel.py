"""Where a cloud trial's channel lives: its *artifacts* folder, and whether an instance can
reach it.

The agent on an instance and the controller exchange a trial's events, status, stop marker and
live settings through one folder per trial (see :mod:`spotwise.providers.trialfiles`):

* ``providers[].options.artifacts`` + ``/<job>/<trial>`` when that option is set, else
* the trial's checkpoint location (``SPOTWISE_CHECKPOINT_URI``), the events beside the
  checkpoints.

Either way the checkpoint location itself must be one an instance of that cloud can reach:
``s3://`` on AWS, ``gs://`` or a shared ``file://`` folder on GCP, ``az://`` or a shared
``file://`` folder on Azure. ``artifacts`` only moves the channel: with a plain local
checkpoint folder a trial would checkpoint to its instance's own disk, which goes with the
instance, and a "resume" would start again from step 0 (paid twice). Anything else (a plain
local folder, another cloud's bucket) is refused with a one-line
:class:`~spotwise.errors.ProviderError` naming ``checkpoint.location`` at launch, and as a
spec error (exit 2) before a job starts (:func:`check_reachable`, called when the job's market
is opened) so such a job never buys an instance. (A launch that names no checkpoint location
at all has nothing to lose: it only needs a channel.)

The launch spec of GCP and Azure (the ``spotwise-launch`` metadata item, the VM's
``launch.json``) is defined here too: :func:`launch_spec` writes it, :func:`parse_launch` reads
it on the instance and :func:`trial_config` turns it into the agent's
:class:`~spotwise.providers.trial_agent.TrialConfig`. It is JSON, never shell text::

    {"argv": [...], "env": {...}, "workdir": "...",          # the trial
     "artifacts": "gs://b/p/<job>/<trial>", "attempt": 1,    # its channel ("" = none)
     "job_id": "...", "trial_id": "...", "launch_id": "...",
     "poll_s": 1.0}                                          # optional agent settings

``env`` never holds the controller's local paths (``SPOTWISE_EVENTS_FILE``, ``..._STOP_FILE``,
``..._CONTROL_FILE``): the agent sets the instance's own.

:func:`read_output` reads back the end of a trial attempt's output (``output-<attempt>.log``,
uploaded by the agent before the status that says the trial exited), for the job's ``logs``
folder.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spotwise.errors import ProviderError, SpecError
from spotwise.providers.base import TAG_JOB, TAG_TRIAL, LaunchRequest
from spotwise.providers.blobs_open import scheme_of
from spotwise.providers.trial_config import TrialConfig, instance_argv, instance_env

AGENT_NUMBERS = ("poll_s", "sync_s", "kill_grace_s", "shutdown_after_s")
#: The credential variables of the clouds' SDKs: never put on an instance (EC2 user-data, the
#: GCE metadata item, Azure customData are readable there and through the cloud's API), by
#: any provisioner; instances get credentials from their own identity. The one list, used by
#: every cloud (and refused before a cloud job starts: spotwise.planner.preflight).
#: ``GOOGLE_APPLICATION_CREDENTIALS`` is not on it: its value is a path, not a secret.
SECRET_ENV = frozenset({
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AZURE_CLIENT_SECRET", "AZURE_CLIENT_CERTIFICATE_PASSWORD", "AZURE_PASSWORD",
    "AZURE_STORAGE_KEY", "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_SAS_TOKEN",
    "GOOGLE_OAUTH_ACCESS_TOKEN", "CLOUDSDK_AUTH_ACCESS_TOKEN",
})  # fmt: skip
#: What a storage URI may carry that is a credential (a key pair before ``@``, a SAS token or
#: ``access_token=`` in its query): refused in ``checkpoint.location`` and ``options.artifacts``
#: without echoing it (:func:`uri_credentials`).
NO_CREDENTIALS_IN_URI = (
    "write the bare location (e.g. s3://bucket/prefix): credentials come from the SDK's "
    "standard chain (environment, profile, the instance's identity), never from the location"
)
_URI_HEAD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(/+)")
_STORAGE_SCHEMES = ("s3", "gs", "az", "file")  # also read as s3:/bucket (pathlib's collapse)


@dataclass(frozen=True)
class Reach:
    """What the instances of one cloud can read and write without extra credentials."""

    schemes: tuple[str, ...]
    storage: str  # for messages: "S3", "GCS", ...
    machine: str  # "an EC2 instance", ...
    example: str  # the checkpoint.location to suggest


REACH = {
    "aws": Reach(("s3",), "S3", "an EC2 instance", "s3://bucket/prefix"),
    "gcp": Reach(("gs", "file"), "GCS", "a GCE instance", "gs://bucket/prefix"),
    "azure": Reach(
        ("az", "file"), "Azure Blob storage", "an Azure VM", "az://account/container/prefix"
    ),
}


def uri_credentials(uri: str) -> str:
    """What of a storage URI could be a credential, in words for a message that does not show
    it: ``"has a user name or key before '@'"`` (user info in its authority),
    ``"has a ?query"`` (a SAS token, ``access_token=``), ``"has a #fragment"``; ``""`` for
    none, and for a plain folder path (where ``@``, ``?`` and ``#`` are part of a name)."""
    u = uri.strip()
    m = _URI_HEAD.match(u)
    if m is None:
        return ""
    scheme, slashes = m.group(1).lower(), m.group(2)
    if len(slashes) == 1 and scheme not in _STORAGE_SCHEMES:
        return ""  # "name:/x": a folder name with a colon, not a URI
    rest = u[m.end() :]
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0] if len(slashes) <= 2 else ""
    if "@" in authority:
        return "has a user name or key before '@'"
    if "?" in rest:
        return "has a ?query"
    if "#" in rest:
        return "has a #fragment"
    return ""


def normalized(uri: str) -> str:
    """The URI without a trailing ``/`` (``s3:/b/p``, as ``pathlib`` collapses it, repaired)."""
    uri = uri.strip()
    if scheme_of(uri) == "s3":
        from spotwise.providers import aws

        return aws.s3_uri(*aws.parse_s3_uri(uri))
    return uri.rstrip("/")


def _reachable(cloud: str, uri: str) -> bool:
    scheme = scheme_of(uri)
    if scheme not in REACH[cloud].schemes:
        return False
    if scheme != "file":
        return True
    if not uri.startswith("file:"):
        return False  # a plain path is a folder of this machine, not a shared one
    from spotwise.providers.file_blobs import path_of

    try:
        path_of(uri)
    except ProviderError:
        return False
    return True


def _unreachable(cloud: str, what: str, artifacts: str = "") -> ProviderError:
    r = REACH[cloud]
    shared = " nor a shared file:// folder" if "file" in r.schemes else ""
    where = f"neither in {r.storage}{shared}" if shared else f"not in {r.storage}"
    moved = (
        " (providers[].options.artifacts only moves the trial's events; its checkpoints would "
        "be lost with the instance)"
        if artifacts
        else ""
    )
    return ProviderError(
        f"{cloud}: the trial's checkpoint location {what or '(none)'!r} is {where}, and "
        f"{r.machine} cannot reach it; set the job's checkpoint.location to {r.example}{moved}"
    )


def _base(cloud: str, options: Mapping[str, str]) -> str:
    base = str(options.get("artifacts", "") or "")
    if what := uri_credentials(base):
        raise ProviderError(
            f"{cloud}: providers[].options.artifacts {what} (not shown: it may be a "
            f"credential); {NO_CREDENTIALS_IN_URI}"
        )
    if base and not _reachable(cloud, base.strip()):
        r = REACH[cloud]
        forms = " or ".join(f"{s}://..." for s in r.schemes)
        raise ProviderError(
            f"{cloud}: providers[].options.artifacts {base!r} is not a location {r.machine} "
            f"can reach; use {forms}"
        )
    return normalized(base) if base else ""


def artifacts_uri(
    cloud: str, options: Mapping[str, str], checkpoint_uri: str, job: str, trial: str
) -> str:
    """The artifacts folder of one trial (see the module docstring); ProviderError if none, or
    if the trial's checkpoint location is one an instance cannot reach."""
    base = _base(cloud, options)
    if checkpoint_uri.strip() and not _reachable(cloud, checkpoint_uri.strip()):
        raise _unreachable(cloud, checkpoint_uri, base)
    if base:
        return f"{base}/{job}/{trial}"
    if checkpoint_uri.strip():
        return normalized(checkpoint_uri)
    raise _unreachable(cloud, checkpoint_uri)


def output_name(attempt: int | str) -> str:
    """The name, in a trial's artifacts folder, of the tail of one attempt's output."""
    return f"output-{attempt}.log"


def read_output(
    cloud: str,
    options: Mapping[str, str],
    checkpoint_uri: str,
    job: str,
    trial: str,
    attempt: int,
    region: str = "",
) -> tuple[str, bytes | None]:
    """``(where, data)``: the URI of the tail of a trial attempt's output in its artifacts
    folder (the folder the cloud's provisioner gave the agent), and its bytes (None: nothing
    was uploaded). ProviderError when the folder cannot be read (the error names the folder,
    never a credential)."""
    uri = artifacts_uri(cloud, options, checkpoint_uri, job, trial)
    name = output_name(attempt)
    data, _ = open_artifacts(uri, options, region).get(name)
    return f"{uri}/{name}", data


def open_artifacts(uri: str, options: Mapping[str, str], region: str = "") -> Any:
    """The blob store of the artifacts folder ``uri``, opened as the provisioner reads it (S3:
    the provider's region and profile)."""
    if scheme_of(uri) == "s3":
        from spotwise.providers.s3_blobs import S3Blobs

        profile = str(options.get("profile") or "") or None
        return S3Blobs.from_uri(uri, region=region or None, profile=profile)
    from spotwise.providers.blobs_open import open_blobs

    return open_blobs(uri, channel=True)


def check_reachable(
    cloud: str, options: Mapping[str, str], checkpoint_location: str, index: int = 0
) -> None:
    """Before a job starts: a SpecError (exit 2) naming the field to change unless the cloud's
    instances can reach the job's checkpoint location (whatever ``artifacts`` says: it only
    moves the channel) and the ``artifacts`` option of ``providers[index]``, when set, is a
    folder they can reach too."""
    if cloud not in REACH:
        return
    try:
        base = _base(cloud, options)
    except ProviderError as e:
        raise SpecError(f"spec field 'providers.{index}.options.artifacts': {e.message}") from None
    if not _reachable(cloud, checkpoint_location.strip()):
        why = _unreachable(cloud, checkpoint_location, base).message
        raise SpecError(f"spec field 'checkpoint.location': {why}")


def attempt_of(env: Mapping[str, str]) -> int:
    raw = str(env.get("SPOTWISE_ATTEMPT", "0"))
    return int(raw) if raw.isdigit() else 0


def launch_spec(
    request: LaunchRequest, artifacts: str, options: Mapping[str, str]
) -> dict[str, Any]:
    """What a GCP/Azure instance's agent is told (see the module docstring). A launch env that
    holds a credential variable is refused: instances get theirs from their own identity."""
    leaked = sorted(k for k in request.env if k in SECRET_ENV)
    if leaked:
        raise ProviderError(
            f"{request.offer.provider}: refusing to put {leaked} in the launch spec; instances "
            "get credentials from their service account or managed identity"
        )
    spec: dict[str, Any] = {
        "argv": instance_argv(request.argv),
        "env": instance_env(dict(request.env)),
        "workdir": str(options.get("workdir") or request.workdir),
        "artifacts": artifacts,
        "attempt": attempt_of(request.env),
        "job_id": request.tags.get(TAG_JOB, ""),
        "trial_id": request.tags.get(TAG_TRIAL, ""),
        "launch_id": request.client_token,
    }
    if options.get("agent_poll_s"):
        spec["poll_s"] = float(options["agent_poll_s"])
    return spec


def parse_launch(text: str) -> dict[str, Any]:
    """A launch spec, validated; ValueError naming the bad field."""
    spec = json.loads(text)
    argv = spec.get("argv") if isinstance(spec, dict) else None
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError("spotwise-launch: 'argv' must be a non-empty list of strings")
    env = spec.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise ValueError("spotwise-launch: 'env' must map names to strings")
    out: dict[str, Any] = {"argv": argv, "env": env, "workdir": str(spec.get("workdir") or "")}
    for key in ("artifacts", "job_id", "trial_id", "launch_id"):
        value = spec.get(key) or ""
        if not isinstance(value, str):
            raise ValueError(f"spotwise-launch: {key!r} must be a string")
        out[key] = value
    attempt = spec.get("attempt") or 0
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
        raise ValueError("spotwise-launch: 'attempt' must be an int >= 0")
    out["attempt"] = attempt
    for key in AGENT_NUMBERS:
        if spec.get(key) is not None:
            if isinstance(spec[key], bool) or not isinstance(spec[key], int | float):
                raise ValueError(f"spotwise-launch: {key!r} must be a number")
            out[key] = float(spec[key])
    return out


def trial_config(spec: Mapping[str, Any], **defaults: float | str) -> TrialConfig:
    """The agent's settings for a parsed launch spec; ``defaults`` for what it leaves out
    (the spec's own values win)."""
    cfg = TrialConfig(
        job_id=spec["job_id"] or "job",
        trial_id=spec["trial_id"] or "trial",
        attempt=int(spec["attempt"]),
        launch_id=spec["launch_id"],
        argv=list(spec["argv"]),
        env=dict(spec["env"]),
        workdir=spec["workdir"],
    )
    for key, value in {**defaults, **{k: spec[k] for k in AGENT_NUMBERS if k in spec}}.items():
        setattr(cfg, key, value)
    return cfg
