"""The end-to-end tests of GCP and Azure use the provider tests' cloud fakes (``cloudfakes``)."""

from __future__ import annotations

import sys
from pathlib import Path

PROVIDER_TESTS = Path(__file__).resolve().parents[1] / "providers"
if str(PROVIDER_TESTS) not in sys.path:
    sys.path.insert(0, str(PROVIDER_TESTS))
