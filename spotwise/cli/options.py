"""Option aliases shared by every command (``Annotated`` so each command stays short).

Importing this module also keeps typer's rich help from showing a value placeholder after a
flag (see :func:`_flags_take_no_value`): every command module imports it.
"""

from __future__ import annotations

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
