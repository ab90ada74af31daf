"""What the commands print: one JSON document with ``--json``, else a rich rendering.

rich is imported inside the functions, like every rendering import of the CLI.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import typer


def emit(result: Any, as_json: bool, render: Callable[[Any], object]) -> None:
    """Print ``result`` as one JSON document with ``--json``, else ``render(result)``."""
    if as_json:
        typer.echo(json.dumps(result))
    else:
        render(result)


def print_table(
    title: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    left: Collection[str],
) -> None:
    """A titled table: the ``left`` columns (names) left-aligned, the others (numbers) right."""
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    for col in columns:
        t.add_column(col, justify="left" if col in left else "right")
    for row in rows:
        t.add_row(*row)
    Console().print(t)
