"""What the commands print: one JSON document with ``--json``, else a rich rendering.

rich is imported inside the functions, like every rendering import of the CLI.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from rich.table import Table


def strict(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None: strict JSON has no NaN
    (Python writes a bare ``NaN`` that ``jq``, JavaScript and most parsers refuse)."""
    if getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)):
        value = value.item()  # a numpy scalar
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict(v) for v in value]
    return value


def json_text(result: Any, **kwargs: Any) -> str:
    """``result`` as strict JSON: non-finite numbers become ``null``."""
    return json.dumps(strict(result), allow_nan=False, **kwargs)


#: Set when a command's own exit code outlived a closed stdout pipe (:func:`keep_outcome`):
#: ``spotwise.cli.app.main`` then keeps it rather than exiting 141 for the pipe.
outcome_kept = False


def emit(result: Any, as_json: bool, render: Callable[[Any], object], outcome: int = 0) -> None:
    """Print ``result`` as one JSON document with ``--json``, else ``render(result)``.
    ``outcome``: the exit code the result gives (1: `report --check` found an instance held),
    kept should stdout's reader be gone (:func:`keep_outcome`)."""
    with keep_outcome(outcome):
        if as_json:
            typer.echo(json_text(result))
        else:
            render(result)


@contextmanager
def keep_outcome(outcome: int) -> Iterator[None]:
    """Write a command's output; should its reader be gone (a closed pipe: rich exits 1,
    click's echo raises), exit with ``outcome`` when it is not 0: what the command found (an
    instance held, a job failed) is not lost behind the pipe's 141 (review-ax AX3)."""
    global outcome_kept
    try:
        yield
    except BrokenPipeError:
        if not outcome:
            raise
        quiet_stdout()
    except SystemExit as e:  # rich's Console.on_broken_pipe (it points stdout at /dev/null)
        if not outcome or e.code != 1:
            raise
    else:
        return
    outcome_kept = True
    raise typer.Exit(outcome)


def quiet_stdout() -> None:
    """Point stdout at /dev/null: the interpreter's last flush would fail again (exit 120)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def listing(title: str | None = None, *, caption: str | None = None, leading: int = 0) -> Table:
    """The table every listing prints: a rule under the header and two spaces between columns,
    no frame (at 80 columns a frame costs a value its room). Add the short columns a user
    copies (ids, states, dates) with ``no_wrap=True``, those that may be too long for 80
    columns (instance types, zones, names) with ``overflow="fold"`` (rich crops a ``no_wrap``
    cell silently when the table must shrink); the others wrap between words once :func:`fit`
    has sized them."""
    from rich import box
    from rich.table import Table

    return Table(
        title=title,
        caption=caption,
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
        leading=leading,
    )


def fit(table: Table, width: int) -> Table:
    """Size the wrapping columns of a :func:`listing` to ``width``: the ``no_wrap`` columns keep
    their full width; each other column gets at most its longest line and at least its longest
    word, so a word, a number or a ``name=value`` pair is never cut in two (an
    ``overflow="fold"`` column at least :data:`SHORT_WORD` columns, then folds a longer word
    onto more lines).

    Where that does not fit (an 80-column cron log: no terminal, no COLUMNS), columns give way
    rather than let rich crop the ``no_wrap`` ones with "…" (review-af F6: job ids, states
    and held hours were cut): first those whose values have spaces wrap between words (a date
    and its time), then the text ones (ids, and the words of the ``overflow="fold"`` columns)
    fold onto more lines, the widest first, then the numbers (right-justified) fold: a short
    name is not broken while an id is wider (review-ah F13: ``digits-m|lp`` beside a folded
    job id). Nothing is ever cropped; only a terminal too narrow for even that (each such
    column 8 wide, numbers 4) leaves it to rich to shrink every column."""
    from rich.text import Text

    def lines(cell: object) -> list[str]:
        text = Text.from_markup(cell) if isinstance(cell, str) else cell
        return text.plain.splitlines() if isinstance(text, Text) else [""]

    cols: list[_Col] = []
    for column in table.columns:
        rows = [line for cell in (column.header, *column.cells) for line in lines(cell)]
        widest = max((Text(line).cell_len for line in rows), default=0)
        words = [w for line in rows for w in line.split()]
        longest = max((Text(w).cell_len for w in words), default=1)
        narrowest = widest if column.no_wrap else longest
        if column.overflow == "fold" and not column.no_wrap:  # a long word may fold (a name)
            narrowest = min(narrowest, max(Text(str(column.header)).cell_len, SHORT_WORD))
        cols.append(_Col(column, narrowest, widest, longest))
    room = width - 2 * (len(table.columns) - 1)  # two spaces between columns
    _give_way(cols, room)
    flexible = [c for c in cols if not c.column.no_wrap]
    spare = max(0, room - sum(c.narrowest for c in cols))
    want = [c.widest - c.narrowest for c in flexible]
    give = [0] * len(want)
    order = sorted(range(len(want)), key=lambda i: want[i])
    for n, i in enumerate(order):  # fair shares, the columns that want least served first
        give[i] = min(want[i], spare // (len(order) - n))
        spare -= give[i]
    for c, extra in zip(flexible, give, strict=True):
        c.column.width = c.narrowest + extra
    return table


#: A word this long or shorter (a job name such as ``digits-mlp``, a zone, an instance type)
#: stays whole in an ``overflow="fold"`` column unless the ids fold as narrow (review-ah F13).
SHORT_WORD = 12


@dataclass
class _Col:
    """A column of a table :func:`fit` sizes: the fewest cells it may take, the most it
    wants, and its longest word."""

    column: Any
    narrowest: int
    widest: int
    longest: int


def _give_way(cols: list[_Col], room: int) -> None:
    """Turn ``no_wrap`` columns into wrapping ones until the narrowest table fits ``room``:
    those with spaces wrap between words (largest saving first); then the ``overflow="fold"``
    columns whose longest word is folded already (longer than :data:`SHORT_WORD`) fold it
    narrower; then text columns fold (ids, and the short words of those columns: broken only
    where the ids fold as narrow), then numbers (right-justified) fold, the widest cut first
    (no column below 8, numbers 4). A turned column never crops: it wraps or folds."""

    def over() -> int:
        return sum(c.narrowest for c in cols) - room

    def turn(c: _Col, narrowest: int) -> None:
        c.column.no_wrap, c.column.overflow = False, "fold"
        c.narrowest = narrowest

    for c in sorted(
        (c for c in cols if c.column.no_wrap and c.longest < c.widest),
        key=lambda c: c.longest - c.widest,
    ):
        if over() <= 0:
            return
        turn(c, c.longest)

    def folds(c: _Col) -> bool:
        return c.column.no_wrap or c.column.overflow == "fold"

    def broken(c: _Col) -> bool:  # a fold column whose longest word is cut already
        return not c.column.no_wrap and c.column.overflow == "fold" and c.longest > c.narrowest

    def text(c: _Col) -> bool:
        return c.column.justify != "right"

    steps = (
        (lambda c: text(c) and broken(c), 8),
        (lambda c: text(c) and folds(c), 8),
        (lambda c: not text(c) and folds(c), 4),
    )
    for member, floor in steps:
        group = [c for c in cols if c.narrowest > floor and member(c)]
        if over() <= 0 or not group:
            continue
        # the highest cap that saves enough (the widest columns cut to it, evenly)
        need, top = over(), max(c.narrowest for c in group)
        cap = next(
            (
                level
                for level in range(top - 1, floor - 1, -1)
                if sum(c.narrowest - level for c in group if c.narrowest > level) >= need
            ),
            floor,
        )
        for c in group:
            if c.narrowest > cap:
                turn(c, cap)
