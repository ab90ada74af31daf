"""What a spec is refused for when it is read, before anything is recorded (review-ak M5, M7,
M8), the preflight's refusals naming the spec's file (M5), and the warning for a cloud job with
no cost cap (M6)."""

from __future__ import annotations

import os
import types
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import LOCAL_SPEC as SPEC
from shared_helpers import load_refused as refused
from shared_helpers import write_local_spec as write

from spotwise.errors import SpecError
from spotwise.spec import JobSpec, load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]


# ---- M5: the policy ----------------------------------------------------------------------------
def test_an_unknown_policy_is_refused_when_the_spec_loads(tmp_path: Path) -> None:
    """Before: accepted here, refused at tune as `policy: unknown policy ...` with no file."""
    assert refused(write(tmp_path, policy="spot-gredy")) == (
        "spec field 'policy': unknown policy 'spot-gredy' (did you mean 'spot-greedy'?); "
        "valid: asha, greedy, on-demand, spot-greedy, spottune, spotwise, uniform-progress"
    )


def test_an_unknown_policy_with_options_names_the_policy_not_its_options() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec({**SPEC, "policy": "ashaa", "policy_options": {"min_steps": 3}}, "job.yaml")
    assert info.value.message.startswith(
        "job.yaml: spec field 'policy': unknown policy 'ashaa' (did you mean 'asha'?); valid: "
    )


def test_preflight_refusals_start_with_the_spec_path(tmp_path: Path) -> None:
    """The checkpoint probe's refusal (a folder under a file) names the spec's file, as
    load_spec's refusals do."""
    from spotwise.planner.preflight import preflight

    spec = parse_spec(SPEC)
    (tmp_path / "afile").write_text("")
    backend: Any = types.SimpleNamespace(provider="local", catalog=object())
    root = str(tmp_path / "afile" / "ckpt")
    with pytest.raises(SpecError) as info:
        preflight(spec, backend, root, source="examples/job.yaml")
    assert info.value.message.startswith(
        "examples/job.yaml: spec field 'checkpoint.location': spotwise cannot write checkpoints"
    )
    with pytest.raises(SpecError) as info:  # without a source: as before
        preflight(spec, backend, root)
    assert info.value.message.startswith("spec field 'checkpoint.location': ")


# ---- M7: asha's first rung past the last step ----------------------------------------------------
def test_asha_whose_first_rung_is_past_the_steps_is_refused(tmp_path: Path) -> None:
    """Before: loaded and ran; no rung was reached and asha stopped nothing, silently."""
    path = write(tmp_path, policy="asha", policy_options={"min_steps": 100})
    assert refused(path) == (
        "spec field 'policy_options.min_steps': asha's first rung (100) is not before the last "
        "step (steps: 4), so asha would stop no trial; set min_steps below 4, or leave it out "
        "(the first rung is then step 1)"
    )
    assert "min_steps below 4" in refused(write(tmp_path, policy="asha",
                                                policy_options={"min_steps": 4}))  # fmt: skip
    assert load_spec(write(tmp_path, policy="asha", policy_options={"min_steps": 3})).steps == 4


def test_asha_with_one_step_says_no_trial_can_stop(tmp_path: Path) -> None:
    path = write(tmp_path, policy="asha", steps=1, trials=1, policy_options={"min_steps": 1})
    assert refused(path).endswith(
        "so asha would stop no trial; with steps: 1 no trial can be stopped early: raise steps, "
        "or pick another policy"
    )


# ---- M8: a local job's command ------------------------------------------------------------------
def test_a_misspelt_program_is_refused_before_anything_runs(tmp_path: Path) -> None:
    assert refused(write(tmp_path, command=["pythn", "train.py"])) == (
        "spec field 'command': the program 'pythn' is not found on PATH (did you mean "
        "'python'?); install it, fix the name, or give its path"
    )


def test_a_misspelt_script_is_refused_naming_the_one_there(tmp_path: Path) -> None:
    assert refused(write(tmp_path, command=["python", "trian.py"])) == (
        f"spec field 'command': the script 'trian.py' does not exist in {tmp_path} (did you "
        "mean 'train.py'?); fix its name or path (a relative one is from the job's folder)"
    )


def test_the_script_is_looked_for_in_the_workdir(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    path = write(tmp_path, workdir="src")
    assert refused(path).startswith(
        f"spec field 'command': the script 'train.py' does not exist in {tmp_path / 'src'}; "
    )
    (tmp_path / "src" / "train.py").write_text("pass\n")
    assert load_spec(path).workdir == "src"


def test_any_python_program_has_its_script_checked(tmp_path: Path) -> None:
    import sys

    assert "does not exist" in refused(write(tmp_path, command=[sys.executable, "gone.py"]))


def test_a_program_path_must_be_an_executable_file(tmp_path: Path) -> None:
    assert refused(write(tmp_path, script=None, command=["./run.sh"])) == (
        f"spec field 'command': the program './run.sh' is not a file ({tmp_path}/run.sh); "
        f"fix the path (a relative one is from {tmp_path})"
    )
    (tmp_path / "run.sh").write_text("#!/bin/sh\nexec python train.py\n")
    assert refused(write(tmp_path, script=None, command=["./run.sh"])) == (
        "spec field 'command': the program './run.sh' is not executable; make it so (chmod +x "
        f"{tmp_path}/run.sh), or run it through its interpreter, e.g. [sh, ./run.sh]"
    )
    os.chmod(tmp_path / "run.sh", 0o755)
    assert load_spec(write(tmp_path, script=None, command=["./run.sh"])).command == ["./run.sh"]


def test_the_program_is_looked_for_on_the_jobs_path(tmp_path: Path) -> None:
    """The trial is started with the job's env: a PATH there is where its program is found."""
    (tmp_path / "bin").mkdir()
    tool = tmp_path / "bin" / "mytool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert "'mytool' is not found on PATH" in refused(write(tmp_path, command=["mytool"]))
    spec = load_spec(write(tmp_path, command=["mytool"], env={"PATH": str(tmp_path / "bin")}))
    assert spec.command == ["mytool"]


def test_python_with_a_module_or_flags_first_is_not_second_guessed(tmp_path: Path) -> None:
    assert load_spec(write(tmp_path, script=None, command=["python", "-m", "nope"])).command
    assert load_spec(write(tmp_path, script=None, command=["python", "-c", "x.py"])).command


def test_a_cloud_jobs_command_is_not_looked_for_here(tmp_path: Path) -> None:
    """Its program and script are on the instance."""
    providers = [{"name": "gcp", "regions": ["us-central1"]}]
    spec = load_spec(write(tmp_path, script=None, command=["pythn", "trian.py"],
                           providers=providers))  # fmt: skip
    assert spec.command == ["pythn", "trian.py"]


# ---- M6: a cloud job with no cost cap ------------------------------------------------------------
def test_a_cloud_job_without_a_cost_cap_gets_a_warning() -> None:
    from spotwise.spec_options import cost_cap_note

    cloud = {**SPEC, "providers": [{"name": "aws"}, {"name": "gcp"}]}
    assert cost_cap_note(parse_spec(cloud)) == (
        "the spec sets no budget.max_cost_usd: nothing caps what this job spends on aws and "
        "gcp; add budget: {max_cost_usd: N} to stop it at N dollars"
    )
    capped = {**cloud, "budget": {"max_cost_usd": 5}}
    assert cost_cap_note(parse_spec(capped)) == ""
    assert cost_cap_note(parse_spec({**cloud, "budget": {"deadline_hours": 2}})) != ""
    assert cost_cap_note(parse_spec(SPEC)) == ""  # the replayed market: no money


@pytest.mark.parametrize("name", ["job-aws.yaml", "job-gcp.yaml", "job-azure.yaml"])
def test_the_cloud_examples_show_a_cost_cap(name: str) -> None:
    from spotwise.spec_options import cost_cap_note

    spec: JobSpec = load_spec(ROOT / "examples" / "digits" / name)
    assert spec.budget.max_cost_usd is not None and cost_cap_note(spec) == ""
