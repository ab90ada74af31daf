"""Blob stores' error texts carry no query string (review-at AT5).

A GCS resumable upload's session URI (``upload_id=``) lets anyone write to the bucket for a
week; urllib3 names it without scheme and host ("Max retries exceeded with url:
/upload/...?uploadType=resumable&upload_id=..."), and that text went into the error, the
trial's output log and the job's error. Azure's texts are held to the same (a SAS)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

SESSION = "SESSIONSECRET0042"
URLLIB3 = (
    "HTTPConnectionPool(host='127.0.0.1', port=1): Max retries exceeded with url: "
    f"/upload/storage/v1/b/bkt/o?uploadType=resumable&upload_id={SESSION} (Caused by "
    "NewConnectionError('refused'))"
)


def test_gcs_reason_drops_scheme_less_query_strings() -> None:
    from google.api_core.exceptions import RetryError
    from requests.exceptions import ConnectionError as RequestsConnectionError

    from spotwise.providers.gcs_blobs import reason

    text = reason(RequestsConnectionError(URLLIB3))
    assert SESSION not in text and "upload_id" not in text
    assert text.startswith("HTTPConnectionPool(host='127.0.0.1', port=1): Max retries exceeded")
    assert "with url: /upload/storage/v1/b/bkt/o (Caused by" in text
    retried = reason(RetryError("gave up", RequestsConnectionError(URLLIB3)))
    assert retried.startswith("gave up retrying: ") and SESSION not in retried
    # a question in prose is left alone
    assert reason(ValueError("is it there? no")) == "is it there? no"


class _SessionOnUnreachableHost(BaseHTTPRequestHandler):
    """A fake GCS that opens a resumable session on a host that cannot be reached."""

    def log_message(self, *_args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header(
            "Location",
            "http://127.0.0.1:1/upload/storage/v1/b/bkt/o?uploadType=resumable"
            f"&upload_id={SESSION}",
        )
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_PUT(self) -> None:
        self.connection.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def fake_gcs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _SessionOnUnreachableHost)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{srv.server_address[1]}")
    for var in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT"):
        monkeypatch.delenv(var, raising=False)
    yield
    srv.shutdown()
    srv.server_close()


def test_a_failed_resumable_upload_names_no_session_id(fake_gcs: None) -> None:
    from spotwise.errors import TransientError
    from spotwise.providers.gcs_blobs import GcsBlobs

    assert os.environ["STORAGE_EMULATOR_HOST"]
    blobs = GcsBlobs("bkt", "p/j-1/t-1", retry_s=0)
    with pytest.raises(TransientError) as err:
        blobs.put("ckpt-00000001.pt", b"x" * (9 * 1024 * 1024))  # over 8 MiB: resumable
    text = f"{err.value.message} {err.value.hint}"
    assert "writing ckpt-00000001.pt failed (ConnectionError:" in text
    assert SESSION not in text and "upload_id" not in text


def test_azure_first_line_drops_scheme_less_query_strings() -> None:
    from spotwise.providers.azure_blobs import _first_line

    class Err(Exception):
        message = (
            "HTTPSConnectionPool(host='a.blob.core.windows.net', port=443): Max retries "
            "exceeded with url: /c/ckpt?comp=block&sv=2024&sig=SASSECRET (Caused by x)\nmore"
        )

    line = _first_line(Err())
    assert "SASSECRET" not in line and "sig=" not in line
    assert line.endswith("with url: /c/ckpt (Caused by x)")
    full = Err()
    # a SAS's expiry holds ':' (se=2024-01-01T00:00:00Z): the query runs to the next space
    full.message = "GET https://a.blob.core.windows.net/c?se=2024-01-01T00:00:00Z&sig=S2 boom"
    assert _first_line(full) == "GET https://a.blob.core.windows.net/c boom"
