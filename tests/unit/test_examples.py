"""Every example job spec loads, and a cloud one names a checkpoint location its instances can
reach and the options its provider needs — so a user's first `spotwise tune` of an example
fails, if at all, on their own cloud setup, not on the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from spotwise.planner.backend import provider_config
from spotwise.providers.channel import artifacts_uri, check_reachable
from spotwise.spec import load_spec

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").rglob("job*.yaml"))


def test_the_examples_are_found() -> None:
    names = {p.name for p in EXAMPLES}
    assert {"job.yaml", "job-aws.yaml", "job-gcp.yaml", "job-azure.yaml"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_loads_and_its_trials_can_report_back(path: Path) -> None:
    spec = load_spec(path)
    (p,) = spec.providers
    if p.name == "local":
        return
    check_reachable(p.name, p.options, spec.checkpoint.location)
    where = artifacts_uri(p.name, p.options, f"{spec.checkpoint.location}/j-1/t-1", "j-1", "t-1")
    assert where == f"{spec.checkpoint.location}/j-1/t-1"  # events beside the checkpoints
    if p.name == "gcp":
        from spotwise.providers import gcp

        settings = gcp.settings_from(provider_config(p))
        assert settings.project and settings.opt("image")
    elif p.name == "azure":
        from spotwise.providers import azure

        settings = azure.settings_from(provider_config(p))
        for key in ("resource_group", "subnet_id", "image", "ssh_public_key"):
            assert settings.opt(key), key
    else:
        assert p.options["image"] and p.options["instance_profile"]
