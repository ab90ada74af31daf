"""Option aliases shared by every command (``Annotated`` so each command stays short)."""

from __future__ import annotations

from typing import Annotated

import typer

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
