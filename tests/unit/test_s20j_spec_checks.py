"""A local job's command is looked for as its trial's exec looks (review-al F3, F3b), a float
field of a spec takes no bool, and asha's rung check is callable for `tune --policy asha`
(helper E's notes, s20).

F3: a relative PATH entry in the spec's env (or spotwise's own) was resolved from the folder
`spotwise tune` runs in; the trial (os.execvpe, its cwd the job's folder) resolves it from the
job's folder. F3b: `[python, -u, trian.py]` went unchecked: python's own options before the
script were not skipped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import LOCAL_SPEC as SPEC
from shared_helpers import load_refused as refused
from shared_helpers import write_local_spec as write

from spotwise.errors import SpecError
from spotwise.spec import JobSpec, load_spec, load_stored_spec, parse_spec

SYSTEM_PATH = "/usr/bin:/bin"


def tool(folder: Path, name: str = "run.sh") -> Path:
    """An executable script ``name`` in ``folder`` that prints "ran"."""
    folder.mkdir(parents=True, exist_ok=True)
    f = folder / name
    f.write_text("#!/bin/sh\necho ran\n")
    f.chmod(0o755)
    return f


def exec_finds(program: str, cwd: Path, path: str) -> bool:
    """Whether os.execvpe (as local_exec runs a trial) finds ``program`` on ``path`` from
    ``cwd``: the trial's own lookup, run for real."""
    code = "import os, sys; os.execvpe(sys.argv[1], sys.argv[1:], {'PATH': sys.argv[2]})"
    run = subprocess.run(
        [sys.executable, "-c", code, program, path], cwd=cwd, capture_output=True, text=True
    )
    return run.stdout == "ran\n"


# ---- F3: a relative PATH entry is the job's folder's -----------------------------------------
@pytest.mark.parametrize("entry", ["tools", "./tools", "", "."])
def test_a_relative_path_entry_is_found_from_the_jobs_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str
) -> None:
    """Before: refused ("not found on PATH") when `tune` ran from another folder, though the
    trial finds it. An empty entry and '.' are the job's folder, as for the exec."""
    job = tmp_path / "job"
    tool(job / "tools" if "tools" in entry else job)
    search = f"{entry}:{SYSTEM_PATH}"
    path = write(job, command=["run.sh"], env={"PATH": search})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert load_spec(path).command == ["run.sh"]
    assert exec_finds("run.sh", job, search)  # what the trial does: found
    assert not exec_finds("run.sh", elsewhere, search)  # from tune's folder: not there


def test_a_program_only_in_tunes_folder_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: accepted (found from the folder `tune` ran in), then every trial failed to
    start: the trial looks in the job's folder."""
    job, elsewhere = tmp_path / "job", tmp_path / "elsewhere"
    tool(elsewhere / "tools")
    path = write(job, command=["run.sh"], env={"PATH": f"tools:{SYSTEM_PATH}"})
    monkeypatch.chdir(elsewhere)
    assert refused(path) == (
        "spec field 'command': the program 'run.sh' is not found on PATH; install it, fix the "
        "name, or give its path"
    )
    assert not exec_finds("run.sh", job, f"tools:{SYSTEM_PATH}")


def test_a_relative_entry_of_spotwises_own_path_is_the_jobs_folders_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no PATH in the spec the trial gets spotwise's own, relative entries and all."""
    job, elsewhere = tmp_path / "job", tmp_path / "elsewhere"
    tool(job / "bin", "mytool")
    tool(elsewhere / "bin", "other")
    monkeypatch.setenv("PATH", f"bin:{SYSTEM_PATH}")
    monkeypatch.chdir(elsewhere)
    assert load_spec(write(job, command=["mytool"])).command == ["mytool"]
    assert "'other' is not found on PATH" in refused(write(job, command=["other"]))


def test_a_relative_path_entry_is_from_the_workdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trial runs in the workdir: a relative entry is that folder's, not the spec's."""
    tool(tmp_path / "tools")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("pass\n")
    env = {"PATH": f"tools:{SYSTEM_PATH}"}
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, command=["run.sh"], env=env, workdir="src")
    assert "'run.sh' is not found on PATH" in refused(path)
    tool(tmp_path / "src" / "tools")
    assert load_spec(path).workdir == "src"


# ---- F3b: python's options before the script ----------------------------------------------
SCRIPT_AFTER_OPTIONS = [
    ["python", "-u", "trian.py"],
    ["python", "-B", "-W", "ignore", "trian.py"],
    ["python3", "-OO", "-X", "dev", "trian.py"],
    ["python", "-uWignore", "-Xdev", "trian.py"],
    ["python", "-uW", "ignore", "-I", "-S", "trian.py"],
    ["python", "-u", "--", "trian.py"],
    ["python", "--check-hash-based-pycs", "never", "trian.py"],
]


@pytest.mark.parametrize("command", SCRIPT_AFTER_OPTIONS, ids=" ".join)
def test_the_script_after_pythons_options_is_checked(tmp_path: Path, command: list[str]) -> None:
    """Before: loaded, and every trial failed with "can't open file"."""
    assert refused(write(tmp_path, command=command)) == (
        f"spec field 'command': the script 'trian.py' does not exist in {tmp_path} (did you "
        "mean 'train.py'?); fix its name or path (a relative one is from the job's folder)"
    )
    fixed = [a.replace("trian.py", "train.py") for a in command]
    assert load_spec(write(tmp_path, command=fixed)).command == fixed


@pytest.mark.parametrize(
    "args",
    [
        *([a for a in c[1:]] for c in SCRIPT_AFTER_OPTIONS),
        ["-m", "trian_no_such_module"],
        ["-c", "pass", "trian.py"],
        ["-uc", "pass", "trian.py"],
        ["-V", "trian.py"],
        ["-", "trian.py"],
        ["--", "-", "trian.py"],
        ["-W", "trian.py"],  # -W's argument is the file name: python runs no script
        ["--check-hash-based-pycs", "sometimes", "trian.py"],  # refused by python itself
        ["--unknown-option", "trian.py"],
        ["-e", "trian.py"],
    ],
    ids=" ".join,
)
def test_refused_exactly_when_python_cannot_open_the_script(
    tmp_path: Path, args: list[str]
) -> None:
    """The interpreter itself is the judge: the spec is refused for a missing script exactly
    when python, run with those arguments in the job's folder, says it cannot open it."""
    folder = tmp_path / "job"
    path = write(folder, command=["python", *args])
    run = subprocess.run(
        [sys.executable, *args], cwd=folder, capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=30,
    )  # fmt: skip
    cannot_open = "can't open file" in run.stderr
    try:
        load_spec(path)
        was_refused = False
    except SpecError as e:
        was_refused = "the script 'trian.py' does not exist" in e.message
    assert was_refused == cannot_open, (run.returncode, run.stderr[-300:])


# ---- a float field takes no bool ---------------------------------------------------------------
REAL = {"type": "real", "low": 0.003, "high": 0.3}


@pytest.mark.parametrize(
    ("changes", "field", "shown"),
    [
        ({"search_space": {"lr": {**REAL, "low": True}}}, "search_space.lr.low", "true"),
        ({"search_space": {"lr": {**REAL, "low": 0, "high": True}}}, "search_space.lr.high",
         "true"),
        ({"search_space": {"n": {"type": "int", "low": False, "high": 4}}}, "search_space.n.low",
         "false"),
        ({"providers": [{"name": "local", "replay": {"start": False}}]},
         "providers.0.replay.start", "false"),
        ({"providers": [{"name": "local", "replay": {"speedup": True}}]},
         "providers.0.replay.speedup", "true"),
        ({"providers": [{"name": "local", "replay": {"notice_floor_s": True}}]},
         "providers.0.replay.notice_floor_s", "true"),
    ],
)  # fmt: skip
def test_a_bool_is_no_number(changes: dict[str, Any], field: str, shown: str) -> None:
    """Before: `low: true` was 1.0, `speedup: true` a 1x replay, `low: false` 0, silently."""
    with pytest.raises(SpecError) as info:
        parse_spec({**SPEC, **changes}, "job.yaml")
    assert info.value.message == (
        f"job.yaml: spec field '{field}': must be a number, got {shown}; write the number meant"
    )


def test_numbers_in_those_fields_still_load() -> None:
    replay = {"start": 0, "speedup": "600", "notice_floor_s": 2}
    spec = parse_spec({**SPEC, "providers": [{"name": "local", "replay": replay}],
                       "search_space": {"lr": {**REAL, "low": "1e-3"},
                                        "n": {"type": "int", "low": 0, "high": 1e3}}})  # fmt: skip
    r = spec.providers[0].replay
    assert r is not None and (r.start, r.speedup, r.notice_floor_s) == (0.0, 600.0, 2.0)
    lr, n = spec.search_space["lr"], spec.search_space["n"]
    assert (lr.low, n.low, n.high) == (0.001, 0, 1000)  # type: ignore[union-attr]


def test_a_stored_spec_is_read_back_as_recorded() -> None:
    """A recorded job must stay readable (cancel releases what it holds): no new check."""
    data = JobSpec.model_validate(SPEC).model_dump(mode="json")
    data["search_space"]["lr"].update(low=True, high=3.0)
    assert load_stored_spec(json.dumps(data)).search_space["lr"].low == 1.0  # type: ignore[union-attr]


def test_a_choice_written_like_1e_3_is_the_number_and_quoted_the_text(tmp_path: Path) -> None:
    """review-al F2, kept on purpose (spec_yaml12's docstring): the number is what was meant."""
    path = write(tmp_path)
    text = path.read_text().replace(
        "  lr:", '  wd: {type: categorical, choices: [1e-3, 3e-4, "1e-4"]}\n  lr:'
    )
    path.write_text(text)
    assert load_spec(path).search_space["wd"].choices == [0.001, 0.0003, "1e-4"]  # type: ignore[union-attr]


# ---- asha's rungs for a policy given by name (tune --policy asha) ---------------------------
def test_the_rung_check_is_for_the_policy_named_not_the_specs() -> None:
    """`tune --policy asha` runs asha with the spec's policy_options: check_rungs("asha", ...)
    refuses them when asha would stop nothing, whatever the spec's own policy."""
    from spotwise.spec_options import check_rungs

    spec = JobSpec.model_validate({**SPEC, "policy": "greedy", "policy_options": {"min_steps": 4}})
    with pytest.raises(SpecError) as info:
        check_rungs("asha", spec, "job.yaml")
    assert info.value.message == (
        "job.yaml: spec field 'policy_options.min_steps': asha's first rung (4) is not before "
        "the last step (steps: 4), so asha would stop no trial; set min_steps below 4, or leave "
        "it out (the first rung is then step 1)"
    )
    check_rungs("greedy", spec, "job.yaml")  # another policy: no rungs to check
    ok = JobSpec.model_validate({**SPEC, "policy_options": {"min_steps": 3}})
    check_rungs("asha", ok, "job.yaml")
    check_rungs("asha", JobSpec.model_validate(SPEC), "job.yaml")  # no min_steps: asha's 1
