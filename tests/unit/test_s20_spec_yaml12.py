"""A job spec is read with YAML 1.2's core schema (review-ak F3, F4), and what YAML 1.1 read
otherwise is refused where it would now mean something else; the messages of M2-M4.

Before: `deadline_hours: 1:30` was a 90-hour deadline (base 60), `max_cost_usd: on` a $1 cap,
`choices: [SE, NO, DK]` gave the trial false for Norway, `[0, 1e-4]` gave it the string "1e-4",
`steps: 010` ran 8 steps.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from spotwise.errors import SpecError
from spotwise.spec import JobSpec, load_spec, load_stored_spec

BASE = """\
name: t1
command: [python, -c, "pass"]
metric: {name: acc, direction: maximize}
steps: 4
trials: 2
search_space:
  lr: {type: real, low: 0.003, high: 0.3, log: true}
providers:
  - name: local
"""
LR = "  lr: {type: real, low: 0.003, high: 0.3, log: true}\n"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def with_budget(budget: str) -> str:
    return BASE.replace("providers:", f"budget:\n  {budget}\nproviders:")


def with_param(param: str) -> str:
    return BASE.replace(LR, f"  {param}\n")


def refused(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = info.value.message
    assert message.startswith(f"{path}: ")
    return message.removeprefix(f"{path}: ")


def loaded(tmp_path: Path, text: str) -> JobSpec:
    return load_spec(write(tmp_path, text))


# ---- F3: base 60 is no number, and no bool is a budget -----------------------------------------
def test_a_deadline_written_as_h_mm_is_refused_not_read_as_90_hours(tmp_path: Path) -> None:
    assert refused(tmp_path, with_budget("deadline_hours: 1:30")) == (
        "spec field 'budget.deadline_hours': '1:30' is not a number; write hours as a number, "
        "e.g. 1.5 for 1:30"
    )


def test_a_cost_cap_written_with_a_colon_is_refused_not_read_as_150(tmp_path: Path) -> None:
    assert refused(tmp_path, with_budget("max_cost_usd: 2:30")) == (
        "spec field 'budget.max_cost_usd': '2:30' is not a number; write dollars as a number, "
        "e.g. 10"
    )


@pytest.mark.parametrize("word", ["on", "yes", "y", "Off"])
def test_a_yaml11_boolean_word_is_no_cost_cap(tmp_path: Path, word: str) -> None:
    assert refused(tmp_path, with_budget(f"max_cost_usd: {word}")) == (
        f"spec field 'budget.max_cost_usd': '{word}' is not a number; write dollars as a "
        "number, e.g. 10"
    )


@pytest.mark.parametrize(("field", "what", "example"), [
    ("max_cost_usd", "dollars", "10"), ("deadline_hours", "hours", "1.5"),
])  # fmt: skip
def test_a_boolean_budget_is_refused(tmp_path: Path, field: str, what: str, example: str) -> None:
    """`max_cost_usd: true` was a $1.00 cap, `deadline_hours: true` one hour."""
    assert refused(tmp_path, with_budget(f"{field}: true")) == (
        f"spec field 'budget.{field}': must be a number, got true; write {what} as a number, "
        f"e.g. {example} (or leave it out for no limit)"
    )


def test_a_dollar_sign_names_the_number_meant(tmp_path: Path) -> None:
    assert refused(tmp_path, with_budget("max_cost_usd: $12.50")) == (
        "spec field 'budget.max_cost_usd': '$12.50' is not a number; write dollars as a "
        "number, e.g. 12.5"
    )


def test_budget_numbers_as_written_still_load(tmp_path: Path) -> None:
    spec = loaded(tmp_path, with_budget("{max_cost_usd: '10', deadline_hours: 1e1}").replace(
        "budget:\n  ", "budget: "))  # fmt: skip
    assert (spec.budget.max_cost_usd, spec.budget.deadline_hours) == (10.0, 10.0)


# ---- F4: the values a trial gets -----------------------------------------------------------------
def test_numbers_without_a_dot_are_numbers_in_choices(tmp_path: Path) -> None:
    spec = loaded(tmp_path, with_param("wd: {type: categorical, choices: [0, 1e-4, 1.0e-3]}"))
    choices = spec.search_space["wd"].choices  # type: ignore[union-attr]
    assert choices == [0, 0.0001, 0.001]
    assert [type(c) for c in choices] == [int, float, float]


def test_norway_in_choices_is_refused_until_quoted(tmp_path: Path) -> None:
    """YAML 1.1 read NO as false (the trial got false for Norway); YAML 1.2 reads "NO". A
    spec that loaded before must not silently mean something else: it is refused, saying
    both readings and both fixes."""
    text = with_param("country: {type: categorical, choices: [SE, NO, DK]}")
    assert refused(tmp_path, text) == (
        "spec field 'search_space.country.choices.1': NO is false in YAML 1.1 (PyYAML, older "
        'spotwise) but "NO" in YAML 1.2, which spotwise reads; quote it ("NO") if the text is '
        "meant, or write false"
    )
    spec = loaded(tmp_path, text.replace("NO,", '"NO",'))
    assert spec.search_space["country"].choices == ["SE", "NO", "DK"]  # type: ignore[union-attr]


def test_yes_no_choices_are_refused_and_true_false_are_booleans(tmp_path: Path) -> None:
    message = refused(tmp_path, with_param("opt: {type: categorical, choices: [yes, no]}"))
    assert message.startswith("spec field 'search_space.opt.choices.0': yes is true in YAML 1.1")
    assert message.endswith('quote it ("yes") if the text is meant, or write true')
    spec = loaded(tmp_path, with_param("opt: {type: categorical, choices: [true, False]}"))
    assert spec.search_space["opt"].choices == [True, False]  # type: ignore[union-attr]


def test_a_leading_zero_count_is_refused_as_ambiguous(tmp_path: Path) -> None:
    """`steps: 010` ran 8 steps (YAML 1.1 octal); YAML 1.2 reads 10: neither is taken."""
    assert refused(tmp_path, BASE.replace("steps: 4", "steps: 010")) == (
        "spec field 'steps': 010 is 8 in YAML 1.1 (PyYAML, older spotwise) but 10 in YAML 1.2, "
        "which spotwise reads; write 10, or 8 if that is meant"
    )
    assert loaded(tmp_path, BASE.replace("steps: 4", "steps: 0o10")).steps == 8


def test_a_base60_choice_is_refused(tmp_path: Path) -> None:
    message = refused(tmp_path, with_param("t: {type: categorical, choices: [1:30, 2:00]}"))
    assert message.startswith("spec field 'search_space.t.choices.0': 1:30 is 90 in YAML 1.1")
    assert message.endswith('quote it ("1:30") if the text is meant, or write 90')


def test_an_int_bound_in_exponent_form_is_taken(tmp_path: Path) -> None:
    """`high: 1e6` was the string "1e6" and refused without a fix."""
    spec = loaded(tmp_path, with_param("n: {type: int, low: 1, high: 1e6}"))
    assert spec.search_space["n"].high == 1_000_000  # type: ignore[union-attr]


def test_a_count_in_exponent_form_says_the_integer_to_write(tmp_path: Path) -> None:
    assert refused(tmp_path, BASE.replace("steps: 4", "steps: 1e3")) == (
        "spec field 'steps': must be an integer, got 1e3; write 1000"
    )


def test_env_words_are_text_and_the_fix_quotes_what_was_written(tmp_path: Path) -> None:
    spec = loaded(tmp_path, BASE + "env: {FLAG: on, DEBUG: yes}\n")
    assert spec.env == {"FLAG": "on", "DEBUG": "yes"}
    assert refused(tmp_path, BASE + "env: {FLAG: True}\n") == (
        "spec field 'env.FLAG': must be a string, got True; quote it, e.g. FLAG: \"True\""
    )
    assert refused(tmp_path, BASE + "env: {X: 1.50}\n") == (
        "spec field 'env.X': must be a string, got 1.50; quote it, e.g. X: \"1.50\""
    )


def test_a_command_argument_read_as_a_number_says_quote_it(tmp_path: Path) -> None:
    text = BASE.replace('command: [python, -c, "pass"]', "command: [python, -c, 1e-4]")
    assert refused(tmp_path, text) == (
        "spec field 'command.2': must be a string, got 1e-4; quote it, e.g. \"1e-4\""
    )


def test_what_both_yamls_read_alike_is_unchanged(tmp_path: Path) -> None:
    """`log: yes` is true either way (the model reads the word): not refused."""
    spec = loaded(tmp_path, with_param("lr: {type: real, low: 1_000, high: 2e3, log: yes}"))
    lr = spec.search_space["lr"]
    assert (lr.low, lr.high, lr.log) == (1000.0, 2000.0, True)  # type: ignore[union-attr]


@pytest.mark.parametrize(("text", "value"), [
    ("1:30", "1:30"), ("on", "on"), ("No", "No"), ("y", "y"), ("010", 10), ("0o17", 15),
    ("0x1F", 31), ("0b11", "0b11"), ("1e-4", 0.0001), ("1E3", 1000.0), ("1_000", 1000),
    ("+1", 1), ("-.5", -0.5), ("5.", 5.0), (".inf", math.inf), ("-.Inf", -math.inf),
    ("~", None), ("", None), ("NULL", None), ("TRUE", True), ("false", False),
    ("tRUE", "tRUE"), ("2024-01-01", "2024-01-01"), ("=", "="),
])  # fmt: skip
def test_plain_scalars_read_as_yaml12_core(tmp_path: Path, text: str, value: Any) -> None:
    from spotwise.spec_yaml import read_spec_yaml

    path = tmp_path / "x.yaml"
    path.write_text(f"v: {text}\n")
    got = read_spec_yaml(path)["v"]
    assert got == value and type(got) is type(value)


def test_nan_and_explicit_tags(tmp_path: Path) -> None:
    from spotwise.spec_yaml import read_spec_yaml

    path = tmp_path / "x.yaml"
    path.write_text("a: .NaN\nb: !!float 1\nc: !!str 010\nd: !!int 010\n")
    got = read_spec_yaml(path)
    assert math.isnan(got["a"]) and got["b"] == 1.0 and got["c"] == "010" and got["d"] == 10
    path.write_text("a: !!float 1:30\n")
    with pytest.raises(SpecError, match=r"line 1 is not valid YAML: cannot read '1:30' as a"):
        read_spec_yaml(path)


def test_pyyaml_itself_is_left_as_it_was() -> None:
    """The spec's loader is its own class: code reading other YAML with SafeLoader is not
    changed under it."""
    import yaml

    from spotwise.spec_yaml import _loader_class

    assert _loader_class() is not yaml.SafeLoader
    assert yaml.safe_load("a: 1:30") == {"a": 90}


def test_a_stored_spec_is_json_and_read_back_as_recorded() -> None:
    """A job's spec_json never goes through YAML: what it recorded is what it reads."""
    spec_json = json.dumps({
        "name": "t", "command": ["python", "t.py"], "metric": {"name": "m"}, "steps": 8,
        "search_space": {"lr": {"type": "real", "low": -1e308, "high": 1e308},
                         "c": {"type": "categorical", "choices": ["SE", False, "1e-4"]}},
        "providers": [{"name": "local"}], "budget": {"max_cost_usd": 90.0},
    })  # fmt: skip
    spec = load_stored_spec(spec_json)
    assert spec.steps == 8 and spec.budget.max_cost_usd == 90.0
    assert spec.search_space["c"].choices == ["SE", False, "1e-4"]  # type: ignore[union-attr]


# ---- M2: an empty section ------------------------------------------------------------------------
def test_an_empty_budget_or_checkpoint_section_is_the_same_as_none(tmp_path: Path) -> None:
    text = BASE.replace("providers:", "budget:\n  # max_cost_usd: 10\ncheckpoint:\nproviders:")
    spec = loaded(tmp_path, text)
    assert spec.budget.max_cost_usd is None and spec.checkpoint.location == "checkpoints"


def test_a_budget_that_is_no_mapping_shows_the_shape(tmp_path: Path) -> None:
    assert refused(tmp_path, BASE + "budget: 10\n") == (
        "spec field 'budget': Input should be a valid dictionary; write it as a mapping, e.g. "
        "budget: {max_cost_usd: 10, deadline_hours: 2}"
    )


# ---- M3, M4: the search space --------------------------------------------------------------------
def test_a_parameter_without_type_says_add_it(tmp_path: Path) -> None:
    assert refused(tmp_path, with_param("lr: {low: 0.1, high: 0.3}")) == (
        "spec field 'search_space.lr': has no type; add type: real, int or categorical"
    )


def test_an_unknown_parameter_type_lists_the_valid_ones(tmp_path: Path) -> None:
    assert refused(tmp_path, with_param("lr: {type: float, low: 0.1, high: 0.3}")) == (
        "spec field 'search_space.lr': unknown type 'float'; write type: real, int or "
        "categorical (real for a range of floats)"
    )


def test_a_real_range_whose_width_overflows_is_refused(tmp_path: Path) -> None:
    """Every point the optimizer asked was 1e+308, and the fourth `tell` raised inside skopt."""
    assert refused(tmp_path, with_param("lr: {type: real, low: -1e308, high: 1e308}")) == (
        "spec field 'search_space.lr': high - low must be a finite number, got low=-1e+308, "
        "high=1e+308 (their difference overflows); narrow the range"
    )
    assert loaded(tmp_path, with_param("lr: {type: real, low: -1e307, high: 1e307}"))
