"""review-am F8: `spotwise check` (and every GCP/Azure command) told a user to set the
credential variables they had set. GCP with GOOGLE_APPLICATION_CREDENTIALS set names that file
and what is wrong with it (missing, or not a key), never its contents; Azure with a service
principal in AZURE_* says that credential got no token and what to check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spotwise.errors import ProviderUnavailable
from spotwise.providers import azure, gcp

SECRET = "-----BEGIN PRIVATE KEY-----\nnot-a-real-key-s3cr3t\n-----END PRIVATE KEY-----\n"


@pytest.fixture
def no_adc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No gcloud login, no metadata server: google-auth finds nothing but the variable."""
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)


def _refusal() -> ProviderUnavailable:
    with pytest.raises(ProviderUnavailable) as info:
        gcp.default_credentials()
    return info.value


def test_a_missing_key_file_is_named(
    no_adc: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "nope" / "key.json"
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
    e = _refusal()
    assert (
        e.message == f"gcp: GOOGLE_APPLICATION_CREDENTIALS={path} could not be used (no such file)"
    )
    assert "unset it" in (e.hint or "") and "set GOOGLE_APPLICATION_CREDENTIALS" not in (
        e.hint or ""
    )


def test_a_bad_key_file_is_named_and_its_contents_never_shown(
    no_adc: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    key = tmp_path / "key.json"
    key.write_text(json.dumps({"type": "service_account", "private_key": SECRET,
                               "private_key_id": "k3y1d", "client_email": "a@b.c"}))  # fmt: skip
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    e = _refusal()
    said = f"{e.message} {e.hint}"
    assert e.message.endswith("could not be used (not a key google-auth can use)")
    assert "s3cr3t" not in said and "k3y1d" not in said


def test_without_the_variable_the_old_advice_stays(no_adc: None) -> None:
    e = _refusal()
    assert e.message == "gcp: no Application Default Credentials found"
    assert "GOOGLE_APPLICATION_CREDENTIALS" in (e.hint or "")


class Refused:
    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.exceptions import ClientAuthenticationError

        raise ClientAuthenticationError("AADSTS7000215: Invalid client secret provided.")


def test_an_azure_service_principal_that_gets_no_token_is_not_told_to_set_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET"):
        monkeypatch.setenv(name, f"fake-{name.lower()}")
    res = azure.check(credential=Refused())
    assert not res.usable
    assert res.reason.startswith(
        "EnvironmentCredential (service principal from AZURE_* variables) got no token "
        "(ClientAuthenticationError): check AZURE_TENANT_ID"
    )
    assert "fake-azure_client_secret" not in res.reason and "set AZURE_CLIENT_ID" not in res.reason
