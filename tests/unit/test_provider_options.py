"""Provider options are declared per provider (``spotwise.providers.registry.PROVIDER_OPTIONS``)
and a spec is checked against them when it is loaded: an unknown name gets "did you mean", a
bad value the allowed form, both as one line naming ``providers.<i>.options.<name>`` (exit 2,
nothing written). The declaration must cover every option the providers' code reads."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from shared_helpers import tune_cli_refused, write_job_yaml

from spotwise.errors import SpecError
from spotwise.providers.registry import PROVIDER_NAMES, PROVIDER_OPTIONS, OptionSpec
from spotwise.spec import JobSpec, parse_spec

REPO = Path(__file__).resolve().parents[2]
PROVIDERS_DIR = REPO / "spotwise" / "providers"
CLOUDS = ("aws", "gcp", "azure")

BASE: dict[str, Any] = {
    "name": "opts",
    "command": ["python", "train.py"],
    "metric": {"name": "score"},
    "steps": 2,
    "search_space": {"lr": {"type": "real", "low": 0.01, "high": 0.1}},
    "checkpoint": {"location": "s3://bucket/ckpt"},
}


def spec_on(provider: str, **options: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data["providers"] = [{"name": provider, "options": options}]
    return data


def error(data: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(data, "job.yaml")
    message = str(info.value)
    assert "\n" not in message
    return message


# ---- the reviewer's three -----------------------------------------------------------------------
def test_a_misspelt_option_is_refused_with_did_you_mean() -> None:
    assert error(spec_on("aws", image="ami-1", instance_profle="spotwise-trial")) == (
        "job.yaml: spec field 'providers.0.options.instance_profle': unknown aws option "
        "(did you mean 'instance_profile'?); valid: agent_poll_s, artifacts, image, "
        "instance_profile, key_name, poll_s, pricing, profile, python, rebalance, "
        "security_groups, setup, subnet, workdir"
    )


def test_a_value_outside_the_choices_is_refused_with_the_choices() -> None:
    assert error(spec_on("aws", rebalance="maybe")) == (
        "job.yaml: spec field 'providers.0.options.rebalance': 'maybe' is not one of stop, ignore"
    )


def test_a_number_that_is_not_one_is_a_spec_error_not_an_internal_error() -> None:
    assert error(spec_on("aws", poll_s="abc")) == (
        "job.yaml: spec field 'providers.0.options.poll_s': 'abc' is not a number >= 0"
    )


# ---- forms --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("provider", "name", "value", "form"),
    [
        ("aws", "agent_poll_s", "0", "a number > 0"),
        ("aws", "poll_s", "nan", "a number >= 0"),
        ("aws", "pricing", "Offline", "one of auto, api, offline"),
        ("gcp", "external_ip", "yes", "true or false"),
        ("gcp", "disk_size_gb", "50.5", "a whole number >= 1"),
        ("gcp", "termination_action", "KEEP", "one of DELETE, STOP"),
        ("gcp", "operation_timeout_s", "", "a number > 0"),
        ("azure", "max_price", "0", "-1 or a number > 0"),
        ("azure", "eviction_policy", "delete", "one of Delete, Deallocate"),
        ("azure", "prices_source", "cache", "one of live, catalog"),
        ("azure", "polling_interval", "-1", "a number >= 0"),
    ],
)
def test_bad_values_name_the_allowed_form(provider: str, name: str, value: str, form: str) -> None:
    assert error(spec_on(provider, **{name: value})) == (
        f"job.yaml: spec field 'providers.0.options.{name}': {value!r} is not {form}"
    )


@pytest.mark.parametrize(
    ("provider", "options"),
    [
        ("aws", {"poll_s": "0", "agent_poll_s": "0.3", "rebalance": "ignore", "pricing": "api"}),
        ("gcp", {"termination_action": "stop", "external_ip": "FALSE", "disk_size_gb": "100"}),
        ("azure", {"max_price": "-1", "polling_interval": "0", "eviction_policy": "Deallocate"}),
        ("azure", {"max_price": "0.25", "public_ip": "true", "offline": "True"}),
    ],
)
def test_values_the_providers_read_are_accepted(provider: str, options: dict[str, str]) -> None:
    assert dict(parse_spec(spec_on(provider, **options)).providers[0].options) == options


def test_yaml_numbers_and_booleans_are_taken_as_the_strings_providers_read() -> None:
    """``poll_s: 0.5`` and ``offline: true`` unquoted, as YAML gives them (before: "Input
    should be a valid string")."""
    data = yaml.safe_load(
        "providers: [{name: gcp, options: {poll_s: 0.5, offline: true, disk_size_gb: 80}}]"
    )
    spec = parse_spec({**copy.deepcopy(BASE), **data})
    assert dict(spec.providers[0].options) == {
        "poll_s": "0.5",
        "offline": "true",
        "disk_size_gb": "80",
    }


def test_the_local_provider_takes_no_options() -> None:
    data = spec_on("local", image="ami-1")
    data["checkpoint"] = {"location": "ckpts"}
    assert error(data) == (
        "job.yaml: spec field 'providers.0.options.image': the local provider takes no "
        "options; remove it"
    )


def test_the_second_provider_is_named_by_its_index() -> None:
    data = copy.deepcopy(BASE)
    data["providers"] = [
        {"name": "gcp", "options": {"project": "p"}},
        {"name": "azure", "options": {"subscripton_id": "s"}},
    ]
    message = error(data)
    assert message.startswith(
        "job.yaml: spec field 'providers.1.options.subscripton_id': unknown azure option "
        "(did you mean 'subscription_id'?); valid: "
    )


def test_an_option_name_with_a_newline_still_gives_one_line() -> None:
    message = error(spec_on("aws", **{"ima\nge": "ami-1"}))
    assert message.startswith("job.yaml: spec field 'providers.0.options.ima\\nge': unknown aws")


def test_a_job_stored_with_an_unknown_option_still_loads_for_cancel() -> None:
    """`cancel` reads a stored spec back with ``JobSpec.model_validate_json``: a job recorded
    by an older spotwise with a typo in its options must still be cancellable."""
    data = spec_on("aws", image="ami-1", instance_profle="x")
    stored = JobSpec.model_validate(data).model_dump_json()
    assert JobSpec.model_validate_json(stored).providers[0].options["instance_profle"] == "x"


def test_tune_exits_2_with_one_line_and_writes_nothing(tmp_path: Path) -> None:
    spec = spec_on("aws", image="ami-1", instance_profle="spotwise-trial")
    path = write_job_yaml(tmp_path, spec)
    lines = tune_cli_refused(tmp_path, path)  # exit 2, `error:` and at most a `hint:` line
    assert lines[0].startswith(
        f"error: {path}: spec field 'providers.0.options.instance_profle': unknown aws option "
        "(did you mean 'instance_profile'?)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]


# ---- the declaration matches the code -----------------------------------------------------------
# every way the providers' code reads an option by name
_READS = (
    re.compile(r"""\b(?:opt|require|seconds)\(\s*["'](\w+)["']"""),
    re.compile(r"""\b(?:opts|options)(?:\.get\(|\[)\s*["'](\w+)["']"""),
)


def _reads(text: str) -> set[str]:
    return {m.group(1) for r in _READS for m in r.finditer(text)}


SHARED = ("channel.py",)  # read for every cloud (the trial channel)


def _provider_of(module: Path) -> str:
    for cloud in CLOUDS:
        if module.name.startswith(cloud):
            return cloud
    return "local"


def test_every_option_the_providers_read_is_declared_and_every_declared_one_is_read() -> None:
    read: dict[str, set[str]] = {p: set() for p in PROVIDER_NAMES}
    shared: set[str] = set()
    for module in sorted(PROVIDERS_DIR.glob("*.py")):
        if module.name == "registry.py":
            continue
        names = _reads(module.read_text())
        if module.name in SHARED:
            shared |= names
        else:
            read[_provider_of(module)] |= names
    assert read["aws"] >= {"image", "instance_profile", "poll_s", "rebalance", "pricing"}
    assert shared >= {"artifacts", "workdir", "agent_poll_s"}
    for provider in PROVIDER_NAMES:
        declared = set(PROVIDER_OPTIONS[provider])
        assert read[provider] - declared == set(), f"{provider}: read but not declared"
        unread = declared - read[provider] - shared
        assert unread == set(), f"{provider}: declared but never read"
    # an option the shared modules read is one some cloud declares (e.g. AWS's profile)
    assert shared - set().union(*(PROVIDER_OPTIONS[c] for c in CLOUDS)) == set()


def test_option_specs_describe_themselves() -> None:
    assert OptionSpec("number", minimum=0, exclusive=True, also=(-1,)).form() == (
        "-1 or a number > 0"
    )
    with pytest.raises(ValueError, match="choices go with kind 'choice' only"):
        OptionSpec("text", choices=("a",))


def test_the_shipped_cloud_examples_use_only_declared_options() -> None:
    for path in sorted((REPO / "examples").rglob("job-*.yaml")):
        data = yaml.safe_load(path.read_text())
        for p in data["providers"]:
            assert set(p.get("options", {})) <= set(PROVIDER_OPTIONS[p["name"]]), path
