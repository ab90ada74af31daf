"""Cloud SDKs stay inside ``spotwise/providers/``, imported lazily.

* No module outside ``spotwise/providers/`` imports boto3, botocore, google.cloud (or the
  rest of the Google client stack) or azure — at any depth, lazily or not.
* Inside ``spotwise/providers/`` they are imported only inside functions (or under
  ``if TYPE_CHECKING:``), never at module level, so importing a provider module is cheap.
* Importing the CLI (what ``spotwise --help`` does) loads no cloud SDK at all.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "spotwise"
PROVIDERS = PACKAGE / "providers"
SDK_PREFIXES = (
    "boto3",
    "botocore",
    "google.cloud",
    "google.auth",
    "google.api_core",
    "google.oauth2",
    "azure",
)


def _is_sdk(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in SDK_PREFIXES)


def _imports(tree: ast.AST) -> list[tuple[int, str, bool]]:
    """(line, module, at module level) of every import in a module."""
    out: list[tuple[int, str, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                out.extend((child.lineno, a.name, top) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                names = [child.module] + [f"{child.module}.{a.name}" for a in child.names]
                out.extend((child.lineno, n, top) for n in names)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                visit(child, False)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.orelse:
                    visit(ast.Module(body=[stmt], type_ignores=[]), top)
            else:
                visit(child, top)

    visit(tree, True)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _modules() -> list[Path]:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 20, f"expected the spotwise package at {PACKAGE}"
    return files


def test_the_scanner_sees_lazy_and_module_level_imports() -> None:
    tree = ast.parse(
        "import boto3\nfrom azure.identity import X\n"
        "def f():\n    import google.cloud.compute_v1\n"
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import botocore\n"
    )
    found = [(m, top) for _, m, top in _imports(tree) if _is_sdk(m)]
    assert ("boto3", True) in found and ("azure.identity", True) in found
    assert ("google.cloud.compute_v1", False) in found
    assert all(m != "botocore" for m, _ in found)  # TYPE_CHECKING only: never runs


def test_no_module_outside_providers_imports_a_cloud_sdk() -> None:
    bad = []
    for path in _modules():
        if PROVIDERS in path.parents:
            continue
        for line, module, _ in _imports(ast.parse(path.read_text(), str(path))):
            if _is_sdk(module):
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}")
    assert not bad, "cloud SDKs may only be imported in spotwise/providers/:\n" + "\n".join(bad)


def test_providers_import_cloud_sdks_lazily() -> None:
    bad = []
    for path in sorted(PROVIDERS.rglob("*.py")):
        for line, module, top in _imports(ast.parse(path.read_text(), str(path))):
            if top and _is_sdk(module):
                bad.append(
                    f"{path.relative_to(PACKAGE.parent)}:{line} imports {module} at module level"
                )
    assert not bad, "import cloud SDKs inside functions:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "module",
    [
        "spotwise.cli.app",
        "spotwise.providers.aws",
        "spotwise.checkpoint.s3",
        "spotwise.checkpoint.gcs",
        "spotwise.checkpoint.azure_blob",
        "spotwise.checkpoint.registry",
        "spotwise.cloud",
        "spotwise.providers.aws_agent",
        "spotwise.providers.trial_agent",
        "spotwise.providers.blobs_open",
        "spotwise.providers.channel",
        "spotwise.providers.trialfiles",
    ],
)
def test_importing_loads_no_cloud_sdk(module: str) -> None:
    code = (
        f"import sys, json, {module}; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('boto3', 'botocore', 'azure') or m.startswith('google.cloud'))))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(res.stdout) == [], f"importing {module} loaded cloud SDKs"


def test_a_missing_sdk_is_provider_unavailable_with_the_install_hint() -> None:
    code = (
        "import sys; sys.modules['boto3'] = None\n"
        "from spotwise.providers import aws\n"
        "from spotwise.errors import ProviderUnavailable\n"
        "try:\n    aws.sdk()\nexcept ProviderUnavailable as e:\n    print(e.hint)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert res.stdout.strip() == "pip install 'spotwise[aws]'"
