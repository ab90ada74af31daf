"""Spec messages (review-ao F1, F3).

F1: a misspelt required field (`provider:` for `providers:`) was reported as "spec field
'providers': Field required; add it (+1 more)": the useful error, the unknown field and its
did-you-mean, was the hidden "+1 more", and a user told to "add" a section that is there
(misspelt) may add a second one. It is now the one line, naming the field it means.

F3: `checkpoint.location: s3:/bucket/x` (one slash; also gs:/, az:/, file:/ and no slash at
all) was taken as a local folder named `s3:` and a local job ran, checkpointing there. It is
refused with the URI meant; a path with a colon further on is still a folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from shared_helpers import LOCAL_SPEC as SPEC
from shared_helpers import load_refused as refused
from shared_helpers import tune_refused, write_job_yaml
from shared_helpers import write_local_spec as write

from spotwise.checkpoint.registry import check_location
from spotwise.errors import SpecError
from spotwise.spec import load_spec, parse_spec


def parse_refused(data: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    return info.value.message.removeprefix("spec: ")


def renamed(data: dict[str, Any], **names: str) -> dict[str, Any]:
    """``data`` with each key ``k`` of ``names`` renamed to ``names[k]``, in place."""
    return {names.get(k, k): v for k, v in data.items()}


# ---- F1: a misspelt required field is told as the typo, not as missing ----------------------
@pytest.mark.parametrize(
    ("field", "typo"),
    [
        ("providers", "provider"),
        ("metric", "metrics"),
        ("steps", "step"),
        ("command", "cmd"),
        ("search_space", "search_spcae"),
        ("name", "nmae"),
    ],
)
def test_a_misspelt_required_field_names_the_field_meant(
    tmp_path: Path, field: str, typo: str
) -> None:
    """Before: "spec field 'providers': Field required; add it (+1 more)"."""
    spec = renamed(SPEC, **{field: typo})
    path = write_job_yaml(tmp_path, spec)
    want = (
        f"spec field '{typo}': unknown field (did you mean '{field}'?); "
        f"rename it: '{field}' is required"
    )
    assert parse_refused(spec) == want
    assert refused(path) == want  # as `tune` reads the file


@pytest.mark.parametrize(
    ("change", "where", "field"),
    [
        ({"metric": {"nmae": "acc"}}, "metric.nmae", "name"),
        ({"providers": [{"nme": "local"}]}, "providers.0.nme", "name"),
        (
            {"search_space": {"lr": {"type": "real", "lo": 0.001, "high": 0.1}}},
            "search_space.lr.lo",  # a parameter's type tag is not part of the path shown
            "low",
        ),
        ({"budget": {"max_cost_usd": 1}, "checkpoint": {"evry": 2}}, "checkpoint.evry", None),
    ],
)
def test_nested_typos_of_required_fields_too(
    change: dict[str, Any], where: str, field: str | None
) -> None:
    """The same at any level; a typo of a field with a default (checkpoint.every) was shown
    first before and still is, with no "is required"."""
    message = parse_refused({**SPEC, **change})
    if field is None:
        assert message == f"spec field '{where}': unknown field (did you mean 'every'?)"
    else:
        assert message == (
            f"spec field '{where}': unknown field (did you mean '{field}'?); "
            f"rename it: '{field}' is required"
        )


def test_more_counts_the_other_errors_only() -> None:
    """Two typos: the first required field in the model's order is told, the other typo is
    one more (its missing field is the same mistake, not counted twice)."""
    spec = renamed(SPEC, steps="step", providers="provider")
    assert parse_refused(spec) == (
        "spec field 'step': unknown field (did you mean 'steps'?); "
        "rename it: 'steps' is required (+2 more)"
    )
    with_extra = {**renamed(SPEC, providers="provider"), "colour": "red"}
    assert parse_refused(with_extra).endswith("rename it: 'providers' is required (+1 more)")


def test_an_unrelated_unknown_field_leaves_the_missing_one_first() -> None:
    """`colour:` is no typo of `providers`: the missing field is what to fix (unchanged)."""
    spec = {k: v for k, v in SPEC.items() if k != "providers"} | {"colour": "red"}
    assert parse_refused(spec) == "spec field 'providers': Field required; add it (+1 more)"


# ---- F3: a cloud URI without its '//' is refused, naming the URI meant -----------------------
@pytest.mark.parametrize(
    ("location", "meant"),
    [
        ("s3:/bucket/x", "s3://bucket/x"),
        ("gs:/bucket/x", "gs://bucket/x"),
        ("az:/account/container/x", "az://account/container/x"),
        ("file:/tmp/ckpt", "file:///tmp/ckpt"),
        ("s3:bucket/x", "s3://bucket/x"),
        ("S3:/bucket/x", "s3://bucket/x"),
        ("gs:", "gs://BUCKET/PREFIX"),
        ("file:ckpt", "ckpt"),  # a file URI names an absolute folder: a folder was meant
    ],
)
def test_a_scheme_without_slashes_is_refused(location: str, meant: str) -> None:
    """Before: accepted, a local folder named e.g. 's3:' beside the spec."""
    scheme = location.split(":")[0]
    with pytest.raises(SpecError) as info:
        check_location(location)
    assert info.value.message == (
        f"checkpoint location {location!r} has no '//' after '{scheme}:' (did you mean {meant}?)"
    )
    assert info.value.hint == f"for a local folder of that name, write ./{location}"
    message = parse_refused({**SPEC, "checkpoint": {"location": location}})
    assert message.startswith(f"spec field 'checkpoint.location': checkpoint location {location!r}")
    assert f"(did you mean {meant}?)" in message


def test_tune_refuses_it_before_any_folder_is_made(tmp_path: Path) -> None:
    """The review's repro: `tune` on a local job ran and made ./s3:/bucket/x/."""
    path = write(tmp_path / "job", checkpoint={"location": "s3:/bucket/x", "every": 1})
    message = tune_refused(tmp_path, path)
    assert "(did you mean s3://bucket/x?)" in message
    assert not (tmp_path / "job" / "s3:").exists()


@pytest.mark.parametrize(
    "location",
    ["./runs/a:b", "runs/s3:/x", "./s3:/bucket/x", "ckpt:1", "C:/ckpt", "checkpoints", "/tmp/a:b"],
)
def test_a_folder_with_a_colon_elsewhere_is_still_a_folder(tmp_path: Path, location: str) -> None:
    """A colon after the first part, a name that is no registered scheme, or the ./ escape
    the refusal suggests: a folder, as before."""
    check_location(location)
    path = write(tmp_path, checkpoint={"location": location, "every": 1})
    assert load_spec(path).checkpoint.location == location


@pytest.mark.parametrize(
    "location",
    [
        "s3:AKIAIOSFODNN7EXAMPLE:s3cr3t@bucket/ck",
        "gs:bucket/ck?access_token=s3cr3t",
        "az:a/c/p#s3cr3t",
    ],
)
def test_the_refusal_never_echoes_what_may_be_a_credential(location: str) -> None:
    """The did-you-mean would show the URI: one carrying a key is refused as the URI meant
    would be (before: accepted as a local folder)."""
    message = parse_refused({**SPEC, "checkpoint": {"location": location}})
    assert "s3cr3t" not in message and "AKIA" not in message
    assert "(not shown: it may be a credential)" in message
