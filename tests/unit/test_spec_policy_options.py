"""A spec's ``policy_options``: keyword options of the chosen policy's constructor (asha's
``min_steps`` and ``eta``, ...), checked when the spec is loaded and again against the policy a
``tune --policy OTHER`` picks, each refusal one line naming the field; a job stored with them
reads them back as they were written."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotwise import jobs
from spotwise.errors import SpecError
from spotwise.planner.policies.asha import Asha
from spotwise.planner.policies.ours import Spotwise
from spotwise.planner.policies.spottune import SpotTune
from spotwise.planner.policy import USER_OPTIONS, make_policy, policy_names, user_options
from spotwise.spec import load_stored_spec, parse_spec

VALID: dict[str, Any] = {
    "name": "digits-mlp",
    "command": ["python", "train.py"],
    "metric": {"name": "val_accuracy"},
    "steps": 30,
    "search_space": {"lr": {"type": "real", "low": 0.001, "high": 0.3, "log": True}},
    "providers": [{"name": "local", "replay": {"speedup": 600}}],
}


def spec(**changes: Any) -> dict[str, Any]:
    return {**copy.deepcopy(VALID), **changes}


def error(data: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(data, "job.yaml")
    message = str(info.value)
    assert "\n" not in message
    return message


def test_no_options_by_default() -> None:
    assert parse_spec(spec()).policy_options == {}


def test_asha_options_reach_the_policy_built_from_the_spec() -> None:
    s = parse_spec(spec(policy="asha", policy_options={"min_steps": 3, "eta": 2}))
    assert s.policy_options == {"min_steps": 3, "eta": 2}
    policy = make_policy(s.policy, s.policy_options)
    assert isinstance(policy, Asha)
    assert (policy.min_steps, policy.eta) == (3, 2)


def test_the_other_early_stopping_policies_take_theirs() -> None:
    spottune = make_policy("spottune", {"theta": 0.5, "keep_top": 2})
    assert isinstance(spottune, SpotTune) and (spottune.theta, spottune.keep_top) == (0.5, 2)
    ours = make_policy("spotwise", {"epsilon": 0.2, "check_at": [0.5, 0.25]})
    assert isinstance(ours, Spotwise)
    assert ours.epsilon == 0.2 and ours.check_at == (0.25, 0.5)  # a YAML list, as a tuple


def test_an_unknown_option_names_the_field_the_policy_and_the_valid_ones() -> None:
    message = error(spec(policy="asha", policy_options={"min_step": 3}))
    assert message == (
        "job.yaml: spec field 'policy_options': asha has no option 'min_step' "
        "(did you mean 'min_steps'?); valid: eta, min_steps"
    )


def test_the_predictor_is_no_option() -> None:
    message = error(spec(policy="spottune", policy_options={"predictor": "power-law"}))
    assert message.endswith("spottune has no option 'predictor'; valid: theta, keep_top")


def test_a_policy_without_options_says_so() -> None:
    message = error(spec(policy="spot-greedy", policy_options={"min_steps": 3}))
    assert message == (
        "job.yaml: spec field 'policy_options': spot-greedy takes no options, got min_steps"
    )


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"min_steps": 0}, "asha: min_steps must be >= 1, got min_steps=0"),
        ({"eta": 1}, "asha: η must be >= 2, got eta=1"),
        ({"min_steps": "3"}, 'asha: min_steps must be an integer, got "3"'),
        ({"min_steps": 2.0}, "asha: min_steps must be an integer, got 2.0"),
        ({"min_steps": True}, "asha: min_steps must be an integer, got true"),
        ({"min_steps": None}, "asha: min_steps must be an integer, got null"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_field(options: dict[str, Any], said: str) -> None:
    message = error(spec(policy="asha", policy_options=options))
    assert message == f"job.yaml: spec field 'policy_options': {said}"


@pytest.mark.parametrize(
    ("policy", "options", "said"),
    [
        ("spottune", {"theta": 1.5}, "spottune: θ must be in (0, 1), got theta=1.5"),
        ("spottune", {"theta": float("nan")}, "spottune: theta must be a finite number, got .nan"),
        ("spotwise", {"check_at": "0.5"}, 'check_at must be a list of finite numbers, got "0.5"'),
        ("spotwise", {"check_at": [0.5, 2]}, "check_at fractions must lie in (0, 1)"),
    ],
)
def test_the_other_policies_bad_values(policy: str, options: dict[str, Any], said: str) -> None:
    assert said in error(spec(policy=policy, policy_options=options))


def test_options_of_an_unknown_policy_name_the_policy_field() -> None:
    assert "job.yaml: spec field 'policy': unknown policy 'ashaa' (did you mean 'asha'?)" in error(
        spec(policy="ashaa", policy_options={"min_steps": 3})
    )


def test_a_stored_job_reads_its_options_back_and_rebuilds_the_same_policy() -> None:
    accepted = parse_spec(spec(policy="asha", policy_options={"min_steps": 3}))
    stored = load_stored_spec(accepted.model_dump_json())
    assert stored.policy_options == {"min_steps": 3}
    policy = make_policy(stored.policy, stored.policy_options)
    assert isinstance(policy, Asha) and policy.min_steps == 3
    # a job stored before the field existed reads back with none
    assert load_stored_spec(parse_spec(spec()).model_dump_json()).policy_options == {}


def test_exposed_options_are_keyword_values_of_the_constructors() -> None:
    """The table names real constructor keywords with a default, of plain value types (no
    predictor objects); a policy it does not name takes none."""
    for name in policy_names():
        hints = user_options(name)
        assert list(hints) == list(USER_OPTIONS.get(name, ()))
        assert all(h in (int, float, tuple[float, ...]) for h in hints.values()), (name, hints)
    assert set(USER_OPTIONS) <= set(policy_names())


# ---- tune --policy OTHER -----------------------------------------------------------------


def _write(tmp_path: Path, **changes: Any) -> Path:
    (tmp_path / "train.py").touch()  # a local job's script is looked for when the spec loads
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec(**changes), sort_keys=False))
    return path


def test_tune_policy_other_that_takes_none_of_the_options_is_refused_and_writes_nothing(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path, policy="asha", policy_options={"min_steps": 3})
    db = tmp_path / "spotwise.db"
    with pytest.raises(SpecError) as info:
        jobs.tune(path, db=f"sqlite:///{db}", policy="spot-greedy", run_root=tmp_path / "runs")
    assert info.value.message == (
        f"{path}: spec field 'policy_options': spot-greedy (from --policy) takes no options, "
        "got min_steps"
    )
    assert info.value.hint == (
        "the spec's policy_options are for asha: drop --policy spot-greedy, or change "
        "policy_options for spot-greedy"
    )
    assert not db.exists() and not (tmp_path / "runs").exists()


def test_tune_policy_other_with_other_options_names_the_valid_ones(tmp_path: Path) -> None:
    path = _write(tmp_path, policy="asha", policy_options={"min_steps": 3})
    with pytest.raises(SpecError) as info:
        jobs.tune(path, db=f"sqlite:///{tmp_path / 'x.db'}", policy="spottune")
    assert info.value.message.endswith(
        "spottune (from --policy) has no option 'min_steps'; valid: theta, keep_top"
    )


def test_tune_policy_unknown_still_lists_the_policies(tmp_path: Path) -> None:
    path = _write(tmp_path, policy="asha", policy_options={"min_steps": 3})
    with pytest.raises(SpecError, match=r"^--policy: unknown policy 'ash' .*valid: "):
        jobs.tune(path, db=f"sqlite:///{tmp_path / 'x.db'}", policy="ash")
