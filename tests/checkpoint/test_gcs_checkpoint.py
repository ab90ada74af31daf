"""The GCS checkpoint store and GcsBlobs, with the real google-cloud-storage client on a fake."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("google.cloud.storage", reason="google-cloud-storage is not installed")

from fake_gcs import BUCKET, PREFIX, FakeGcs, fake_client, start_fake

from spotwise.checkpoint import registry
from spotwise.checkpoint.gcs import GcsCheckpointStore, open_gcs_store, register
from spotwise.errors import CheckpointError, ProviderError, ProviderUnavailable
from spotwise.providers import gcs_blobs
from spotwise.providers.blobs import Blobs
from spotwise.providers.gcs_blobs import URI_HINT, GcsBlobs, parse_gs_uri

TOKEN = "ya29.FAKE-SECRET-TOKEN-0123456789"
ROOT = f"gs://{BUCKET}/{PREFIX}"


@pytest.fixture
def fake(request: pytest.FixtureRequest) -> FakeGcs:
    return start_fake(request)


@pytest.fixture
def client(fake: FakeGcs) -> Any:
    return fake_client()


def _store(client: Any, keep: int = 2, **kw: Any) -> GcsCheckpointStore:
    return GcsCheckpointStore(BUCKET, PREFIX, client=client, keep=keep, **kw)


def _put(store: GcsCheckpointStore, step: int, data: bytes | None = None) -> str:
    return store.put(f"ckpt-{step:08d}.pt", data or f"state {step}".encode(), {"step": step})


# -- URIs --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("gs://bucket", ("bucket", "")),
        ("gs://my-bucket/", ("my-bucket", "")),
        ("gs://my-bucket/ckpt/job-1/trial-2/", ("my-bucket", "ckpt/job-1/trial-2")),
        ("  gs://my.bucket_01/x  ", ("my.bucket_01", "x")),
        ("gs:/abc/x/y", ("abc", "x/y")),  # collapsed by pathlib
        ("GS://abc/X", ("abc", "X")),  # the registry matches schemes case-insensitively
        ("gs://" + "a" * 63 + "/p", ("a" * 63, "p")),
    ],
)
def test_parse_gs_uri(uri: str, expected: tuple[str, str]) -> None:
    assert parse_gs_uri(uri) == expected


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("s3://bucket/x", "is not a GCS location"),
        ("gs://", "is not a GCS location"),
        ("gs:///x", "is not a GCS location"),
        ("bucket/x", "is not a GCS location"),
        ("gs://My-Bucket/x", "invalid bucket name 'My-Bucket'"),
        ("gs://ab/x", "invalid bucket name 'ab'"),
        ("gs://-abc/x", "invalid bucket name '-abc'"),
        ("gs://abc-/x", "invalid bucket name 'abc-'"),
        ("gs://a b/x", "invalid bucket name 'a b'"),
        ("gs://" + "a" * 64, "invalid bucket name"),
        ("gs://goog-bucket/x", "invalid bucket name 'goog-bucket'"),
        ("gs://abc/a//b", "empty, '.' or '..' folder"),
        ("gs://abc/a/../b", "empty, '.' or '..' folder"),
    ],
)
def test_bad_gs_uri_is_one_line_with_the_form(uri: str, says: str) -> None:
    with pytest.raises(ProviderError) as err:
        parse_gs_uri(uri)
    msg = err.value.message
    assert says in msg and repr(uri) in msg and "\n" not in msg
    assert err.value.hint == URI_HINT and "gs://BUCKET/PREFIX" in URI_HINT
    if "bucket name" in says:
        assert "lowercase letters, digits" in msg  # names the fix


def test_bad_uri_is_a_checkpoint_error_with_the_hint() -> None:
    with pytest.raises(CheckpointError) as err:
        GcsCheckpointStore.from_uri("gs://Bad_Bucket/x")
    assert err.value.message.startswith("checkpoint location: gcs: 'gs://Bad_Bucket/x'")
    assert err.value.hint == URI_HINT


def test_from_uri_and_locations() -> None:
    store = GcsCheckpointStore.from_uri("gs://bkt/a/b/", keep=3)
    assert (store.uri, store.bucket, store.prefix, store.keep) == ("gs://bkt/a/b", "bkt", "a/b", 3)
    assert store._location("LATEST") == "gs://bkt/a/b/LATEST"
    assert repr(store) == "GcsCheckpointStore('gs://bkt/a/b', keep=3)"
    assert GcsBlobs("bkt").uri == "gs://bkt" and GcsBlobs("bkt").location("x") == "gs://bkt/x"
    assert isinstance(GcsBlobs("bkt"), Blobs)


# -- the store on the fake --------------------------------------------------------------------
def test_put_get_latest_and_retention_leave_exact_objects(fake: FakeGcs, client: Any) -> None:
    store = _store(client)
    assert store.get_latest() is None and store.list() == []
    for step in (5, 10, 15):
        assert _put(store, step) == f"{ROOT}/ckpt-{step:08d}.pt"
    data, manifest = store.get_latest()  # type: ignore[misc]
    assert data == b"state 15" and manifest["step"] == 15 and manifest["size"] == 8
    assert [m["step"] for m in store.list()] == [10, 15]
    assert fake.names(BUCKET) == [
        f"{PREFIX}/LATEST",
        f"{PREFIX}/ckpt-00000010.json",
        f"{PREFIX}/ckpt-00000010.pt",
        f"{PREFIX}/ckpt-00000015.json",
        f"{PREFIX}/ckpt-00000015.pt",
    ]
    latest = fake.get(BUCKET, f"{PREFIX}/LATEST")
    assert latest is not None and latest.data == b"ckpt-00000015.json\n"
    stored = json.loads(fake.get(BUCKET, f"{PREFIX}/ckpt-00000015.json").data)  # type: ignore[union-attr]
    assert stored["file"] == "ckpt-00000015.pt" and stored["size"] == 8
    assert fake.count("POST", r"^/upload/") == 9  # 3 objects per checkpoint, all multipart
    assert fake.count("DELETE", r"/o/") == 2  # step 5's manifest and data


def test_a_corrupt_newest_checkpoint_falls_back(fake: FakeGcs, client: Any) -> None:
    store = _store(client, keep=3)
    _put(store, 1, b"one")
    _put(store, 2, b"two")
    fake.put(BUCKET, f"{PREFIX}/ckpt-00000002.pt", b"tw0")  # same size, other bytes
    data, manifest = _store(client).get_latest()  # type: ignore[misc]
    assert data == b"one" and manifest["step"] == 1
    assert manifest["fallback_from"] == "ckpt-00000002.pt"
    assert "sha256" in manifest["fallback_reason"]
    assert f"{ROOT}/ckpt-00000002.pt" in manifest["fallback_reason"]


def test_only_direct_children_are_the_stores(fake: FakeGcs, client: Any) -> None:
    store = _store(client)
    _put(store, 3, b"x")
    for key in (
        f"{PREFIX}/events-1.jsonl",
        f"{PREFIX}/agent-1.json",
        f"{PREFIX}/nested/ckpt-00000009.json",
        f"{PREFIX}/nested/deeper/ckpt-00000010.json",
        f"{PREFIX}-2/ckpt-00000011.json",
        "ckpt-00000012.json",
    ):
        fake.put(BUCKET, key, b"{}")
    assert [m["step"] for m in store.list()] == [3]
    fake.calls.clear()
    assert store._keys() == [
        "LATEST",
        "agent-1.json",
        "ckpt-00000003.json",
        "ckpt-00000003.pt",
        "events-1.jsonl",
    ]
    # 5 objects + 1 folder, 2 entries a page: the client followed 3 pages
    assert fake.count("GET", r"/b/[^/]+/o$") == len(fake.calls) == 3
    assert all(c.query["prefix"] == f"{PREFIX}/" for c in fake.calls)
    assert all(c.query["delimiter"] == "/" for c in fake.calls)


def test_conditional_get_with_the_generation(fake: FakeGcs, client: Any) -> None:
    blobs = GcsBlobs(BUCKET, PREFIX, client=client)
    assert blobs.get("status.json") == (None, "")
    assert blobs.get("status.json", "123") == (None, "123")  # missing: the token back
    blobs.put("status.json", b'{"a": 1}', "application/json")
    obj = fake.get(BUCKET, f"{PREFIX}/status.json")
    assert obj is not None and obj.content_type == "application/json"
    data, token = blobs.get("status.json")
    assert data == b'{"a": 1}' and token == str(obj.generation)
    assert blobs.get("status.json", token) == (None, token)  # unchanged: 304, no bytes
    assert fake.count("GET", r"^/download/.*status\.json$", status=304) == 1
    fake.put(BUCKET, f"{PREFIX}/status.json", b'{"a": 2}')
    data2, token2 = blobs.get("status.json", token)
    assert data2 == b'{"a": 2}' and int(token2) == obj.generation + 1
    assert blobs.exists("status.json") and not blobs.exists("other.json")
    blobs.delete("status.json")
    blobs.delete("status.json")  # missing: not an error
    assert not blobs.exists("status.json") and blobs.get("status.json", token2) == (None, token2)
    with pytest.raises(ValueError, match="generation number"):
        blobs.get("status.json", '"etag"')
    with pytest.raises(ValueError, match="plain file name"):
        blobs.put("a/b", b"x")


def test_names_pages_and_sorts(fake: FakeGcs, client: Any) -> None:
    blobs = GcsBlobs(BUCKET, "", client=client)
    for key in ("e", "c", "a/x", "d", "b", "a/y"):
        fake.put(BUCKET, key, b"1")
    assert blobs.names() == ["b", "c", "d", "e"]
    assert fake.count("GET", r"/o$") == 3  # 5 entries (a/ is one), 2 a page


def test_downloads_are_checked_against_x_goog_hash(fake: FakeGcs, client: Any) -> None:
    blobs = GcsBlobs(BUCKET, PREFIX, client=client)
    blobs.put("x.bin", b"payload")
    fake.corrupt_downloads = True
    with pytest.raises(ProviderError) as err:
        blobs.get("x.bin")
    assert err.value.message == (
        f"GCS {ROOT}: reading x.bin failed "
        "(DataCorruption: checksum mismatch: the bytes received differ from the bytes GCS holds)"
    )


def test_a_large_checkpoint_goes_resumable_and_round_trips(fake: FakeGcs, client: Any) -> None:
    data = os.urandom(8 * 1024 * 1024 + 1024)  # above the client's 8 MiB multipart limit
    store = _store(client)
    _put(store, 7, data)
    assert fake.count("POST", r"^/upload/") == 3  # data (resumable), manifest, LATEST
    assert sum(c.query.get("uploadType") == "resumable" for c in fake.calls) == 2  # POST + PUT
    assert fake.count("PUT", r"^/upload/", status=200) == 1
    got, manifest = _store(client).get_latest()  # type: ignore[misc]
    assert got == data and manifest["size"] == len(data)


def test_the_fake_answers_chunked_resumable_uploads(fake: FakeGcs, client: Any) -> None:
    data = os.urandom(9 * 1024 * 1024)  # resumable, in 4 MiB chunks: 308, 308, 200
    client.bucket(BUCKET).blob("chunked", chunk_size=4 * 1024 * 1024).upload_from_string(data)
    assert fake.count("PUT", r"^/upload/", status=308) == 2
    assert fake.count("PUT", r"^/upload/", status=200) == 1
    assert fake.get(BUCKET, "chunked").data == data  # type: ignore[union-attr]


# -- failures ---------------------------------------------------------------------------------
def test_missing_bucket_names_the_uri_and_how_to_create_it(fake: FakeGcs, client: Any) -> None:
    store = GcsCheckpointStore.from_uri("gs://no-such-bucket/x")
    store.blobs._client = gcs_blobs.quiet(client)
    with pytest.raises(CheckpointError) as err:
        store.put("ckpt-00000001.pt", b"x", {"step": 1})
    msg = err.value.message
    assert msg.startswith(
        "checkpoint store: GCS gs://no-such-bucket/x: writing ckpt-00000001.pt failed ("
    )
    assert "404 NotFound: The specified bucket does not exist." in msg and "\n" not in msg
    assert err.value.hint == "create it: gcloud storage buckets create gs://no-such-bucket"
    with pytest.raises(CheckpointError, match="listing failed") as err2:
        store.get_latest()
    assert err2.value.hint == err.value.hint


def test_permission_denied_names_the_role(fake: FakeGcs, client: Any) -> None:
    fake.forbidden.add(BUCKET)
    with pytest.raises(CheckpointError) as err:
        _put(_store(client), 1)
    assert "403 Forbidden" in err.value.message and ROOT in err.value.message
    assert "roles/storage.objectAdmin" in str(err.value.hint)
    assert f"gs://{BUCKET}" in str(err.value.hint)
    with pytest.raises(ProviderUnavailable, match="reading LATEST failed"):
        GcsBlobs(BUCKET, PREFIX, client=client).get("LATEST")


def test_server_errors_are_retried_then_reported(
    fake: FakeGcs, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("time.sleep", lambda s: None)  # the client's backoff
    blobs = GcsBlobs(BUCKET, PREFIX, client=client)
    fake.fail_next(503, times=2)
    blobs.put("a", b"x")  # retried past two 503s
    assert fake.count("POST", r"^/upload/", status=503) == 2 and blobs.get("a")[0] == b"x"
    fake.fail_next(500)
    with pytest.raises(ProviderError) as err:
        GcsBlobs(BUCKET, PREFIX, client=client, retry_s=0).names()
    assert err.value.message == (
        f"GCS {ROOT}: listing failed (500 InternalServerError: Backend Error (injected))"
    )
    assert err.value.hint is None


def test_messages_never_carry_the_access_token(fake: FakeGcs) -> None:
    from google.oauth2.credentials import Credentials

    client = fake_client(Credentials(token=TOKEN))  # no refresh token: a 401 cannot refresh
    store = _store(client, retry_s=0)
    _put(store, 1)
    assert fake.calls[-1].authorization == f"Bearer {TOKEN}"  # the token was sent
    errors: dict[str, CheckpointError] = {}
    for failure in ("403", "503", "401", "missing"):
        if failure == "missing":
            store = GcsCheckpointStore("other-bucket", "p", client=client, retry_s=0)
        elif failure == "403":
            fake.forbidden.add(BUCKET)
        else:  # the listing before the write (a failure there is left to the write), the read
            fake.fail_next(int(failure), times=3)  # of step 2's manifest it then tries, the write
        with pytest.raises(CheckpointError) as err:
            _put(store, 2)
        errors[failure] = err.value
        fake.forbidden.clear()
    assert "403 Forbidden" in errors["403"].message
    assert "503 ServiceUnavailable" in errors["503"].message
    assert "RefreshError" in errors["401"].message
    assert errors["401"].hint == "renew the credentials: gcloud auth application-default login"
    assert "404 NotFound" in errors["missing"].message
    texts = [repr(store), repr(store.blobs)]
    texts += [f"{e.message} {e.hint}" for e in errors.values()]
    assert not [t for t in texts if TOKEN in t or "ya29" in t or "Bearer" in t]


def test_programming_errors_are_not_swallowed(client: Any) -> None:
    class Broken:
        def list_blobs(self, *args: Any, **kwargs: Any) -> Any:
            raise KeyError("a bug, not GCS")

    with pytest.raises(KeyError, match="a bug"):
        GcsBlobs(BUCKET, PREFIX, client=Broken()).names()


def test_no_background_bucket_requests(fake: FakeGcs, client: Any) -> None:
    store = _store(client)
    assert client._bucket_metadata_cache is None  # turned off when the store got the client
    _put(store, 1)
    store.blobs.delete("missing")  # a 404: the client would also re-check the bucket
    assert store.get_latest() is not None
    assert fake.count("GET", r"^/storage/v1/b/[^/]+$") == 0  # the 3.17 bucket-metadata fetch


# -- client construction ----------------------------------------------------------------------
def test_no_credentials_is_unavailable_with_the_login_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    def no_adc(*args: Any, **kwargs: Any) -> Any:
        raise DefaultCredentialsError("no ADC here")

    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setattr(google.auth, "default", no_adc)
    with pytest.raises(ProviderUnavailable) as err:
        gcs_blobs.storage_client()
    assert "gcloud auth application-default login" in str(err.value.hint)
    with pytest.raises(CheckpointError) as err2:
        GcsCheckpointStore.from_uri("gs://some-bucket/t").get_latest()
    assert "gs://some-bucket/t" in err2.value.message and "\n" not in err2.value.message
    assert "gcloud auth application-default login" in str(err2.value.hint)


def test_adc_credentials_and_project_are_used(monkeypatch: pytest.MonkeyPatch) -> None:
    import google.auth
    from google.auth.credentials import AnonymousCredentials

    creds = AnonymousCredentials()
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setattr(google.auth, "default", lambda **kw: (creds, "adc-project"))
    client = gcs_blobs.storage_client()
    assert client._credentials is creds and client.project == "adc-project"
    assert gcs_blobs.storage_client("mine").project == "mine"


def test_the_emulator_needs_no_credentials(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    import google.auth

    def no_adc(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("ADC must not be looked up for the emulator")

    monkeypatch.setattr(google.auth, "default", no_adc)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9023")
    fake = start_fake(request, base_url="http://127.0.0.1:9023")
    store = GcsCheckpointStore(BUCKET, PREFIX)
    _put(store, 4, b"four")
    assert store.get_latest()[0] == b"four"  # type: ignore[index]
    assert fake.calls and all(c.authorization == "" for c in fake.calls)


def test_registered_with_the_checkpoint_registry(
    fake: FakeGcs, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry, "_SCHEMES", dict(registry._SCHEMES))
    monkeypatch.setattr(gcs_blobs, "storage_client", lambda project=None: client)
    register()
    register()  # idempotent
    assert "gs" in registry.registered_schemes()
    store = registry.open_checkpoint_store(f"gs://{BUCKET}/reg/t1")
    assert isinstance(store, GcsCheckpointStore) and store.uri == f"gs://{BUCKET}/reg/t1"
    _put(store, 1)  # type: ignore[arg-type]
    assert "reg/t1/LATEST" in fake.names(BUCKET)
    assert isinstance(open_gcs_store(f"gs://{BUCKET}/reg/t1"), GcsCheckpointStore)


def test_importing_the_store_loads_no_google_sdk() -> None:
    code = (
        "import sys, json, spotwise.checkpoint.gcs, spotwise.providers.gcs_blobs; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(("
        "'google.cloud', 'google.auth', 'google.api_core', 'google.oauth2')))))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(res.stdout) == []


def test_a_missing_sdk_is_unavailable_with_the_install_hint() -> None:
    code = (
        "import sys; sys.modules['google.cloud.storage'] = None\n"
        "from spotwise.providers.gcs_blobs import storage_client\n"
        "from spotwise.errors import ProviderUnavailable\n"
        "try:\n    storage_client()\nexcept ProviderUnavailable as e:\n    print(e.hint)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert res.stdout.strip() == "pip install 'spotwise[gcp]'"
