"""Trial folders that answer every call as a 403 would, for tests that a provisioner never
reads what is not its own (another job's VM in the same project or resource group).

Import it as ``forbidden`` (pytest puts this folder on ``sys.path``).
"""

from __future__ import annotations

import pytest

from spotwise.errors import ProviderError
from spotwise.providers import blobs_open
from spotwise.providers.blobs import Blobs


class ForbiddenFolder:
    """A :class:`~spotwise.providers.blobs.Blobs` folder whose every call fails (and is
    recorded in ``calls``)."""

    def __init__(self, uri: str, calls: list[str]) -> None:
        self._uri = uri
        self.calls = calls

    @property
    def uri(self) -> str:
        return self._uri

    def location(self, name: str) -> str:
        return f"{self._uri}/{name}"

    def _deny(self, what: str, name: str) -> ProviderError:
        self.calls.append(f"{what} {self.location(name)}")
        return ProviderError(f"{self.location(name)}: 403 Forbidden")

    def put(self, name: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        raise self._deny("put", name)

    def get(self, name: str, token: str = "") -> tuple[bytes | None, str]:
        raise self._deny("get", name)

    def exists(self, name: str) -> bool:
        raise self._deny("exists", name)

    def names(self) -> list[str]:
        raise self._deny("list", "")

    def delete(self, name: str) -> None:
        raise self._deny("delete", name)


def forbid(monkeypatch: pytest.MonkeyPatch, prefix: str) -> list[str]:
    """From now on every folder whose URI starts with ``prefix`` is a :class:`ForbiddenFolder`;
    returns the list every open of, and call to, such a folder is appended to."""
    calls: list[str] = []
    real = blobs_open.open_blobs

    def open_blobs(uri: str, *, channel: bool = False) -> Blobs:
        if uri.strip().startswith(prefix):
            calls.append(f"open {uri}")
            return ForbiddenFolder(uri.strip(), calls)
        return real(uri, channel=channel)

    monkeypatch.setattr(blobs_open, "open_blobs", open_blobs)
    return calls
