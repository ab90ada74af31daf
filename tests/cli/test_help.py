"""Every command's ``--help`` at 80 columns: prose reflowed to the width (no line broken where
the docstring was, then wrapped again into a long and a very short line), an ``Examples:``
block whose lines are kept as written, and examples that name real commands and options."""

from __future__ import annotations

import shlex
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from spotwise.cli.app import app
from spotwise.cli.options import reflow_help

ROOT = Path(__file__).resolve().parents[2]
WIDTH = 80
runner = CliRunner()


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The path of every command and group under ``cmd`` (the root is ``()``)."""
    out = [path]
    for name, sub in getattr(cmd, "commands", {}).items():
        out += _commands(sub, (*path, name))
    return out


COMMANDS = _commands(typer.main.get_command(app))


def _help(path: tuple[str, ...]) -> str:
    done = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(WIDTH)})
    assert done.exit_code == 0, done.output
    return done.output


def _description(text: str) -> list[list[str]]:
    """The paragraphs of the help text between the usage line and the first panel."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if "Usage:" in ln) + 1
    end = next((i for i, ln in enumerate(lines) if ln.startswith("╭")), len(lines))
    paragraphs: list[list[str]] = [[]]
    for line in lines[start:end]:
        if line.strip():
            paragraphs[-1].append(line.rstrip())
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p]


def _ragged(lines: list[str], width: int) -> list[str]:
    """Pairs of wrapped prose lines where the next line's first word would have fit on the
    line before it: a line break the terminal did not need. ``lines`` are one paragraph's,
    without the margin; a line that starts with a space is an example (kept as written)."""
    return [
        f"{a!r} + {b.split()[0]!r}"
        for a, b in pairwise(lines)
        if not b.startswith(" ") and len(a) + 1 + len(b.split()[0]) <= width
    ]


def _examples(text: str) -> list[str]:
    """The example command lines under ``Examples:`` (a ``\\`` continuation joined)."""
    lines = text.splitlines()
    at = next((i for i, ln in enumerate(lines) if ln.strip() == "Examples:"), len(lines))
    out: list[str] = []
    joined = ""
    for line in lines[at + 1 :]:
        if not line.startswith("   ") or not line.strip():
            break
        joined += " " + line.strip()
        if joined.endswith("\\"):
            joined = joined[:-1]
            continue
        out.append(joined.strip())
        joined = ""
    return out


def test_every_command_is_covered() -> None:
    names = {" ".join(p) for p in COMMANDS}
    for name in ("", "tune", "status", "trials", "cancel", "report", "check", "catalog"):
        assert name in names
    for name in ("prices", "simulate", "simulate deadline", "predictor train", "curve eval"):
        assert name in names
    for name in ("predictor eval", "predictor forecast", "curve fit"):
        assert name in names


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "spotwise")
def test_help_fits_80_columns_and_has_examples(path: tuple[str, ...]) -> None:
    text = _help(path)
    too_long = [ln for ln in text.splitlines() if len(ln) > WIDTH]
    assert not too_long, too_long
    assert "Examples:" in text, text
    assert not any(c in text for c in "\b\f\r"), repr(text)  # no marker reaches the terminal


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "spotwise")
def test_help_paragraphs_reflow_to_the_width(path: tuple[str, ...]) -> None:
    """At 80 columns the description is 78 wide (one column of margin each side)."""
    text = _help(path)
    for par in _description(text):
        assert all(ln.startswith(" ") for ln in par), par
        assert not _ragged([ln[1:] for ln in par], WIDTH - 2), "\n".join(par)


@pytest.mark.parametrize(
    "path", [(), ("predictor",), ("curve",)], ids=lambda p: " ".join(p) or "spotwise"
)
def test_commands_list_reflows_each_summary(path: tuple[str, ...]) -> None:
    """`spotwise --help` listed `report` as "…(or job, type, zone, day), and" and then
    "every instance still held." on a line of its own, where its docstring broke the line."""
    lines = _help(path).splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("╭─ Commands"))
    rows = [ln for ln in lines[start + 1 :] if ln.startswith("│")]
    rows = rows[: next((i for i, r in enumerate(rows) if r.startswith("╰")), len(rows))]
    name, _, rest = rows[0][2:].partition(" ")
    col = 3 + len(name) + len(rest) - len(rest.lstrip())  # where the summaries start
    width = len(rows[0]) - 2 - col  # up to the panel's right padding
    summaries: list[list[str]] = []
    for row in rows:
        if row[2:col].strip():  # a command's first line
            summaries.append([])
        summaries[-1].append(row[col:-1].rstrip())
    for summary in summaries:
        assert not _ragged(summary, width), "\n".join(summary)


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "spotwise")
def test_examples_name_real_commands_options_and_files(path: tuple[str, ...]) -> None:
    """Each example parses as the command it names would parse it (options exist, values
    convert, required ones are given), and every path it names exists in a checkout."""
    root = typer.main.get_command(app)
    examples = _examples(_help(path))
    assert examples, f"spotwise {' '.join(path)} --help has no Examples: block"
    for example in examples:
        args = shlex.split(example, comments=True)
        assert args[0] == "spotwise", example
        cmd: Any = root
        names = ["spotwise"]
        args = args[1:]
        while args and args[0] in getattr(cmd, "commands", {}):
            names.append(args[0])
            cmd = cmd.commands[args.pop(0)]
        assert tuple(names[1 : len(path) + 1]) == path, example  # this command's own
        cmd.make_context(" ".join(names), list(args))  # raises on an unknown or bad option
        for arg in args:
            if "/" in arg and not arg.startswith(("builtin:", "-")):
                assert (ROOT / arg).exists(), f"{example}: {arg} is not in the checkout"


def test_reflow_joins_prose_and_keeps_indented_blocks() -> None:
    doc = """Summary line that the docstring
    broke in two.

    A second paragraph, broken
    where the docstring's width ended.

    Examples:
      spotwise status
      spotwise trials JOB \\
        --json
    """
    out = reflow_help(doc)
    assert out == (
        "Summary line that the docstring broke in two.\n\n"
        "A second paragraph, broken where the docstring's width ended.\n\n"
        "Examples:\n\b  spotwise status\n\b  spotwise trials JOB \\\n\b    --json"
    )
    assert reflow_help(out) == out


def test_examples_keep_their_indent_when_they_are_all_after_the_summary() -> None:
    """typer dedents the text after the first paragraph: a help whose only other paragraph
    is its examples would print them flush left, like prose."""
    text = _help(("status",))
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.strip() == "Examples:")
    assert lines[at].startswith(" Examples:"), text
    assert lines[at + 1].startswith("   spotwise status "), text
