"""``python -m spotwise``: the ``spotwise`` console script (the same typer app, the same
one-line errors and exit codes), for an environment whose scripts folder is not on PATH."""

from __future__ import annotations

from spotwise.cli.app import main

if __name__ == "__main__":
    main()
