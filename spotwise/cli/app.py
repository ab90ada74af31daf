"""The ``spotwise`` command. Each command parses, calls one core function, renders.

Heavy libraries are imported inside the commands so ``spotwise --help`` stays fast.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from spotwise.cli import cloud, curve, jobs, output, predictor, report, simulate
from spotwise.errors import SpotwiseError

#: A bug in spotwise (an exception it did not expect): sysexits' EX_SOFTWARE. Never 1, which
#: `report --check` gives for "an instance is held" and `tune`/`cancel` for "something may
#: still be billed": a cron must tell a bug from a held instance.
EXIT_INTERNAL = 70
#: The reader of stdout went away before the output was written (`spotwise report | head`):
#: 128 + SIGPIPE, as a shell reports a command a broken pipe killed. Click exits 1 there, which
#: `report --check` gives for "an instance is held" (review-ax AX3).
EXIT_BROKEN_PIPE = 141

app = typer.Typer(
    name="spotwise",
    help="Run ML training and hyper-parameter tuning on spot capacity at the lowest honest "
    "cost.\n\n"
    "Exit code 70 from any command is an internal error: a bug in spotwise, never a result "
    "(rerun with SPOTWISE_DEBUG=1 for the traceback and report it); its other codes are "
    "results, listed in its --help and the README's command table.\n\n"
    "Examples:\n"
    "  spotwise tune examples/digits/job.yaml   # start here\n"
    "  spotwise status\n"
    "  spotwise report --since 7d",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"spotwise {version('spotwise')}")
        except PackageNotFoundError:  # a source tree that is not installed
            from spotwise import __version__

            typer.echo(f"spotwise {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    pass


jobs.register(app)
app.add_typer(predictor.app, name="predictor")
app.add_typer(curve.app, name="curve")
app.add_typer(simulate.app, name="simulate")
cloud.register(app)  # check / catalog / prices
report.register(app)  # report


#: What a glyph the output's encoding lacks is written as (a cron under a C or latin-1 locale)
_ASCII = {"…": "...", "—": "-", "–": "-", "·": ".", "→": "->", "←": "<-", "×": "x", "≈": "~"}


def _ascii_stand_in(err: UnicodeError) -> tuple[str, int]:
    if not isinstance(err, UnicodeEncodeError):
        raise err
    bad = err.object[err.start : err.end]
    return "".join(_ASCII.get(c, "?") for c in bad), err.end


def _tolerant_output() -> None:
    """stdout and stderr write a stand-in for what their encoding cannot (review-af F11: the
    text report died on '…' with "internal error", exit 1, under a latin-1 locale)."""
    import codecs

    codecs.register_error("spotwise-ascii", _ascii_stand_in)
    for stream in (sys.stdout, sys.stderr):
        encoding = str(getattr(stream, "encoding", "") or "").lower()
        if not encoding.startswith("utf") and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="spotwise-ascii")


def _traceback_then_exit(code: int) -> None:
    """SPOTWISE_DEBUG=1: the whole traceback on stderr, and the exit code the error has without
    it (review-aj F1: a re-raise exited 1, so a bug and `report --check`'s "no database" read as
    "an instance is held")."""
    import traceback

    traceback.print_exc()
    sys.exit(code)


def _stdout_file() -> tuple[int, int] | None:
    """The file descriptor 1 writes to (device, inode), None when there is none."""
    try:
        st = os.fstat(1)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _stdout_broke(before: tuple[int, int] | None) -> bool:
    """Whether an exit 1 was a broken pipe on stdout, not a result: typer and click then swap
    in a pacifying wrapper (so the interpreter's last flush is silent), and rich points
    descriptor 1 at /dev/null (``Console.on_broken_pipe``); each then exits 1."""
    return type(sys.stdout).__name__.endswith("PacifyFlushWrapper") or (
        before is not None and _stdout_file() != before
    )


def main() -> None:
    """Entry point: one line per error (full traceback with SPOTWISE_DEBUG=1)."""
    _tolerant_output()
    stdout = _stdout_file()
    try:
        app()
    except SystemExit as e:
        if e.code == 1 and _stdout_broke(stdout) and not output.outcome_kept:
            sys.exit(EXIT_BROKEN_PIPE)
        raise
    except SpotwiseError as e:
        if os.environ.get("SPOTWISE_DEBUG") == "1":
            _traceback_then_exit(e.exit_code)
        from rich.console import Console
        from rich.markup import escape

        err = Console(stderr=True, highlight=False, soft_wrap=True)
        err.print(f"[bold red]error:[/] {escape(e.message)}")
        if e.hint:
            err.print(f"[dim]hint:[/] {escape(e.hint)}")
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:  # a bug: still one line, the traceback on request
        if os.environ.get("SPOTWISE_DEBUG") == "1":
            _traceback_then_exit(EXIT_INTERNAL)
        from rich.console import Console
        from rich.markup import escape

        err = Console(stderr=True, highlight=False, soft_wrap=True)
        err.print(f"[bold red]error:[/] internal error: {escape(f'{type(e).__name__}: {e}')}")
        err.print(
            "[dim]hint:[/] this is a bug in spotwise: rerun with SPOTWISE_DEBUG=1 for the "
            "traceback and report it"
        )
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":
    main()
