"""Off Linux the orchestrator's start token is `ps`'s lstart, which prints in the caller's time
zone and locale (review-aa F1): an orchestrator started from a shell in one time zone and a
`cancel` from another read different tokens, so a live orchestrator was taken for dead and its
job's instances released under it. `ps` now runs in UTC and the C locale for every caller."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from spotwise.providers import local_records


def test_ps_reads_the_start_in_utc_and_the_c_locale(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, str]] = []

    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        seen.append(kw["env"])
        return subprocess.CompletedProcess(argv, 0, "S    Tue Nov 24 15:00:00 2026\n", "")

    monkeypatch.setattr(local_records, "LINUX", False)
    monkeypatch.setattr(local_records.subprocess, "run", run)
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    assert local_records.process_start(1234) == "Tue Nov 24 15:00:00 2026"
    assert (seen[0]["TZ"], seen[0]["LC_ALL"]) == ("UTC", "C")
