"""Option aliases shared by every command (``Annotated`` so each command stays short).

Importing this module also adjusts two things in typer's rich help, for every command (every
command module imports it): flags show no value placeholder (:func:`_flags_take_no_value`),
and the paragraphs of a command's docstring reflow to the terminal width while indented
blocks such as ``Examples:`` keep their lines (:func:`_reflow_help_paragraphs`).
"""

from __future__ import annotations

import inspect
import re
from typing import Annotated, Any

import typer


def _flags_take_no_value() -> None:
    """typer 0.29's rich help prints a type after every option, flags included (``--json
    <bool>``, ``--help <bool>``), which reads as if they took a value. Its plain help and its
    usage line skip flags; make the rich help do the same. Idempotent."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich
    if getattr(shown, "_spotwise_flags", False):
        return

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        if self.is_flag or self.count:
            return None  # a flag takes no value: no placeholder
        return shown(self, ctx)

    display_type_rich._spotwise_flags = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_take_no_value()


def reflow_help(text: str) -> str:
    r"""A help text whose prose paragraphs are each one line, for the terminal to wrap.

    typer 0.29's rich help (``rich_utils._get_help_text``) joins the lines of a docstring's
    first paragraph only: it prints every later paragraph with the docstring's own line
    breaks, which wrap again at a narrower terminal into one long and one very short line.
    The commands list (``_make_command_help``) keeps the first paragraph's breaks too. Here a
    paragraph (lines between blank lines) becomes one line, unless one of its lines is
    indented, as in::

        Examples:
          spotwise status
          spotwise status JOB --json

    which keeps its lines as written. typer dedents the text after the first paragraph
    (``inspect.cleandoc``), which would take the indent off a block that is all it has: each
    indented line starts with ``\b`` (click's mark for text not to rewrap; rich drops control
    characters, so it never reaches the terminal). Idempotent."""
    out = []
    for par in re.split(r"\n[ \t]*\n", inspect.cleandoc(text)):
        lines = par.split("\n")
        if any(line[:1].isspace() or line[:1] == "\b" for line in lines):  # a block
            out.append("\n".join("\b" + ln if ln[:1].isspace() else ln for ln in lines))
        else:
            out.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(out)


def _reflow_help_paragraphs() -> None:
    """Every typer command and group reflows its help (:func:`reflow_help`) when it is built,
    so the rich help wraps prose at the terminal width and keeps example blocks. Idempotent."""
    from typer.core import TyperCommand, TyperGroup

    def reflowing(init: Any) -> Any:
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            if self.help:
                self.help = reflow_help(self.help)

        __init__._spotwise_reflow = True  # type: ignore[attr-defined]
        return __init__

    for cls in (TyperCommand, TyperGroup):
        if not getattr(cls.__init__, "_spotwise_reflow", False):
            cls.__init__ = reflowing(cls.__init__)  # type: ignore[method-assign]


_reflow_help_paragraphs()

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar="SPOTWISE_DB",
        help="SQLAlchemy URL of the state database (default: SQLite in the user data dir), "
        "e.g. postgresql+psycopg://user@host/spotwise.",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document to stdout.")]
# ``predictor`` and ``curve`` word their help in lower case without a full stop.
PredictorJsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON document to stdout")]
