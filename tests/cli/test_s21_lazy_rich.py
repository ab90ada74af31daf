"""`spotwise --help` no longer loads rich.markdown (markdown-it) or rich.traceback, which typer's
help formatter imports but spotwise never uses; the stand-ins load the real modules on any use."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100", "SPOTWISE_HOME": "/nonexistent-spotwise-home"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )


def test_help_and_a_usage_error_load_neither_deferred_module() -> None:
    done = _python(
        """
        import sys
        from spotwise.cli.app import main
        sys.argv = ["spotwise", *sys.argv[1:]]
        try:
            main()
        except SystemExit as e:
            code = e.code
        loaded = sorted(m for m in ("markdown_it", "rich.traceback", "rich.pygments") if
                        m in sys.modules and type(sys.modules[m]).__name__ == "module")
        print("LOADED", loaded, "CODE", code, file=sys.stderr)
        """,
        "tune",
        "--help",
    )
    assert "LOADED [] CODE 0" in done.stderr, done.stderr
    assert "Usage: spotwise tune" in done.stdout
    assert "--dry-run" in done.stdout or "Options" in done.stdout

    typo = _python(
        """
        import sys
        from spotwise.cli.app import main
        sys.argv = ["spotwise", "tnue"]
        try:
            main()
        except SystemExit as e:
            print("CODE", e.code, "MD", "markdown_it" in sys.modules, file=sys.stderr)
        """
    )
    assert "No such command 'tnue'. Did you mean 'tune'?" in typo.stderr
    assert "CODE 2 MD False" in typo.stderr


def test_the_stand_ins_load_the_real_modules_on_any_use() -> None:
    done = _python(
        """
        import io, sys
        import spotwise.cli  # installs the stand-ins
        from rich.markdown import Markdown as StandIn
        from rich.traceback import Traceback as TbStandIn
        assert "markdown_it" not in sys.modules
        from rich.console import Console
        out = io.StringIO()
        md = StandIn("# Title\\n\\nsome *text*")          # calling loads the real class
        Console(file=out, width=40).print(md)
        import rich.markdown as real_md
        assert type(real_md).__name__ == "module", type(real_md)
        assert type(md) is real_md.Markdown
        assert isinstance(md, StandIn) and issubclass(real_md.Markdown, StandIn)
        import rich
        assert rich.markdown is real_md and sys.modules["rich.markdown"] is real_md
        try:
            raise ValueError("boom")
        except ValueError as e:
            tb = TbStandIn.from_exception(type(e), e, e.__traceback__)  # a class attribute
        import rich.traceback as real_tb
        assert type(tb) is real_tb.Traceback
        print("OK", "Title" in out.getvalue(), "text" in out.getvalue())
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "OK True True"


def test_a_module_already_loaded_is_left_as_it_is() -> None:
    done = _python(
        """
        import sys
        import rich.markdown
        real = sys.modules["rich.markdown"]
        import spotwise.cli.app
        from spotwise.cli import lazy_rich
        lazy_rich.install()
        print(sys.modules["rich.markdown"] is real, type(sys.modules["rich.traceback"]).__name__)
        from rich.markdown import Markdown
        print(Markdown is real.Markdown)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "_DeferredModule", "True"]


def test_a_class_derived_from_a_stand_in_is_a_real_subclass_and_walks_load_nothing() -> None:
    """review-ap AP1: `class M(Markdown)` built plain Markdowns (its own methods lost), and a
    walk over sys.modules asking `__file__` loaded the real module mid-loop ("dictionary
    changed size during iteration")."""
    done = _python(
        """
        import sys
        import spotwise.cli  # installs the stand-ins
        files = [getattr(m, "__file__", None) for m in list(sys.modules.values())]
        for name, m in sys.modules.items():  # no load while walking
            getattr(m, "__file__", None)
        assert "markdown_it" not in sys.modules
        from rich.markdown import Markdown

        class Mine(Markdown):
            def extra(self):
                return "mine " + type(self).__name__ + super().__repr__()[:0]

        m = Mine("# hi")
        import rich.markdown as real
        assert isinstance(m, real.Markdown) and isinstance(m, Mine) and m.extra() == "mine Mine"
        assert issubclass(Mine, real.Markdown) and issubclass(Mine, Markdown)
        print("OK")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "OK"
