"""The command line (typer + rich). Importing it defers two rich modules typer's help formatter
loads but spotwise never uses (see lazy_rich), before typer is imported by any command module."""

from spotwise.cli import lazy_rich

lazy_rich.install()
