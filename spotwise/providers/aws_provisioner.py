"""The AWS provisioner: launch, watch and terminate EC2 instances that carry our tags.

Money safety first:

* a launch without our tags (:func:`~spotwise.providers.base.is_ours`) is refused, and the
  ``ClientToken`` is the launch id the orchestrator recorded *before* the call. EC2 makes a
  retried ``run_instances`` with the same token return the same instance; we also look the
  launch id up by tag first, so a retry after a crash (or on moto, which ignores the token)
  never starts a second instance. Only an instance whose ``ClientToken`` is the launch id is
  that launch's (:attr:`~spotwise.providers.base.Instance.launch_identity`): a copy made with
  "Launch more like this" carries our tags, never our token, and is never adopted;
* ``describe`` filters on ``spotwise:managed=true`` (plus the caller's tags), and
  ``terminate`` checks every id first: one that is not ours (or does not exist) refuses the
  whole call with :class:`~spotwise.errors.ProviderError`.

The instance runs :mod:`spotwise.providers.aws_agent` from its user-data. The agent writes the
trial's events, its notices and the exit code to S3 under the trial's *artifacts* location
(provider option ``artifacts`` = ``s3://bucket/prefix``, to which ``/<job>/<trial>`` is added;
default: the trial's ``SPOTWISE_CHECKPOINT_URI``, which must be ``s3://`` either way: a
checkpoint on the instance's own disk would go with it). ``progress``,
``notices`` and ``describe`` read them back, at most once per ``poll_s`` per instance (option,
default 2 s) so a fast orchestrator loop cannot flood the APIs. A stop request (the
orchestrator creating the trial's local stop file) is relayed as ``stop-<attempt>`` in S3, and
the trial's local control file (live settings, ``SPOTWISE_CONTROL_FILE``) as
``control-<attempt>.json`` each time its content changes.

Provider options (``providers[].options`` in the job spec): ``image`` (AMI id or
``resolve:ssm:/parameter``, required to launch), ``setup`` (shell run before the agent, e.g.
installing spotwise and fetching the code), ``python`` (default ``python3``), ``workdir``,
``instance_profile``, ``subnet``, ``security_groups`` (comma separated), ``key_name``,
``artifacts``, ``poll_s`` (default ``$SPOTWISE_AWS_POLL_S`` or 2), ``agent_poll_s``,
``rebalance`` (``stop`` | ``ignore``), ``profile``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spotwise.errors import ProviderError
from spotwise.providers import aws
from spotwise.providers.aws_agent import AgentConfig, render_user_data
from spotwise.providers.aws_instances import (
    TAG_MARKET,
    TAG_OD_PRICE,
    TAG_PRICE,
    ec2_instance,
    ec2_tags,
)
from spotwise.providers.base import (
    TAG_JOB,
    TAG_LAUNCH,
    TAG_MANAGED,
    TAG_TRIAL,
    Instance,
    LaunchRequest,
    Market,
    Notice,
    is_ours,
)
from spotwise.providers.channel import SECRET_ENV, artifacts_uri  # one deny-list: channel's
from spotwise.providers.registry import ProviderConfig
from spotwise.providers.s3_blobs import S3Blobs
from spotwise.providers.trial_config import instance_argv, instance_env
from spotwise.providers.trialfiles import Tracks, TrialFiles

TAG_ARTIFACTS, TAG_ATTEMPT = "spotwise:artifacts", "spotwise:attempt"
USER_DATA_LIMIT = 16 * 1024


class AwsProvisioner:
    """A :class:`~spotwise.providers.base.Provisioner` over EC2 (see the module docstring)."""

    name = "aws"
    #: EC2's API is eventually consistent: an instance may be missing from DescribeInstances
    #: for a while after RunInstances. A launch whose call failed without saying whether the
    #: instance was created is not taken as clean on an empty listing before this many seconds.
    LISTING_LAG_S = 120.0

    def __init__(self, config: ProviderConfig | None = None, *, clock: Any = time.time) -> None:
        self.config = config or ProviderConfig(name="aws")
        opts = self.config.options
        self.profile = opts.get("profile") or None
        self.poll_s = float(opts.get("poll_s") or os.environ.get("SPOTWISE_AWS_POLL_S") or 2.0)
        self._clock = clock
        self._clients: dict[tuple[str, str], Any] = {}
        # the trials' files, read through Tracks (rate limit, storage errors retried at the next
        # poll, an exit held back until its notice is out); its dict is ours to fill
        self._reader = Tracks(self.poll_s, clock)
        self._tracks: dict[str, TrialFiles] = self._reader.by_id
        self._regions: set[str] = set(self.config.regions) or {aws.default_region(self.config)}
        self._terminated: set[str] = set()
        self._cache: dict[tuple[tuple[str, str], ...], tuple[float, list[Instance]]] = {}

    # ---- Provisioner -------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> Instance:
        tags = dict(request.tags)
        if not is_ours(tags):
            raise ProviderError("aws: refusing to launch an instance without spotwise tags")
        if tags.get(TAG_LAUNCH, request.client_token) != request.client_token:
            raise ProviderError("aws: the spotwise:launch tag must equal the ClientToken")
        tags[TAG_LAUNCH] = request.client_token
        leaked = [k for k in request.env if k in SECRET_ENV]
        if leaked:
            raise ProviderError(
                f"aws: refusing to put {leaked} in user-data; instances get "
                "credentials from their instance profile (option instance_profile)"
            )
        offer, region = request.offer, request.offer.region
        self._regions.add(region)
        existing = self._find_launch(region, request.client_token)
        if existing is not None:
            self._track_files(existing, request.env)
            return existing
        image = self.config.options.get("image", "")
        if not image:
            raise ProviderError(
                "aws: no machine image: set providers[].options.image to an AMI id "
                "or resolve:ssm:<parameter> whose Python can run spotwise"
            )
        artifacts = self._artifacts(request)
        attempt = request.env.get("SPOTWISE_ATTEMPT", "0")
        cfg = self._agent_config(request, artifacts, region, attempt)
        opts = self.config.options
        user_data = render_user_data(
            cfg, python=opts.get("python", "python3"), setup=opts.get("setup", "")
        )
        size = len(user_data.encode())
        if size > USER_DATA_LIMIT:
            raise ProviderError(
                f"aws: user-data is {size} bytes, over EC2's 16 KB; "
                "shorten the job's env or options.setup"
            )
        tags.update(
            {
                TAG_MARKET: offer.market.value,
                TAG_PRICE: f"{offer.price_per_hour:.6f}",
                TAG_OD_PRICE: f"{offer.on_demand_price_per_hour:.6f}",
                TAG_ATTEMPT: attempt,
                "Name": f"spotwise-{tags[TAG_JOB]}-{tags[TAG_TRIAL]}"[:255],
            }
        )
        if len(artifacts) <= 256:
            tags[TAG_ARTIFACTS] = artifacts
        tag_list = [{"Key": k, "Value": v} for k, v in tags.items()]
        args: dict[str, Any] = {
            "ImageId": image,
            "InstanceType": offer.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "ClientToken": request.client_token,
            "UserData": user_data,
            "Placement": {"AvailabilityZone": offer.zone},
            "InstanceInitiatedShutdownBehavior": "terminate",
            "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tag_list},
                {"ResourceType": "volume", "Tags": tag_list},
            ],
        }
        if offer.market is Market.SPOT:
            args["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": {
                    "SpotInstanceType": "one-time",
                    "InstanceInterruptionBehavior": "terminate",
                },
            }
        if opts.get("instance_profile"):
            key = "Arn" if opts["instance_profile"].startswith("arn:") else "Name"
            args["IamInstanceProfile"] = {key: opts["instance_profile"]}
        if opts.get("subnet"):
            args["SubnetId"] = opts["subnet"]
            args.pop("Placement")
        if opts.get("security_groups"):
            groups = opts["security_groups"].split(",")
            args["SecurityGroupIds"] = [g.strip() for g in groups if g.strip()]
        if opts.get("key_name"):
            args["KeyName"] = opts["key_name"]
        try:
            resp = self._ec2(region).run_instances(**args)
        except Exception as e:
            if not aws.is_sdk_error(e):
                raise
            raise aws.provider_error(
                e, f"launching {offer.instance_type} ({offer.market.value}) in {offer.zone}"
            ) from None
        inst = self._to_instance(resp["Instances"][0], region)
        inst.tags = {**inst.tags, **tags}  # RunInstances may answer before tags show
        inst.launch_identity = inst.launch_identity or request.client_token  # this call's own
        inst.offer = offer
        self._track_files(inst, request.env)
        self._cache.clear()
        return inst

    def describe(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        key = tuple(sorted((tags or {}).items()))
        hit = self._cache.get(key)
        if hit is not None and time.monotonic() - hit[0] < self.poll_s:
            return hit[1]
        filters = [{"Name": f"tag:{TAG_MANAGED}", "Values": ["true"]}]
        filters += [{"Name": f"tag:{k}", "Values": [v]} for k, v in (tags or {}).items()]
        out = [
            self._to_instance(raw, region)
            for region in sorted(self._regions)
            for raw in self._describe_raw(region, filters)
        ]
        out = [i for i in out if is_ours(i.tags)]
        for inst in out:
            if self._track(inst) is not None:
                self._reader.observe(inst)  # its exit code; a last read when it ends
        self._cache[key] = (time.monotonic(), out)
        return out

    def terminate(self, instance_ids: Sequence[str]) -> None:
        ids = list(dict.fromkeys(instance_ids))
        if not ids:
            return
        found: dict[str, tuple[str, dict[str, str]]] = {}
        for region in sorted(self._regions):
            for raw in self._describe_raw(region, [{"Name": "instance-id", "Values": ids}]):
                found[raw["InstanceId"]] = (region, ec2_tags(raw))
        foreign = [i for i in ids if i not in found or not is_ours(found[i][1])]
        if foreign:
            raise ProviderError(
                f"aws: refusing to terminate {foreign}: not instances spotwise "
                "launched (no spotwise:managed tag, or not found in "
                f"{', '.join(sorted(self._regions))})"
            )
        by_region: dict[str, list[str]] = {}
        for iid in ids:
            by_region.setdefault(found[iid][0], []).append(iid)
        for region, group in by_region.items():
            try:
                self._ec2(region).terminate_instances(InstanceIds=group)
            except Exception as e:
                if not aws.is_sdk_error(e):
                    raise
                raise aws.provider_error(e, f"terminating {group}") from None
            self._terminated.update(group)
        self._cache.clear()

    def notices(self) -> list[Notice]:
        return self._reader.notices()

    def progress(self, instance_id: str) -> list[dict[str, object]]:
        return self._reader.progress(instance_id)

    def agent_heard(self, instance_id: str) -> bool:
        """Whether its agent's status has been read (:mod:`spotwise.planner.no_word`)."""
        return self._reader.heard(instance_id)

    # ---- the trial's files in S3 (see spotwise.providers.trialfiles) ------------------------
    def _sync(self, track: TrialFiles, force: bool = False) -> bool:
        return self._reader.sync(track, force)

    def _track(self, inst: Instance) -> TrialFiles | None:
        track = self._tracks.get(inst.instance_id)
        if track is None:
            uri = inst.tags.get(TAG_ARTIFACTS)
            if not uri:
                return None
            blobs = S3Blobs.from_uri(uri, client=self._s3())
            track = TrialFiles(inst.instance_id, blobs, inst.tags.get(TAG_ATTEMPT, "0"))
            self._tracks[inst.instance_id] = track
        return track

    def _track_files(self, inst: Instance, env: Mapping[str, str]) -> None:
        """Relay the launch's local stop and control files (orchestrator side) to its trial."""
        track = self._track(inst)
        if track is None:
            return
        if env.get("SPOTWISE_STOP_FILE"):
            track.stop_file = Path(env["SPOTWISE_STOP_FILE"])
        if env.get("SPOTWISE_CONTROL_FILE"):
            track.control_file = Path(env["SPOTWISE_CONTROL_FILE"])

    def _artifacts(self, request: LaunchRequest) -> str:
        ckpt = request.env.get("SPOTWISE_CHECKPOINT_URI", "")
        job, trial = request.tags[TAG_JOB], request.tags[TAG_TRIAL]
        return artifacts_uri("aws", self.config.options, ckpt, job, trial)

    def _agent_config(
        self, request: LaunchRequest, artifacts: str, region: str, attempt: str
    ) -> AgentConfig:
        opts = self.config.options
        env = dict(request.env)
        ckpt = env.get("SPOTWISE_CHECKPOINT_URI", "")
        if ckpt.startswith("s3:"):
            env["SPOTWISE_CHECKPOINT_URI"] = aws.s3_uri(*aws.parse_s3_uri(ckpt))
        env = instance_env(env)  # the agent sets instance-local paths
        argv = instance_argv(request.argv)
        return AgentConfig(
            job_id=request.tags[TAG_JOB],
            trial_id=request.tags[TAG_TRIAL],
            attempt=int(attempt) if attempt.isdigit() else 0,
            launch_id=request.client_token,
            argv=argv,
            env=env,
            artifacts=artifacts,
            region=region,
            workdir=opts.get("workdir", request.workdir),
            poll_s=float(opts.get("agent_poll_s", "2")),
            rebalance=opts.get("rebalance", "stop"),
        )

    # ---- EC2 side ----------------------------------------------------------------------
    def _ec2(self, region: str) -> Any:
        return self._client("ec2", region)

    def _s3(self) -> Any:
        return self._client("s3", sorted(self._regions)[0])

    def _client(self, service: str, region: str) -> Any:
        if (service, region) not in self._clients:
            self._clients[(service, region)] = aws.client(service, region, profile=self.profile)
        return self._clients[(service, region)]

    def _describe_raw(self, region: str, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        try:
            pages = self._ec2(region).get_paginator("describe_instances")
            for page in pages.paginate(Filters=filters):
                for res in page.get("Reservations", []):
                    out += res.get("Instances", [])
        except Exception as e:
            if not aws.is_sdk_error(e):
                raise
            raise aws.provider_error(e, f"describing instances in {region}") from None
        return out

    def _find_launch(self, region: str, launch_id: str) -> Instance | None:
        filters = [
            {"Name": f"tag:{TAG_MANAGED}", "Values": ["true"]},
            {"Name": f"tag:{TAG_LAUNCH}", "Values": [launch_id]},
        ]
        for raw in self._describe_raw(region, filters):
            if raw.get("ClientToken") != launch_id:
                continue  # our launch tag, but another request made it (a copy): not adopted
            inst = self._to_instance(raw, region)
            self._track(inst)
            return inst
        return None

    def _to_instance(self, raw: dict[str, Any], region: str) -> Instance:
        iid = raw["InstanceId"]
        track = self._tracks.get(iid)
        noticed = track is not None and track.interrupted() and iid not in self._terminated
        return ec2_instance(raw, region, noticed=noticed, now=self._clock())
