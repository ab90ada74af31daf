"""review-ac F2 (session 17): a local job's misspelt ``instance_types`` was refused only when
the market opened, with "spec field 'providers.0': no offer of the replayed market matches its
regions/zones/instance_types/markets": no "did you mean", no list entry, no spec path, where a
misspelt region got all three. ``replay.start`` past the trace end and an unknown
``replay.trace`` had no spec path either (the trace's also dropped ``providers.0.``). Each is
now refused when the spec loads, in one line naming the full field, after the spec's path."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from unit.test_spec import VALID

from spotwise.errors import SpecError
from spotwise.planner.backend import open_backend
from spotwise.spec import load_spec, parse_spec

ZONES = "us-east-1a, us-east-1c, us-east-1d, us-east-1f, us-east-2a, us-east-2b, us-west-2a, "
ZONES += "us-west-2b, us-west-2c"


def local(**fields: Any) -> dict[str, Any]:
    """VALID with its local provider's ``fields`` set."""
    data = copy.deepcopy(VALID)
    data["providers"][0].update(fields)
    return data


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    (tmp_path / "train.py").touch()  # a local job's script is looked for when the spec loads
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def load_error(tmp_path: Path, **fields: Any) -> tuple[Path, str]:
    path = write(tmp_path, local(**fields))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert "\n" not in str(info.value)
    return path, str(info.value)


def test_a_misspelt_instance_type_names_the_entry_the_file_and_the_closest_name(
    tmp_path: Path,
) -> None:
    path, message = load_error(tmp_path, instance_types=["p3.2xlarge", "p3.2xlarg"])
    assert message == (
        f"{path}: spec field 'providers.0.instance_types.1': instance type 'p3.2xlarg' is not "
        "in the replayed trace (did you mean 'p3.2xlarge'?); valid: p3.2xlarge"
    )


def test_a_start_past_the_trace_end_carries_the_spec_path(tmp_path: Path) -> None:
    path, message = load_error(tmp_path, replay={"start": 100000})
    assert message == (
        f"{path}: spec field 'providers.0.replay.start': 100000.0 h is past the trace end "
        "(1093.8 h); set it below 1093.8 (hours into the trace)"
    )
    # the last hour inside the trace (1093.83 h long) is still a start
    assert load_spec(write(tmp_path, local(replay={"start": 1093.8}))).providers


def test_an_unknown_trace_names_the_full_field_and_the_spec_path(tmp_path: Path) -> None:
    path, message = load_error(tmp_path, replay={"trace": "builtin:skynomad-v100-2032"})
    assert message == (
        f"{path}: spec field 'providers.0.replay.trace': unknown builtin trace "
        "'skynomad-v100-2032' (did you mean 'skynomad-v100-2023'?); "
        "valid: builtin:skynomad-v100-2023"
    )
    # a missing file is read for the filters it is checked against (here a start); with none,
    # the market refuses it when it opens (test_orchestrator's test_a_missing_trace_writes_nothing)
    path, message = load_error(tmp_path, replay={"trace": "traces/none.csv", "start": 10})
    assert message == (
        f"{path}: spec field 'providers.0.replay.trace': {tmp_path / 'traces/none.csv'} does "
        "not exist; use builtin:skynomad-v100-2023 or a trace path"
    )


def test_regions_and_zones_that_share_no_zone_are_refused_when_the_spec_loads(
    tmp_path: Path,
) -> None:
    path, message = load_error(tmp_path, regions=["us-east-1"], zones=["us-west-2b", "us-east-2a"])
    assert message == (
        f"{path}: spec field 'providers.0.zones': none of us-west-2b, us-east-2a is in its "
        "regions (us-east-1), so no offer matches; name zones of those regions, or drop one of "
        "the two"
    )


def test_tune_prints_the_one_line_and_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from spotwise.cli import app

    path = write(tmp_path, local(instance_types=["p3.2xlarg"]))
    db = tmp_path / "spotwise.db"
    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(sys, "argv", ["spotwise", "tune", str(path), "--db", f"sqlite:///{db}"])
    with pytest.raises(SystemExit) as exit_info:
        app.main()
    assert exit_info.value.code == 2
    assert [x for x in capsys.readouterr().err.splitlines() if x.strip()] == [
        f"error: {path}: spec field 'providers.0.instance_types.0': instance type 'p3.2xlarg' "
        "is not in the replayed trace (did you mean 'p3.2xlarge'?); valid: p3.2xlarge"
    ]
    assert not db.exists()  # refused before the store was opened


@pytest.mark.parametrize(
    ("fields", "line"),
    [
        (
            {"instance_types": ["p3.2xlarg"]},
            "spec field 'providers.0.instance_types.0': instance type 'p3.2xlarg' is not in the "
            "replayed trace (did you mean 'p3.2xlarge'?); valid: p3.2xlarge",
        ),
        (
            {"replay": {"trace": "builtin:nope"}},
            "spec field 'providers.0.replay.trace': unknown builtin trace 'nope'; "
            "valid: builtin:skynomad-v100-2023",
        ),
        (
            {"replay": {"start": 2000}},
            "spec field 'providers.0.replay.start': 2000.0 h is past the trace end (1093.8 h); "
            "set it below 1093.8 (hours into the trace)",
        ),
    ],
)
def test_a_spec_opened_without_a_file_gets_the_same_field(
    tmp_path: Path, fields: dict[str, Any], line: str
) -> None:
    """A spec that did not come through load_spec (a resumed job's stored one) is checked when
    its market opens: the same line, without a file to name."""
    spec = parse_spec(local(**fields))
    with pytest.raises(SpecError) as info:
        open_backend(spec, tmp_path, tmp_path / "runs")
    assert str(info.value) == line


def test_valid_filters_open_the_same_market(tmp_path: Path) -> None:
    """The checks refuse only what has no offer: a valid spec's offers are unchanged."""
    path = write(
        tmp_path,
        local(instance_types=["p3.2xlarge"], regions=["us-west-2"], replay={"start": 10}),
    )
    backend = open_backend(load_spec(path), tmp_path, tmp_path / "runs")
    try:
        offers = backend.list_offers(backend.now())
        west = ("us-west-2a", "us-west-2b", "us-west-2c")
        assert sorted({(o.zone, o.market.value) for o in offers}) == [
            (z, m) for z in west for m in ("on-demand", "spot")
        ]
        assert {o.instance_type for o in offers} == {"p3.2xlarge"}
    finally:
        backend.close()
    everything = open_backend(load_spec(write(tmp_path, local())), tmp_path, tmp_path / "runs")
    try:
        assert sorted({o.zone for o in everything.list_offers(everything.now())}) == ZONES.split(
            ", "
        )
    finally:
        everything.close()
