"""What a local job's spec names on this machine, checked by :func:`spotwise.spec.load_spec`
before the job is recorded (a cloud job's folder, program and script are on its instances):

* its ``workdir``;
* its replayed trace, with the start, regions, zones and instance types it names there;
* its ``command``: the program (``command[0]``, found on ``PATH`` as the trial will look for it,
  or a path from the job's folder) and, for a python program, the script it runs
  (``[python, train.py]``, also after python's own options: ``[python, -u, train.py]``): a
  typo there was recorded and run, and the job stopped only after its first trials failed
  (review-ak M8).

Each is looked for as the trial's exec will look: from the job's folder (the trial's working
folder), so a relative ``PATH`` entry (``tools``, ``.``, an empty one) is that folder's, not the
one ``spotwise tune`` runs in (review-al F3). ``[python, -m, mod]``, ``[python, -c, code]`` and
an option this module does not know leave the command unchecked: what they run is no file here.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from spotwise.errors import SpecError, did_you_mean

if TYPE_CHECKING:
    from spotwise.spec import JobSpec

#: a python interpreter's name: python, python3, python3.12 (a bare ``python`` is the
#: interpreter running spotwise: :func:`spotwise.planner.runstate.trial_argv`)
_PYTHON = re.compile(r"python(?:\d+(?:\.\d+)*)?")
#: CPython's options that take no argument (``-u``, ``-B``, ``-OO``, grouped as ``-uB``) and
#: those that take one (``-W ignore``, ``-Wignore``, ``-X dev``); any other (``-c``, ``-m``,
#: ``-h``, ``-V``, one unknown) means python runs no script file, or none we can tell
_FLAGS, _FLAGS_WITH_ARG = frozenset("bBdEiIOPqRsStuvx"), frozenset("WX")


def check_local(spec: JobSpec, path: Path) -> None:
    """Refuse (SpecError, one line naming the field) what a local job names on this machine
    and is not there: see the module docstring."""
    base = spec.base_dir(path)
    if spec.workdir and not base.is_dir():
        what = "is not a folder" if base.exists() else "does not exist"
        raise SpecError(
            f"{path}: spec field 'workdir': {base} {what}; create it, or fix the path "
            "(a relative one is from the spec's folder)"
        )
    for i, q in enumerate(spec.providers):
        if q.name == "local":
            from spotwise.providers.replay import check_replay_filters
            from spotwise.spec import ReplaySpec

            r = q.replay or ReplaySpec()
            try:
                check_replay_filters(
                    r.trace, base, q.regions, q.zones, i,
                    instance_types=q.instance_types, start_h=r.start,
                )  # fmt: skip
            except SpecError as e:
                raise SpecError(f"{path}: {e.message}", hint=e.hint) from None
    if problem := command_problem(spec.command, base, spec.env):
        raise SpecError(f"{path}: spec field 'command': {problem}")


def command_problem(command: list[str], base: Path, env: dict[str, str]) -> str:
    """What is wrong with a local ``command`` run in ``base`` with the job's ``env`` (its
    ``PATH`` is the trial's), and the fix; "" when nothing is found wrong."""
    program = command[0]
    # a bare python runs as the interpreter running spotwise: found
    if program != "python" and (problem := _program_problem(program, base, env)):
        return problem
    script = _python_script(command[1:]) if _PYTHON.fullmatch(Path(program).name) else None
    if script is not None and script.endswith(".py"):
        full = Path(script) if Path(script).is_absolute() else base / script
        if not full.is_file():
            what = "is not a file" if full.exists() else "does not exist"
            return (
                f"the script {script!r} {what} in {os.path.abspath(full.parent)}"
                f"{_near(script, full.parent)}; "
                "fix its name or path (a relative one is from the job's folder)"
            )
    return ""


def _program_problem(program: str, base: Path, env: dict[str, str]) -> str:
    if "/" in program:  # a path: from the folder the trial runs in
        full = Path(program) if Path(program).is_absolute() else base / program
        if not full.is_file():
            return (
                f"the program {program!r} is not a file ({full}); fix the path (a relative "
                f"one is from {base})"
            )
        if not os.access(full, os.X_OK):
            return (
                f"the program {program!r} is not executable; make it so (chmod +x {full}), "
                f"or run it through its interpreter, {_through_interpreter(program, full)}"
            )
        return ""
    if shutil.which(program, path=_trial_path(env, base)) is None:
        close = did_you_mean(program, ["python", "python3", "bash", "sh"])
        return (
            f"the program {program!r} is not found on PATH{close}; install it, fix the name, "
            "or give its path"
        )
    return ""


def _through_interpreter(program: str, full: Path) -> str:
    """How to run the script ``program`` (at ``full``) through its interpreter: the one its
    ``#!`` line names, else the one its suffix says; a python one as ``[python, train.py]``
    (spotwise's own interpreter), any other by its name, the path as given: ``[sh, ./run.sh]``
    (review-ao F8: a python script was told ``[bash, ./train.py]``)."""
    name = _shebang(full) or _BY_SUFFIX.get(full.suffix.lower(), "")
    if _PYTHON.fullmatch(name):
        return f"e.g. [python, {program.removeprefix('./')}]"
    if name:
        return f"e.g. [{name}, {program}]"
    script = program.removeprefix("./")
    return f"e.g. [python, {script}] for a Python script, [bash, {program}] for a shell one"


#: the interpreter a script without a ``#!`` line is run by, by its suffix
_BY_SUFFIX = {".py": "python", ".sh": "bash", ".bash": "bash"}


def _shebang(full: Path) -> str:
    """The interpreter's name on the ``#!`` line of ``full`` (``/usr/bin/env python3`` and
    ``/usr/bin/env -S python3 -u`` give ``python3``); "" when it has none or is unreadable."""
    try:
        with full.open("rb") as f:
            first = f.readline(256).decode("utf-8", "replace")
    except OSError:
        return ""
    words = first[2:].split() if first.startswith("#!") else []
    if words and Path(words[0]).name == "env":  # env's options and NAME=value come first
        words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    return Path(words[0]).name if words else ""


def _trial_path(env: dict[str, str], base: Path) -> str:
    """The ``PATH`` a local trial's exec searches (the job's ``env``'s, else spotwise's own),
    each relative entry joined to ``base``: the exec resolves it from the trial's working
    folder, and an empty entry is that folder (``os.execvpe``)."""
    search = env.get("PATH", os.environ.get("PATH", os.defpath))
    return os.pathsep.join(
        d if os.path.isabs(d) else os.path.join(base, d) for d in search.split(os.pathsep)
    )


def _python_script(args: list[str]) -> str | None:
    """The script python runs given ``args`` (its argv after the program), its options
    skipped as CPython parses them; None when it runs no script file (``-c``, ``-m``, ``-``,
    ``-V``, nothing) or an option is not one of :data:`_FLAGS` / :data:`_FLAGS_WITH_ARG`."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":  # the end of python's options: the script (or - for stdin) is next
            return args[i + 1] if i + 1 < len(args) and args[i + 1] != "-" else None
        if not arg.startswith("-") or arg == "-":
            return None if arg == "-" else arg
        if arg == "--check-hash-based-pycs":  # the one long option with an argument
            if args[i + 1 : i + 2] not in (["default"], ["always"], ["never"]):
                return None  # python refuses it
            i += 2
            continue
        rest = arg[1:].lstrip("".join(_FLAGS))
        if rest and (arg.startswith("--") or rest[0] not in _FLAGS_WITH_ARG):
            return None
        i += 2 if len(rest) == 1 else 1  # -W ignore: its argument is the next one
    return None


def _near(script: str, folder: Path) -> str:
    """' (did you mean ...?)' naming a python file in ``folder`` close to ``script``'s name."""
    try:
        names = sorted(f.name for f in folder.iterdir() if f.suffix == ".py")
    except OSError:
        return ""
    return did_you_mean(Path(script).name, names)
