"""A provisioner says whether it has read its agent's status (``agent_heard``), so that the
controller's "no word" limit (:mod:`spotwise.planner.no_word`) ends only a life whose agent
never started, not one whose trial takes long to its first report (a data download)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spotwise.providers.multi import MultiProvisioner
from spotwise.providers.trialfiles import Tracks


def test_a_track_is_heard_once_its_agent_status_is_read(tmp_path: Path) -> None:
    tracks = Tracks(poll_s=0.0)
    assert tracks.add("i-1", tmp_path.as_uri(), "0") is not None
    assert tracks.progress("i-1") == [] and not tracks.heard("i-1")  # nothing written yet
    (tmp_path / "agent-0.json").write_text(json.dumps({"state": "starting", "notices": []}))
    assert tracks.progress("i-1") == [] and tracks.heard("i-1")  # no trial record: still heard
    assert not tracks.heard("i-unknown")


class _Member:
    def __init__(self, name: str, heard: set[str]) -> None:
        self.name, self.heard = name, heard

    def agent_heard(self, instance_id: str) -> bool:
        return instance_id in self.heard

    def describe(self, tags: Any = None) -> list[Any]:
        return []


def test_several_clouds_ask_the_member_that_owns_the_instance() -> None:
    multi = MultiProvisioner({"gcp": _Member("gcp", {"i-1"}), "azure": _Member("azure", set())})  # type: ignore[dict-item]
    multi._own("i-1", "gcp")
    multi._own("i-2", "azure")
    assert multi.agent_heard("i-1") and not multi.agent_heard("i-2")
    assert not multi.agent_heard("i-3")  # no member owns it
