"""``spotwise simulate``'s option checks, kept out of :mod:`spotwise.cli.simulate` (its
commands): ``--out``/``--plot`` paths, ``--traces`` references, ``--direction``'s spellings
(shared with ``spotwise curve``), options given before the ``deadline`` subcommand."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from spotwise.errors import SpecError


def sim_direction(value: str | None) -> str | None:
    """``simulate --direction``: the spellings ``curve --direction`` takes (maximize/minimize,
    max/min, any case) as the curve pool's ``maximize``/``minimize``; None: infer it."""
    from spotwise.cli.curve import parse_direction

    d = parse_direction(value)
    return None if d is None else {"max": "maximize", "min": "minimize"}[d]


def check_file(path: Path | None, flag: str, example: str) -> None:
    """``--out``/``--plot``: a file in an existing folder, checked before the run (never
    creates folders)."""
    if path is None:
        return
    if path.is_dir():
        raise SpecError(f"{flag} {path}: is a folder; name the file, e.g. {flag} {path / example}")
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise SpecError(f"{flag} {path}: {parent} is a file, not a folder; pick another path")
    if not parent.is_dir():
        raise SpecError(
            f"{flag} {path}: folder {parent} does not exist",
            hint=f"create it first (mkdir -p {parent}), or check the path for a typo",
        )


@contextmanager
def spec_errors(command: str) -> Iterator[None]:
    """A ValueError of the core becomes a one-line SpecError naming the command."""
    try:
        yield
    except ValueError as e:
        raise SpecError(f"{command}: {e}") from None


def load_traces_ref(ref: str, loader: Any) -> Any:
    """``--traces``: ``builtin:NAME`` (the shipped copy) or a path, read by ``loader``."""
    from spotwise.providers.replay import resolve_trace

    try:
        path = resolve_trace(ref)
    except SpecError as e:
        raise SpecError(f"--traces: {e.message.removeprefix('replay.trace: ')}") from None
    return loader(path)


def reject_group_options(ctx: typer.Context) -> None:
    """``simulate --traces T deadline``: the options before the subcommand are simulate's own."""
    import shlex

    given = {
        p.opts[0]: ctx.params[p.name]
        for p in ctx.command.params
        if p.name and getattr(ctx.get_parameter_source(p.name), "name", "") == "COMMANDLINE"
    }
    if not given:
        return
    sub = ctx.invoked_subcommand or ""
    cmd = getattr(ctx.command, "commands", {}).get(sub)
    takes = {o for p in (cmd.params if cmd else []) for o in p.opts}
    moved = [f for f in given if f in takes]
    parts = [f"put {', '.join(moved)} after '{sub}'"] if moved else []
    parts += [f"{f} does not apply to '{sub}'" for f in given if f not in takes]
    raise SpecError(
        f"simulate {sub}: options before '{sub}' belong to simulate: {'; '.join(parts)}",
        hint=" ".join(
            ["spotwise simulate", sub]
            + [f if given[f] is True else f"{f} {shlex.quote(str(given[f]))}" for f in moved]
        ),
    )
