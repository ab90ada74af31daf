"""The live table's stdout gone while a job runs: a closed terminal (its writes fail with EIO)
or a pipe whose reader left (``tune | tee log``, tee gone with the ssh session: rich points
stdout at /dev/null and exits 1, ``Console.on_broken_pipe``).

Its last picture, drawn as the job ends (after the drain and the job's end are written), ended
`tune` with exit 70 ("internal error", EIO) or 141 (the pipe) where the job's own code was
due: 130 for a cancel, 1 for a failure (review-ba BA1). :func:`drawing` takes the failure of
a picture as stdout gone (pointed at /dev/null: nothing later fails on it); the summary then
ends as a write to a closed pipe does (:func:`raise_if_gone`), which
:func:`~spotwise.cli.output.keep_outcome` turns into the job's code (141 only when it is 0).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from spotwise.cli.output import quiet_stdout

#: Set once a picture could not be written: stdout now goes to /dev/null.
gone = False


@contextmanager
def drawing() -> Iterator[None]:
    """Draw on stdout; a write that fails marks it :data:`gone` instead of raising."""
    global gone
    try:
        yield
    except OSError:  # EIO: the terminal is gone
        quiet_stdout()
    except SystemExit as e:  # rich's Console.on_broken_pipe (stdout is /dev/null already)
        if e.code != 1:
            raise
    else:
        return
    gone = True


def raise_if_gone() -> None:
    """Exit as rich does on a closed pipe (exit 1; :func:`~spotwise.cli.output.keep_outcome`
    keeps a non-zero outcome over it) when an earlier picture found stdout gone."""
    if gone:
        raise SystemExit(1)
