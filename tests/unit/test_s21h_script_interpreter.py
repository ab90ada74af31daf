"""review-ao F8: a local script named as the program and not executable was told to run as
``[bash, ./train.py]``, which runs a Python file with bash (every trial: "import: command not
found"). The interpreter is now the one the file's ``#!`` line names, else its suffix's; a
python one is suggested as ``[python, train.py]``, and following the advice loads."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_helpers import load_refused as refused
from shared_helpers import write_local_spec as write

from spotwise.spec import load_spec

HEAD = "spec field 'command': the program '{p}' is not executable; make it so (chmod +x {full}), "


@pytest.mark.parametrize(
    ("name", "text", "advice"),
    [
        ("train.py", "import sys\n", "[python, train.py]"),  # the finding (examples/digits)
        ("train.py", "#!/usr/bin/env python3\nimport sys\n", "[python, train.py]"),
        ("train.py", "#!/usr/bin/env -S python3 -u\n", "[python, train.py]"),
        ("train", "#!/usr/bin/python3.12\n", "[python, train]"),
        ("run.sh", "echo hi\n", "[bash, ./run.sh]"),
        ("run.sh", "#!/bin/bash -e\necho hi\n", "[bash, ./run.sh]"),
        ("run.sh", "#! /bin/sh\necho hi\n", "[sh, ./run.sh]"),
        ("train.py", "#!/bin/bash\necho a bash file named .py\n", "[bash, ./train.py]"),
        ("run.pl", "#!/usr/bin/env perl\n", "[perl, ./run.pl]"),
        ("run", "echo hi\n", "[python, run] for a Python script, [bash, ./run] for a shell one"),
    ],
)
def test_the_interpreter_suggested_is_the_files(
    tmp_path: Path, name: str, text: str, advice: str
) -> None:
    (tmp_path / name).write_text(text)
    program = f"./{name}"
    assert refused(write(tmp_path, script=None, command=[program])) == (
        HEAD.format(p=program, full=tmp_path / name)
        + f"or run it through its interpreter, e.g. {advice}"
    )


def test_a_script_in_a_subfolder_keeps_its_path(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("pass\n")
    assert refused(write(tmp_path, script=None, command=["./src/train.py"])).endswith(
        "e.g. [python, src/train.py]"
    )
    assert refused(write(tmp_path, script=None, command=["src/train.py"])).endswith(
        "e.g. [python, src/train.py]"
    )


def test_following_the_advice_loads(tmp_path: Path) -> None:
    """The suggested command passes the same check (the script is found from the job's folder)."""
    (tmp_path / "train.py").write_text("print('hi')\n")
    message = refused(write(tmp_path, script=None, command=["./train.py"]))
    advice = message.rsplit("e.g. [", 1)[1].rstrip("]").split(", ")
    assert advice == ["python", "train.py"]
    assert load_spec(write(tmp_path, script=None, command=advice)).command == advice


def test_an_unreadable_script_falls_back_to_its_suffix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "train.py"
    script.write_text("#!/bin/bash\n")
    real_open = Path.open

    def refuse(self: Path, *args: object, **kwargs: object) -> object:
        if self == script:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(Path, "open", refuse)
    assert refused(write(tmp_path, script=None, command=["./train.py"])).endswith(
        "e.g. [python, train.py]"
    )
