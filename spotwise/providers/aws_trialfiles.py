"""What the provisioner reads back from (and relays to) a trial's files in S3.

The agent on the instance (:mod:`spotwise.providers.aws_agent`) writes, under the trial's
artifacts location ``s3://bucket/prefix/<job>/<trial>``:

* ``events-<attempt>.jsonl`` — the trial's events (``spotwise.sdk`` records), whole lines;
* ``agent-<attempt>.json`` — its status: notices seen, and the exit code once the trial ends.
  The events are uploaded before a status that says the trial exited.

and the provisioner writes

* ``stop-<attempt>`` when the orchestrator asks the trial to stop (it creates the trial's local
  stop file; the agent turns the S3 marker into the instance's one);
* ``control-<attempt>.json`` whenever the content of the trial's local control file (live
  settings such as ``{"checkpoint_every": N}``, see :mod:`spotwise.sdk`) changed since the last
  upload; the agent replaces the instance's control file with it.

:class:`TrialFiles` reads the status first and the events second, so whenever it sees the
exit it has every event. Reads are conditional (``IfNoneMatch`` on the last ETag) and happen
at most once per ``poll_s``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spotwise.providers import aws
from spotwise.providers.base import Notice, NoticeKind

_UNCHANGED_OR_MISSING = ("304", "NotModified", "NoSuchKey", "404", "NotFound")


@dataclass
class TrialFiles:
    """One instance's view of its trial's files in S3."""

    instance_id: str
    bucket: str
    prefix: str
    attempt: str
    stop_file: Path | None = None
    stop_sent: bool = False
    control_file: Path | None = None
    control_sent: bytes | None = None  # the control file's content as last uploaded
    events_pos: int = 0
    events_etag: str = ""
    status_etag: str = ""
    buffer: list[dict[str, object]] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    reported: int = 0
    exit_code: int | None = None
    ended: bool = False  # the instance is gone: nothing more will be written
    last_sync: float = -1e18

    @classmethod
    def at(cls, instance_id: str, uri: str, attempt: str) -> TrialFiles:
        bucket, prefix = aws.parse_s3_uri(uri)
        return cls(instance_id, bucket, prefix, attempt)

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def interrupted(self) -> bool:
        return any(n.kind is NoticeKind.INTERRUPTION for n in self.notices)

    def take_events(self) -> list[dict[str, object]]:
        out, self.buffer = self.buffer, []
        return out

    def take_notices(self) -> list[Notice]:
        """New notices: interruptions (with EC2's deadline) and rebalance recommendations
        (kind ``REBALANCE``, deadline ``inf``: EC2 does not take the instance). The agent acts
        on a rebalance (option ``rebalance: stop`` SIGTERMs the trial, which checkpoints and
        exits); the orchestrator needs the notice to tell that exit from a crash."""
        out = list(self.notices[self.reported :])
        self.reported = len(self.notices)
        return out

    def sync(self, s3: Any, poll_s: float, now: float, force: bool = False) -> None:
        """Relay a stop request and changed live settings, then read the agent's status and
        new events."""
        if not force and time.monotonic() - self.last_sync < poll_s:
            return
        self.last_sync = time.monotonic()
        if self.stop_file is not None and not self.stop_sent and self.stop_file.exists():
            s3.put_object(Bucket=self.bucket, Key=self.key(f"stop-{self.attempt}"), Body=b"")
            self.stop_sent = True
        self._relay_control(s3)
        status, self.status_etag = self._get(s3, f"agent-{self.attempt}.json", self.status_etag)
        if status is not None:
            self._read_status(status, now)
        events, self.events_etag = self._get(s3, f"events-{self.attempt}.jsonl", self.events_etag)
        if events is not None and len(events) > self.events_pos:
            new, self.events_pos = events[self.events_pos :], len(events)
            for line in new.splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(rec, dict):
                    self.buffer.append(rec)

    def _relay_control(self, s3: Any) -> None:
        """Upload the local control file when its content differs from the last upload (the
        orchestrator replaces it atomically, so a read sees a whole file)."""
        if self.control_file is None:
            return
        try:
            data = self.control_file.read_bytes()
        except OSError:  # not written: nothing to relay
            return
        if data == self.control_sent:
            return
        name = f"control-{self.attempt}.json"
        try:
            s3.put_object(
                Bucket=self.bucket, Key=self.key(name), Body=data, ContentType="application/json"
            )
        except Exception as e:
            if not aws.is_sdk_error(e):
                raise
            raise aws.provider_error(e, f"writing {name} of {self.instance_id} to S3") from None
        self.control_sent = data

    def _read_status(self, raw: bytes, now: float) -> None:
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError:
            return
        if not isinstance(doc, dict):
            return
        for n in doc.get("notices", [])[len(self.notices) :]:
            interruption = n.get("kind") == "interruption"
            kind = NoticeKind.INTERRUPTION if interruption else NoticeKind.REBALANCE
            received = float(n.get("received_at") or now)
            deadline = n.get("deadline")
            when = float(deadline) if deadline is not None else float("inf")  # rebalance: none
            self.notices.append(Notice(self.instance_id, kind, received, when))
        if doc.get("state") == "exited" and doc.get("exit_code") is not None:
            self.exit_code = int(doc["exit_code"])

    def _get(self, s3: Any, name: str, etag: str) -> tuple[bytes | None, str]:
        args = {"Bucket": self.bucket, "Key": self.key(name)}
        if etag:
            args["IfNoneMatch"] = etag
        try:
            resp = s3.get_object(**args)
        except Exception as e:
            if aws.error_code(e) in _UNCHANGED_OR_MISSING:
                return None, etag
            if not aws.is_sdk_error(e):
                raise
            raise aws.provider_error(e, f"reading {name} of {self.instance_id} from S3") from None
        return resp["Body"].read(), str(resp.get("ETag", ""))
