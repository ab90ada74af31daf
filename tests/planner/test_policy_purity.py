"""The policy is pure: its modules import nothing that does I/O, keeps time or prints.

Every import in ``spotwise/planner/policy.py`` and ``spotwise/planner/policies/*.py`` is
checked — at module level and inside functions — and so are the module-level imports of the
spotwise modules they pull in (transitively).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "spotwise"
POLICY_FILES = [
    PACKAGE / "planner" / "policy.py",
    *sorted((PACKAGE / "planner" / "policies").glob("*.py")),
]

FORBIDDEN = (
    "os",
    "sys",
    "io",
    "pathlib",
    "shutil",
    "tempfile",
    "glob",
    "fileinput",
    "subprocess",
    "socket",
    "ssl",
    "select",
    "selectors",
    "asyncio",
    "threading",
    "multiprocessing",
    "concurrent",
    "signal",
    "sqlite3",
    "sqlalchemy",
    "sqlmodel",
    "alembic",
    "requests",
    "urllib",
    "http",
    "httpx",
    "boto3",
    "botocore",
    "google",
    "azure",
    "time",
    "datetime",
    "logging",
    "rich",
    "typer",
    "click",
    "pickle",
    "shelve",
    "builtins",
    "platformdirs",
    "torch",
    "spotwise.store",
    "spotwise.cli",
    "spotwise.sdk",
    "spotwise.checkpoint",
    "spotwise.traces",
    "spotwise.cloud",
    "spotwise.providers.aws",
    "spotwise.providers.gcp",
    "spotwise.providers.azure",
    "spotwise.providers.local",
    "spotwise.providers.replay",
    "spotwise.providers.registry",
    "spotwise.planner.orchestrator",
    "spotwise.planner.actions",
    "spotwise.planner.ledger",
    "spotwise.planner.trialbook",
    "spotwise.planner.backend",
    "spotwise.planner.simulator",
    "spotwise.planner.search",
    "spotwise.planner.job_summary",
    "spotwise.planner.checkpoint_probe",
    "spotwise.planner.reconcile",
    "spotwise.planner.launch_cleanup",
    "spotwise.planner.runstate",
    "spotwise.planner.preflight",
    "spotwise.planner.resume",
    "spotwise.planner.launch_retry",
)
# lazily imported, pure computation by contract (EarlyCurve's fitting functions)
LAZY_ALLOWED = ("spotwise.predictors.earlycurve",)


def _forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def _imports(path: Path, *, top_only: bool) -> list[tuple[int, str, bool]]:
    tree = ast.parse(path.read_text(), str(path))
    out: list[tuple[int, str, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                out.extend((child.lineno, a.name, top) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                out.append((child.lineno, child.module, top))
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                visit(child, False)
            elif isinstance(child, ast.If) and getattr(child.test, "id", None) == "TYPE_CHECKING":
                continue  # annotations only
            else:
                visit(child, top)

    visit(tree, True)
    return [i for i in out if i[2] or not top_only]


def _module_file(module: str) -> Path | None:
    rel = Path(*module.split("."))
    for cand in (PACKAGE.parent / rel.with_suffix(".py"), PACKAGE.parent / rel / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def test_policy_files_are_found() -> None:
    names = {p.name for p in POLICY_FILES}
    assert {"policy.py", "greedy.py", "asha.py", "spottune.py", "ours.py", "deadline.py"} <= names


@pytest.mark.parametrize("path", POLICY_FILES, ids=lambda p: p.name)
def test_policy_module_imports_no_io(path: Path) -> None:
    bad = [
        f"{path.name}:{line} imports {mod}"
        for line, mod, _ in _imports(path, top_only=False)
        if _forbidden(mod)
    ]
    assert not bad, "a policy module must stay pure:\n" + "\n".join(bad)


def test_what_policies_pull_in_is_pure_too() -> None:
    seen: set[str] = set()
    todo = [(p, False) for p in POLICY_FILES]
    bad: list[str] = []
    while todo:
        path, top_only = todo.pop()
        for line, mod, top in _imports(path, top_only=top_only):
            if mod in LAZY_ALLOWED and not top:
                continue
            if _forbidden(mod):
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {mod}")
            if mod.startswith("spotwise") and mod not in seen:
                seen.add(mod)
                f = _module_file(mod)
                if f is not None:
                    todo.append((f, True))
    assert not bad, "\n".join(bad)


def test_scanner_catches_a_bad_import(tmp_path: Path) -> None:
    f = tmp_path / "bad.py"
    f.write_text("import numpy\n\ndef f():\n    from pathlib import Path\n    import time\n")
    found = [m for _, m, _ in _imports(f, top_only=False) if _forbidden(m)]
    assert found == ["pathlib", "time"]
