"""The job spec: a valid spec gets its defaults; every invalid one is a one-line SpecError that
names the field at fault."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotwise.errors import SpecError
from spotwise.spec import BUILTIN_TRACE, IntParam, JobSpec, RealParam, load_spec, parse_spec

VALID: dict[str, Any] = {
    "name": "digits-mlp",
    "command": ["python", "train.py"],
    "metric": {"name": "val_accuracy"},
    "steps": 30,
    "search_space": {
        "lr": {"type": "real", "low": 0.001, "high": 0.3, "log": True},
        "hidden": {"type": "int", "low": 16, "high": 128},
        "activation": {"type": "categorical", "choices": ["relu", "tanh"]},
    },
    "providers": [{"name": "local", "replay": {"speedup": 600}}],
}


def spec_with(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(VALID)
    for key, value in changes.items():
        if value is _DROP:
            data.pop(key)
        else:
            data[key] = value
    return data


_DROP = object()


def spec_error(data: Any) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    message = str(info.value)
    assert "\n" not in message, f"SpecError must be one line, got {message!r}"
    return message


def test_valid_spec_gets_its_defaults() -> None:
    spec = parse_spec(copy.deepcopy(VALID))
    assert isinstance(spec, JobSpec)
    assert spec.metric.direction == "maximize"
    assert (spec.trials, spec.parallel, spec.policy) == (8, 1, "spot-greedy")
    assert (spec.checkpoint.location, spec.checkpoint.every) == ("checkpoints", 5)
    assert (spec.search.optimizer, spec.search.initial_points, spec.search.seed) == ("gp", 4, 0)
    assert spec.budget.max_cost_usd is None and spec.budget.deadline_hours is None
    assert spec.env == {} and spec.workdir == ""
    lr, hidden = spec.search_space["lr"], spec.search_space["hidden"]
    assert isinstance(lr, RealParam) and lr.log and (lr.low, lr.high) == (0.001, 0.3)
    assert isinstance(hidden, IntParam) and not hidden.log
    (provider,) = spec.providers
    assert provider.markets == ["spot", "on-demand"]
    assert provider.regions == [] and provider.zones == []
    assert provider.replay is not None
    assert provider.replay.trace == BUILTIN_TRACE
    assert provider.replay.speedup == 600.0
    assert (provider.replay.notice_floor_s, provider.replay.billing) == (1.0, "aws")


def test_load_spec_reads_yaml_and_resolves_base_dir(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(VALID))
    (tmp_path / "train.py").touch()  # a local job's script is looked for when the spec loads
    spec = load_spec(path)
    assert spec.name == "digits-mlp" and spec.steps == 30
    assert spec.base_dir(path) == tmp_path
    sub = parse_spec(spec_with(workdir="sub"))
    assert sub.base_dir(path) == tmp_path / "sub"


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"bogus": 1}, "'bogus'", "unknown field"),
        ({"steps": "ten"}, "'steps'", "integer"),
        ({"steps": 0}, "'steps'", "greater than or equal"),
        ({"search_space": {}}, "'search_space'", "at least one"),
        ({"command": _DROP}, "'command'", "required"),
        ({"command": []}, "'command'", "at least one"),
        ({"command": "python train.py"}, "'command'", "list"),
        ({"metric": {"name": "acc", "direction": "up"}}, "'metric.direction'", "maximize"),
        (
            {"search_space": {"lr": {"type": "real", "low": 0.0, "high": 1.0, "log": True}}},
            "'search_space.lr'",
            "log scale needs low > 0",
        ),
        (
            {"search_space": {"n": {"type": "int", "low": -4, "high": 8, "log": True}}},
            "'search_space.n'",
            "log scale needs low > 0",
        ),
        (
            {"search_space": {"lr": {"type": "real", "low": 0.5, "high": 0.5}}},
            "'search_space.lr'",
            "low must be < high",
        ),
        (
            {"search_space": {"n": {"type": "int", "low": 9, "high": 3}}},
            "'search_space.n'",
            "low must be < high",
        ),
        (
            {"search_space": {"a": {"type": "categorical", "choices": ["x", "x"]}}},
            "'search_space.a.choices'",
            "unique",
        ),
        (
            {"search_space": {"x": {"type": "weird", "low": 0, "high": 1}}},
            "'search_space.x'",
            "real",
        ),
        (
            {"providers": [{"name": "local", "replay": {"speedup": 0}}]},
            "'providers.0.replay.speedup'",
            "greater than 0",
        ),
        (
            {"providers": [{"name": "aws", "replay": {}}]},
            "'providers.0'",
            "replay is only valid for the local provider",
        ),
        (
            {"checkpoint": {"location": "gcs://bucket/ckpt"}},
            "'checkpoint.location'",
            "unknown scheme 'gcs://' (did you mean 'gs'?); valid: az://, file://, gs://, s3://",
        ),
        (
            {"checkpoint": {"location": "gs://Bad_Bucket/ckpt"}},
            "'checkpoint.location'",
            "invalid bucket name 'Bad_Bucket'",
        ),
        (
            {"checkpoint": {"location": "s3://x/ckpt"}},
            "'checkpoint.location'",
            "has an invalid S3 bucket name 'x': use 3-63 lowercase letters",
        ),
        (
            {"checkpoint": {"location": "az://acct/x"}},
            "'checkpoint.location'",
            "names container 'x'",
        ),
        (
            {"checkpoint": {"location": "az://acct"}},
            "'checkpoint.location'",
            "expected az://<account>/<container>[/<prefix>]",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_invalid_field_is_named_on_one_line(
    changes: dict[str, Any], field: str, words: str
) -> None:
    message = spec_error(spec_with(**changes))
    assert field in message
    assert words in message


@pytest.mark.parametrize(
    "where",
    [
        "ckpt",
        "/abs/ckpt",
        "file:///abs/ckpt",
        "s3://my-bucket/p",
        "gs://my-bucket",
        "az://acct1/box/p",
    ],
)
def test_valid_checkpoint_locations_are_kept_as_written(where: str) -> None:
    spec = JobSpec.model_validate(spec_with(checkpoint={"location": where}))
    assert spec.checkpoint.location == where


def test_checking_a_location_loads_no_cloud_sdk() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from spotwise.checkpoint.registry import check_location\n"
        "for u in ('s3://my-bucket/p', 'gs://my-bucket/p', 'az://acct1/box/p'): check_location(u)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('boto3', 'azure') "
        "or m.startswith('google.cloud')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_duplicate_providers_are_refused() -> None:
    message = spec_error(spec_with(providers=[{"name": "local"}, {"name": "local"}]))
    assert "providers" in message
    assert "each provider may appear once" in message


def test_local_cannot_be_mixed_with_a_cloud_but_several_clouds_can() -> None:
    message = spec_error(spec_with(providers=[{"name": "local"}, {"name": "aws"}]))
    assert "providers: local" in message and "cannot be mixed with a cloud" in message
    assert "name only clouds, or run the local job on its own" in message
    spec = parse_spec(spec_with(providers=[{"name": "gcp"}, {"name": "azure"}, {"name": "aws"}]))
    assert [p.name for p in spec.providers] == ["gcp", "azure", "aws"]


def test_several_errors_report_the_first_and_count_the_rest() -> None:
    message = spec_error(spec_with(steps="x", trials=0))
    assert "'steps'" in message and "(+1 more)" in message


def test_a_non_mapping_is_refused() -> None:
    message = spec_error(["not", "a", "mapping"])
    assert "mapping" in message and "list" in message


def test_invalid_yaml_is_one_line_with_its_line_number(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("name: x\ncommand: [python, train.py\nsteps: 3\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert "\n" not in message
    assert "not valid YAML" in message and str(path) in message
    assert " line " in message


def test_missing_spec_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not found"):
        load_spec(tmp_path / "nope.yaml")


def test_a_folder_as_the_spec_names_the_yaml_files_inside(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path)
    assert str(info.value) == (
        f"spec path {tmp_path} is a folder with no .yaml file in it; pass the path to a job "
        "YAML, e.g. examples/digits/job.yaml"
    )
    for name in ("b.yml", "a.yaml", "job.yaml", "c.yaml", "train.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "sub.yaml").mkdir()  # a folder named like a YAML is not listed
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path)
    assert str(info.value) == (
        f"spec path {tmp_path} is a folder; pass the job YAML inside it: {tmp_path}/job.yaml, "
        f"{tmp_path}/a.yaml, {tmp_path}/b.yml (and 1 more)"
    )


def test_bad_field_in_a_yaml_file_names_the_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec_with(parallel=0)))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(path)) and "'parallel'" in message


def test_an_unknown_key_with_a_newline_still_gives_one_line() -> None:
    message = spec_error({**copy.deepcopy(VALID), "bo\ngus": 1})
    assert "'bo\\ngus'" in message and "unknown field" in message


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        (
            "command",
            "python train.py",
            "spec field 'command': Input should be a valid list; write it as a list of "
            "arguments, e.g. command: [python, train.py]",
        ),
        (
            "metric",
            "val_accuracy",
            "spec field 'metric': Input should be a valid dictionary; write it as a mapping, "
            "e.g. metric: {name: val_accuracy, direction: maximize}",
        ),
        (
            "providers",
            {"name": "local"},
            "spec field 'providers': Input should be a valid list; write it as a list, "
            "e.g. providers: [{name: local}]",
        ),
    ],
)
def test_a_field_in_a_shorter_form_gets_the_form_it_takes(
    field: str, value: Any, expected: str
) -> None:
    """pydantic said `…or instance of Metric`: a class name users never wrote."""
    assert spec_error(spec_with(**{field: value})) == f"spec: {expected}"


def test_an_empty_spec_file_says_it_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("# nothing yet\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value) == (
        f"{path}: the spec is empty; see examples/digits/job.yaml for one"
    )  # was "got NoneType"


def test_an_unknown_field_points_to_the_reference_that_lists_the_fields() -> None:
    message = spec_error({**copy.deepcopy(VALID), "colour": 4})
    assert message == (
        "spec: spec field 'colour': unknown field; the fields here are budget, checkpoint, "
        "command, env, metric, name, parallel, policy, policy_options, providers, search, "
        "search_space, steps, trials, workdir: rename it to the one meant, or remove it"
    )
    # a misspelt field: "remove it" would drop what it sets (tests/unit/test_spec_review.py)
    message = spec_error({**copy.deepcopy(VALID), "trails": 4})
    assert message == "spec: spec field 'trails': unknown field (did you mean 'trials'?)"


def test_did_you_mean_prefers_two_swapped_letters() -> None:
    """'us-esat-1' scores the same against us-east-1 and us-west-1; the first in the list won."""
    from spotwise.errors import did_you_mean

    regions = ["us-west-1", "us-east-1", "us-east-2"]
    assert did_you_mean("us-esat-1", regions) == " (did you mean 'us-east-1'?)"
    assert did_you_mean("us-wset-1", regions) == " (did you mean 'us-west-1'?)"
    assert did_you_mean("eu-north-9", regions) == ""
