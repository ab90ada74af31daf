"""Spec messages (review-ao F6, M1-M4).

F6: a spec that is not UTF-8 text (UTF-16 from PowerShell's `>`, Latin-1 with one accented
letter) exited 70, "internal error ... this is a bug in spotwise"; the file is read as UTF-8
whatever the locale (a BOM dropped) and other bytes are one line, exit 2.
M1: a value none of a field's choices (`providers[].name: lcoal`, `metric.direction:
maximise`) got pydantic's "Input should be ..." with no did-you-mean.
M2: `name: tiny job` showed a regex; it is said in words, with a name that would do.
M3: `typ: real` said "has no type" without naming the key written.
M4: `policy_options: {check_at: []}` said "fractions must lie in (0, 1), got check_at=()".
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import LOCAL_SPEC, tune_refused
from shared_helpers import load_refused as refused
from shared_helpers import write_local_spec as write

from spotwise.errors import SpecError
from spotwise.spec import load_spec, parse_spec


def parse_refused(**changes: Any) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec({**copy.deepcopy(LOCAL_SPEC), **changes}, "t.yaml")
    assert "\n" not in info.value.message
    return info.value.message.removeprefix("t.yaml: ")


# ---- F6: a spec that is not UTF-8 ------------------------------------------------------------
def _encoded(tmp_path: Path, data: bytes) -> Path:
    path = write(tmp_path)  # beside train.py: valid once decoded
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("encoding", "said"),
    [
        ("utf-16", "byte 0xff at 0: UTF-16?"),  # PowerShell's `>`, Notepad's "Unicode": a BOM
        ("utf-16-le", "byte 0x00 at 1: UTF-16?"),  # no BOM: valid UTF-8, but NULs
        ("utf-16-be", "byte 0x00 at 0: UTF-16?"),
    ],
)
def test_a_utf16_spec_is_refused_with_exit_2(tmp_path: Path, encoding: str, said: str) -> None:
    """Before: exit 70, "internal error: UnicodeDecodeError: 'utf-8' codec can't decode ..."
    (the BOM-less ones: a YAML error on a NUL)."""
    text = write(tmp_path).read_text()
    path = _encoded(tmp_path, text.encode(encoding))
    assert tune_refused(tmp_path, path) == (
        f"{path}: the spec is not UTF-8 text ({said}); save it as UTF-8"
    )


def test_a_latin1_spec_names_the_byte_and_its_line(tmp_path: Path) -> None:
    text = write(tmp_path).read_text()
    path = _encoded(tmp_path, ("name: t1\n# réglage\n" + text).encode("latin-1"))
    assert refused(path) == "the spec is not UTF-8 text (byte 0xe9 at 12, line 2); save it as UTF-8"
    # after a BOM, the byte's offset is still the file's
    path.write_bytes(b"\xef\xbb\xbf# r\xe9\n" + text.encode())
    assert refused(path) == "the spec is not UTF-8 text (byte 0xe9 at 6, line 1); save it as UTF-8"


def test_utf8_with_or_without_a_bom_is_read_whatever_the_locale(tmp_path: Path) -> None:
    text = write(tmp_path).read_text().replace("name: t1", "name: t1  # réglage ✓")
    path = _encoded(tmp_path, b"\xef\xbb\xbf" + text.encode())
    assert load_spec(path).name == "t1"
    path.write_bytes(text.replace("command:", "env: {NOTE: é}\ncommand:").encode())
    assert load_spec(path).env == {"NOTE": "é"}


# ---- M1: a value none of the field's choices: did you mean ----------------------------------
@pytest.mark.parametrize(
    ("changes", "want"),
    [
        (
            {"providers": [{"name": "lcoal"}]},
            "spec field 'providers.0.name': unknown value \"lcoal\" (did you mean 'local'?); "
            "write one of 'local', 'aws', 'gcp' or 'azure'",
        ),
        (
            {"metric": {"name": "acc", "direction": "maximise"}},
            "spec field 'metric.direction': unknown value \"maximise\" (did you mean "
            "'maximize'?); write one of 'maximize' or 'minimize'",
        ),
        (
            {"search": {"optimizer": "bayes"}},  # nothing close: the choices only
            "spec field 'search.optimizer': unknown value \"bayes\"; "
            "write one of 'gp', 'rf', 'et' or 'random'",
        ),
    ],
)
def test_a_value_none_of_the_choices_names_the_one_meant(
    changes: dict[str, Any], want: str
) -> None:
    """Before: "spec field 'providers.0.name': Input should be 'local', 'aws', 'gcp' or
    'azure'"."""
    assert parse_refused(**changes) == want


# ---- M2: the name's pattern in words ---------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "fix"),
    [("tiny job", "; e.g. name: tiny-job"), ("-v2!", "; e.g. name: v2"), ("étude", "")],
)
def test_a_name_with_other_characters_is_told_in_words(name: str, fix: str) -> None:
    """Before: "String should match pattern '^[A-Za-z0-9][A-Za-z0-9_.-]*$'"."""
    said = parse_refused(name=name)
    assert said.startswith("spec field 'name': must be letters, digits, . _ -, a letter or ")
    assert said.endswith(f"digit first, got {said.split('got ')[1].split(';')[0]}{fix}")
    assert "[" not in said and "^" not in said
    if fix:
        assert parse_spec({**LOCAL_SPEC, "name": fix.split(": ")[1]}, "t.yaml")


# ---- M3: the key written for `type` ---------------------------------------------------------
@pytest.mark.parametrize("typo", ["typ", "Type", "tpye"])
def test_a_misspelt_type_key_is_named(typo: str) -> None:
    """Before: "spec field 'search_space.lr': has no type; add type: real, int or
    categorical"."""
    space = {"lr": {typo: "real", "low": 0.003, "high": 0.3}}
    assert parse_refused(search_space=space) == (
        f"spec field 'search_space.lr.{typo}': unknown field (did you mean 'type'?); "
        "rename it: 'type' (real, int or categorical) is required"
    )
    # no key close to `type`: as before
    assert parse_refused(search_space={"lr": {"low": 0.1, "high": 1.0}}) == (
        "spec field 'search_space.lr': has no type; add type: real, int or categorical"
    )


# ---- M4: an empty check_at ------------------------------------------------------------------
def test_an_empty_check_at_is_told_as_empty() -> None:
    """Before: "check_at fractions must lie in (0, 1), got check_at=()"."""
    said = parse_refused(policy="spotwise", policy_options={"check_at": []})
    assert said == (
        "spec field 'policy_options': spotwise: check_at is an empty list; give at least one "
        "fraction in (0, 1), e.g. check_at: [0.2, 0.5], or leave it out for the default"
    )
    said = parse_refused(policy="spotwise", policy_options={"check_at": [0.5, 1.5]})
    assert said == (
        "spec field 'policy_options': spotwise: check_at fractions must lie in (0, 1), got 1.5"
    )
