"""What the commands print: one JSON document with ``--json``, else a rich rendering.

rich is imported inside the functions, like every rendering import of the CLI.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
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


def emit(result: Any, as_json: bool, render: Callable[[Any], object]) -> None:
    """Print ``result`` as one JSON document with ``--json``, else ``render(result)``."""
    if as_json:
        typer.echo(json_text(result))
    else:
        render(result)


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
    ``overflow="fold"`` column at least 8 columns, then folds a longer word onto more lines).
    Only where even that does not fit (a terminal far narrower than 80) does rich shrink every
    column."""
    from rich.text import Text

    def lines(cell: object) -> list[str]:
        text = Text.from_markup(cell) if isinstance(cell, str) else cell
        return text.plain.splitlines() if isinstance(text, Text) else [""]

    flexible: list[tuple[Any, int, int]] = []  # (column, narrowest, widest)
    fixed = 0
    for column in table.columns:
        rows = [line for cell in (column.header, *column.cells) for line in lines(cell)]
        widest = max((Text(line).cell_len for line in rows), default=0)
        if column.no_wrap:
            fixed += widest
            continue
        words = [w for line in rows for w in line.split()]
        narrowest = max((Text(w).cell_len for w in words), default=1)
        if column.overflow == "fold":  # a long word may fold (a name), not squeeze the rest
            narrowest = min(narrowest, max(Text(str(column.header)).cell_len, 8))
        flexible.append((column, narrowest, widest))
    room = width - fixed - 2 * (len(table.columns) - 1)  # two spaces between columns
    spare = max(0, room - sum(narrowest for _, narrowest, _ in flexible))
    want = [widest - narrowest for _, narrowest, widest in flexible]
    give = [0] * len(want)
    order = sorted(range(len(want)), key=lambda i: want[i])
    for n, i in enumerate(order):  # fair shares, the columns that want least served first
        give[i] = min(want[i], spare // (len(order) - n))
        spare -= give[i]
    for (column, narrowest, _), extra in zip(flexible, give, strict=True):
        column.width = narrowest + extra
    return table
