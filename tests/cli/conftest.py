"""Tests here run offline: no cloud storage is reached outside a fake.

`spotwise cancel` of a dead cloud job reads each open trial's events from its artifacts folder
(s24 helper K); a test's job whose checkpoint location names a real scheme (``s3://bucket/...``)
with no fake behind it would otherwise try the real cloud, its SDK looking for credentials on
the machine (an instance metadata service, a profile). Such a folder is refused here as an
unreadable one (the cancel says so and goes on); a ``file://`` folder is opened as it is, and a
test that wants another answer patches ``open_artifacts`` itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from spotwise.errors import ProviderError
from spotwise.providers import channel
from spotwise.providers.blobs_open import scheme_of


@pytest.fixture(autouse=True)
def _no_real_cloud_storage(monkeypatch: pytest.MonkeyPatch) -> None:
    real = channel.open_artifacts

    def offline(uri: str, options: Mapping[str, str], region: str = "") -> Any:
        if scheme_of(uri.strip()) in ("", "file"):
            return real(uri, options, region)
        raise ProviderError(f"{uri}: no cloud storage in the tests (tests/cli/conftest.py)")

    monkeypatch.setattr(channel, "open_artifacts", offline)
