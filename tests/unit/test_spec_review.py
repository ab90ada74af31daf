"""Spec defects a review found: each was accepted (or refused without the fix) and then cost
the user a wrong job, a crash after money was spent, or a hunt for the cause."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from unit.test_spec import VALID

from spotwise.errors import SpecError
from spotwise.spec import load_spec, load_stored_spec, parse_spec

SPACE = VALID["search_space"]


def write(tmp_path: Path, data: Any, name: str = "job.yaml") -> Path:
    (tmp_path / "train.py").touch()  # a local job's script is looked for when the spec loads
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def refused(data: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    message = str(info.value)
    assert "\n" not in message
    return message.removeprefix("spec: ")


def with_(path: str, value: Any) -> dict[str, Any]:
    """VALID with ``value`` at the dotted ``path`` (list indexes as numbers)."""
    data = copy.deepcopy(VALID)
    *parents, last = path.split(".")
    cur: Any = data
    for key in parents:
        cur = cur[int(key)] if isinstance(cur, list) else cur.setdefault(key, {})
    cur[int(last) if isinstance(cur, list) else last] = value
    return data


# ---- 1. a key given twice -----------------------------------------------------------------
DUPLICATE_BUDGET = """\
name: dup
command: [python, train.py]
metric: {name: val_loss, direction: minimize}
steps: 4
budget: {max_cost_usd: 5}
search_space:
  lr: {type: real, low: 0.003, high: 0.3, log: true}
providers: [{name: local}]
budget: {deadline_hours: 2}
"""


def test_a_key_given_twice_is_refused_with_its_path_and_lines(tmp_path: Path) -> None:
    path = write(tmp_path, DUPLICATE_BUDGET)
    with pytest.raises(SpecError) as info:
        load_spec(path)  # was accepted: the second budget dropped the $5 cap
    assert str(info.value) == (
        f"{path}: line 9: key 'budget' is given twice (first at line 5); keep one of them "
        "(YAML would silently keep only the last)"
    )


def test_a_nested_key_given_twice_names_its_path(tmp_path: Path) -> None:
    text = DUPLICATE_BUDGET.replace("budget: {deadline_hours: 2}\n", "").replace(
        "providers: [{name: local}]", "providers: [{name: local, markets: [spot], markets: []}]"
    )
    text = text.replace("  lr: {", "  lr: {type: real, low: 0.5, high: 0.9}\n  lr: {")
    with pytest.raises(SpecError, match=r"line 8: key 'search_space\.lr' is given twice "):
        load_spec(write(tmp_path, text))
    text = text.replace("  lr: {type: real, low: 0.5, high: 0.9}\n", "")
    with pytest.raises(SpecError, match=r"line 8: key 'providers\.0\.markets' is given twice "):
        load_spec(write(tmp_path, text))


def test_yaml_merge_keys_and_aliases_are_not_duplicates(tmp_path: Path) -> None:
    text = DUPLICATE_BUDGET.replace("budget: {deadline_hours: 2}\n", "").replace(
        "search_space:\n  lr: {type: real, low: 0.003, high: 0.3, log: true}\n",
        "search_space:\n  lr: &real {type: real, low: 0.003, high: 0.3}\n"
        "  lr2: {<<: *real, log: true}\n  lr3: *real\n",
    )
    spec = load_spec(write(tmp_path, text))
    assert sorted(spec.search_space) == ["lr", "lr2", "lr3"]


# ---- 2. a misspelt nested field --------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "value", "meant"),
    [
        ("budget.max_cost", 50, "max_cost_usd"),
        ("metric.directon", "minimize", "direction"),
        ("search.optimiser", "rf", "optimizer"),
        ("checkpoint.evry", 5, "every"),
        ("providers.0.regoins", ["us-east-1"], "regions"),
        ("providers.0.replay.sped", 3, "speedup"),
        ("search_space.lr.lg", True, "log"),
        ("trails", 4, "trials"),
    ],
)
def test_a_misspelt_field_gets_the_field_it_meant(path: str, value: Any, meant: str) -> None:
    """Was "remove it" for a nested field: following it silently dropped the budget."""
    shown = path.replace(".real.", ".")
    assert refused(with_(path, value)) == (
        f"spec field '{shown}': unknown field (did you mean '{meant}'?)"
    )


def test_a_field_like_no_other_names_the_fields_it_may_mean() -> None:
    """Was "remove it": for a misspelling no suggestion reaches (`budget.max_cost_dollars`),
    following it ran the job with no cap (review-ag F1)."""
    fields = "the fields here are deadline_hours, max_cost_usd, start_timeout_minutes"
    assert refused(with_("budget.colour", "red")) == (
        f"spec field 'budget.colour': unknown field; {fields}: rename it to the one meant, or "
        "remove it"
    )
    assert refused(with_("budget.cap_dollars", 5)) == (
        f"spec field 'budget.cap_dollars': unknown field; {fields}: rename it to the one "
        "meant, or remove it"
    )
    assert refused(with_("budget.max_cost_dollars", 5)) == (
        "spec field 'budget.max_cost_dollars': unknown field (did you mean 'max_cost_usd'?)"
    )


# ---- 3. the search seed ----------------------------------------------------------------------
@pytest.mark.parametrize("seed", [-1, 2**32, 2**40])
def test_a_seed_outside_numpy_range_is_refused(seed: int) -> None:
    assert refused(with_("search", {"seed": seed})) == (
        f"spec field 'search.seed': must be between 0 and 4294967295 (2**32 - 1), got {seed}"
    )  # was accepted, then an internal error from skopt


def test_the_largest_seed_is_accepted() -> None:
    assert parse_spec(with_("search", {"seed": 2**32 - 1})).search.seed == 2**32 - 1


# ---- 4. categorical choices Python takes for one --------------------------------------------
@pytest.mark.parametrize(
    ("choices", "first", "second"),
    [([1, 1.0, True], "1", "1.0"), ([1, True], "1", "true"), ([0, False], "0", "false")],
)
def test_choices_that_are_equal_values_are_refused(
    choices: list[Any], first: str, second: str
) -> None:
    message = refused(with_("search_space.a", {"type": "categorical", "choices": choices}))
    assert message == (
        f"spec field 'search_space.a.choices': choices must be unique, but {first} and "
        f"{second} are the same value; quote them to keep them apart, e.g. '{first}' and "
        f"'{second}'"
    )  # was accepted, then the GP crashed after trials had run


def test_quoted_or_distinct_choices_are_accepted() -> None:
    data = with_("search_space.a", {"type": "categorical", "choices": ["1", 1, "true", 2.5]})
    assert parse_spec(data).search_space["a"].choices == ["1", 1, "true", 2.5]  # type: ignore[union-attr]


def test_a_choice_that_is_no_scalar_is_named() -> None:
    message = refused(with_("search_space.a", {"type": "categorical", "choices": [None, "x"]}))
    assert message == (
        "spec field 'search_space.a.choices': choice 0 must be a string, a finite number or "
        "true/false, got null"
    )  # was "spec field 'search_space.a.choices.0.str': Input should be a valid string (+3 more)"


def test_a_stored_job_with_equal_choices_or_a_wild_seed_still_reads_back() -> None:
    """`cancel` reads the spec of a job recorded before these checks: it must still load."""
    data = with_("search_space.a", {"type": "categorical", "choices": [1, 1.0]})
    data["search"] = {"seed": -1}
    data["search_space"]["n"] = {"type": "int", "low": 0, "high": 10**30}
    spec = load_stored_spec(json.dumps(data))
    assert spec.search.seed == -1


# ---- 5. int parameters beyond int64 ------------------------------------------------------------
@pytest.mark.parametrize(
    ("high", "shown"), [(10**30, "1e+30"), (1e30, "1e+30"), (2**63, "9.22337e+18")]
)
def test_an_int_bound_beyond_int64_is_refused(high: Any, shown: str) -> None:
    assert refused(with_("search_space.n", {"type": "int", "low": 0, "high": high})) == (
        "spec field 'search_space.n.high': an int parameter's bounds must be between "
        f"-9223372036854775808 and 9223372036854775807, got {shown}"
    )


def test_int64_bounds_and_whole_floats_are_accepted() -> None:
    spec = parse_spec(with_("search_space.n", {"type": "int", "low": -(2**63), "high": 2**63 - 1}))
    assert spec.search_space["n"].high == 2**63 - 1  # type: ignore[union-attr]
    message = refused(with_("search_space.n", {"type": "int", "low": 1.5, "high": 8}))
    assert "'search_space.n.low'" in message and "fractional part" in message


# ---- 6. infinite and NaN floats --------------------------------------------------------------
REAL = "search_space: {x: {type: real, "
LOCAL = "providers: [{name: local, replay: {"


@pytest.mark.parametrize(
    ("yaml_line", "field", "shown"),
    [
        (REAL + "low: -.inf, high: 0.5}}", "search_space.x.low", "-.inf"),
        (REAL + "low: 0, high: .inf}}", "search_space.x.high", ".inf"),
        (LOCAL + "speedup: .inf}}]", "providers.0.replay.speedup", ".inf"),
        (LOCAL + "notice_floor_s: .nan}}]", "providers.0.replay.notice_floor_s", ".nan"),
        ("budget: {max_cost_usd: .inf}", "budget.max_cost_usd", ".inf"),
        ("budget: {deadline_hours: .inf}", "budget.deadline_hours", ".inf"),
    ],
)
def test_an_infinite_or_nan_number_is_refused(
    tmp_path: Path, yaml_line: str, field: str, shown: str
) -> None:
    """Was accepted: trials got NaN/Infinity params, an infinite speed-up crashed the job
    and left it running. An infinite budget is written by leaving the budget out."""
    fix = "; leave it out for no limit" if field.startswith("budget.") else ""
    assert load_error(tmp_path, yaml_line) == (
        f"spec field '{field}': must be a finite number, got {shown}{fix}"
    )


def test_an_infinite_choice_is_refused(tmp_path: Path) -> None:
    line = "search_space: {a: {type: categorical, choices: [.inf, 1]}}"
    assert load_error(tmp_path, line) == (
        "spec field 'search_space.a.choices': choice 0 must be a string, a finite number or "
        "true/false, got .inf"
    )


def load_error(tmp_path: Path, yaml_line: str) -> str:
    """load_spec's message for VALID with the top-level field of ``yaml_line`` replaced."""
    key = yaml_line.split(":")[0]
    base = {k: v for k, v in VALID.items() if k != key}
    path = write(tmp_path, yaml.safe_dump(base) + yaml_line + "\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    return str(info.value).removeprefix(f"{path}: ")


# ---- 7. a region or zone the replayed trace does not have -------------------------------------
def test_a_replay_region_or_zone_not_in_the_trace_names_the_field(tmp_path: Path) -> None:
    path = write(tmp_path, with_("providers.0.regions", ["us-east-1", "us-east-9"]))
    with pytest.raises(SpecError) as info:
        load_spec(path)  # was NotFoundError (exit 3) at tune time, naming no field
    assert str(info.value) == (
        f"{path}: spec field 'providers.0.regions.1': region 'us-east-9' is not in the "
        "replayed trace (did you mean 'us-east-2'?); valid: us-east-1, us-east-2, us-west-2"
    )
    path = write(tmp_path, with_("providers.0.zones", ["us-west-2bb"]))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value).startswith(
        f"{path}: spec field 'providers.0.zones.0': zone 'us-west-2bb' is not in the replayed "
        "trace (did you mean 'us-west-2b'?); valid: us-east-1a, "
    )
    assert load_spec(write(tmp_path, with_("providers.0.zones", ["us-west-2b"]))).providers


def test_tune_with_a_bad_replay_zone_exits_2_and_records_nothing(tmp_path: Path) -> None:
    path = write(tmp_path, with_("providers.0.zones", ["us-east-9z"]))
    db = tmp_path / "db.sqlite"
    env = {**os.environ, "SPOTWISE_HOME": str(tmp_path / "home"), "SPOTWISE_DB": f"sqlite:///{db}"}
    run = subprocess.run(
        [sys.executable, "-m", "spotwise.cli.app", "tune", str(path)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: {path}: spec field 'providers.0.zones.0': zone 'us-east-9z' is not in"
    ), run.stderr
    assert not db.exists()  # refused before the store was opened
    assert not (tmp_path / "home" / "runs").exists()


# ---- 8. a workdir that does not exist ----------------------------------------------------------
def test_a_local_job_with_a_missing_workdir_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, with_("workdir", "src"))
    with pytest.raises(SpecError) as info:
        load_spec(path)  # was accepted; every trial then failed "cannot start '…/python3'"
    assert str(info.value) == (
        f"{path}: spec field 'workdir': {tmp_path / 'src'} does not exist; create it, or fix "
        "the path (a relative one is from the spec's folder)"
    )
    (tmp_path / "src").write_text("a file")
    with pytest.raises(SpecError, match=r"'workdir': .*src is not a folder; create it"):
        load_spec(path)
    (tmp_path / "src").unlink()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").touch()  # the script is looked for in the workdir
    assert load_spec(path).base_dir(path) == tmp_path / "src"


def test_a_cloud_job_workdir_is_on_the_instance_and_not_checked_here(tmp_path: Path) -> None:
    data = with_("workdir", "/opt/not-here")
    data["providers"] = [{"name": "gcp", "regions": ["us-central1"]}]
    assert load_spec(write(tmp_path, data)).workdir == "/opt/not-here"


# ---- 9. an environment value YAML reads as a number --------------------------------------------
@pytest.mark.parametrize(("value", "shown"), [(1, "1"), (0.5, "0.5"), (True, "true")])
def test_an_env_value_that_is_not_a_string_says_quote_it(value: Any, shown: str) -> None:
    assert refused(with_("env", {"OMP_NUM_THREADS": value})) == (
        f"spec field 'env.OMP_NUM_THREADS': must be a string, got {shown}; quote it, e.g. "
        f'OMP_NUM_THREADS: "{shown}"'
    )


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("trials", True, "true"),
        ("trials", "8", "'8'"),
        ("steps", 40.0, "40.0"),
        ("parallel", 2.5, "2.5"),
    ],
)
def test_counts_are_whole_numbers_not_booleans_or_strings(
    field: str, value: object, shown: str
) -> None:
    """`trials: true` ran one trial and `trials: "8"` eight: YAML typing slips, taken silently."""
    from spotwise.spec import parse_spec

    root = Path(__file__).resolve().parents[2]
    data = yaml.safe_load((root / "examples" / "digits" / "job.yaml").read_text())
    data[field] = value
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    assert str(info.value).startswith(f"spec: spec field '{field}': must be an integer, got ")


def test_replay_seed_is_gone_but_jobs_recorded_with_it_still_read_back() -> None:
    """`providers[].replay.seed` was accepted and read by nothing (a replay is deterministic):
    a setting that only existed in the spec."""
    data = copy.deepcopy(VALID)
    data["providers"] = [{"name": "local", "replay": {"speedup": 600, "seed": 3}}]
    with pytest.raises(SpecError, match=r"'providers\.0\.replay\.seed': unknown field"):
        parse_spec(data)
    del data["providers"][0]["replay"]["seed"]
    old = json.loads(parse_spec(data).model_dump_json())
    old["providers"][0]["replay"]["seed"] = 0  # as every job recorded before held it
    assert load_stored_spec(json.dumps(old)).providers[0].replay is not None
