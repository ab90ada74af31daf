"""The Azure Blob checkpoint store on an in-memory Blob service, through the real client."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from typing import Any

import pytest
from fake_azure_blob import (
    ACCOUNT,
    CONTAINER,
    FakeBlobService,
    FakeCredential,
    Seen,
    fake_client,
    start_fake,
)

from spotwise.checkpoint.azure_blob import AzureBlobCheckpointStore, open_azure_blob_store, register
from spotwise.checkpoint.base import CheckpointStore
from spotwise.errors import CheckpointError, ProviderError, ProviderUnavailable
from spotwise.providers import azure_blobs
from spotwise.providers.azure_blobs import AzureBlobs, blob_error, container_client, parse_az_uri
from spotwise.providers.blobs import Blobs

pytest.importorskip(
    "azure.storage.blob", reason="azure-storage-blob is not installed (spotwise[azure])"
)

SECRET = "SeCrEtBeArEr0042NeverPrintMe"
CREATE_HINT = (
    f"create it: az storage container create --account-name {ACCOUNT} --name nocontainer "
    "--auth-mode login"
)


@pytest.fixture
def fake(request: pytest.FixtureRequest) -> FakeBlobService:
    return start_fake(request)


def _store(fake: FakeBlobService, prefix: str = "jobs/j1/trial-3", **kw: Any) -> Any:
    container = kw.pop("container", CONTAINER)
    client = fake_client(fake, container, kw.pop("credential", None))
    return AzureBlobCheckpointStore(fake.account, container, prefix, client=client, **kw)


def _names(fake: FakeBlobService, container: str = CONTAINER) -> set[str]:
    return set(fake.containers[container])


# -- locations ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("uri", "parsed"),
    [
        ("az://acct1/cont", ("acct1", "cont", "")),
        ("az://acct1/cont/", ("acct1", "cont", "")),
        ("az://acct1/my-cont-2/a/b/", ("acct1", "my-cont-2", "a/b")),
        ("az:/acct1/cont/p", ("acct1", "cont", "p")),  # collapsed by pathlib
        (" az://abc/" + "c" * 63 + "/x ", ("abc", "c" * 63, "x")),
    ],
)
def test_parse_good_uris(uri: str, parsed: tuple[str, str, str]) -> None:
    assert parse_az_uri(uri) == parsed


@pytest.mark.parametrize(
    ("uri", "fragment"),
    [
        ("s3://bucket/p", "is not an Azure Blob location"),
        ("az://", "is not an Azure Blob location"),
        ("az://acct1", "is not an Azure Blob location"),
        ("az:///cont/p", "is not an Azure Blob location"),
        ("az://Acct1/cont", "3-24 lowercase letters and digits"),
        ("az://ab/cont", "3-24 lowercase letters and digits"),
        ("az://my_acct/cont", "3-24 lowercase letters and digits"),
        ("az://" + "a" * 25 + "/cont", "3-24 lowercase letters and digits"),
        ("az://acct1/ab", "3-63 lowercase letters, digits and single hyphens"),
        ("az://acct1/-cont", "starting with a letter or digit"),
        ("az://acct1/a--b", "single hyphens"),
        ("az://acct1/cont-", "single hyphens"),
        ("az://acct1/Cont", "3-63 lowercase"),
        ("az://acct1/" + "c" * 64, "3-63 lowercase"),
    ],
)
def test_bad_uris_are_one_line_with_the_form(uri: str, fragment: str) -> None:
    with pytest.raises(ProviderError) as err:
        parse_az_uri(uri)
    msg = str(err.value)
    assert fragment in msg and repr(uri) in msg and "\n" not in msg
    assert err.value.hint == "use az://<account>/<container>[/<prefix>], e.g. " + (
        "az://mystorageacct/checkpoints/job-1"
    )


def test_bad_uri_is_a_checkpoint_error_with_the_hint() -> None:
    with pytest.raises(CheckpointError, match=r"^checkpoint location: azure: 'az://Bad/c1x'"):
        AzureBlobCheckpointStore.from_uri("az://Bad/c1x")
    with pytest.raises(CheckpointError) as err:
        open_azure_blob_store("az://acct1")
    assert err.value.hint is not None and "az://<account>/<container>" in err.value.hint


def test_uri_and_locations() -> None:
    store = AzureBlobCheckpointStore.from_uri("az://acct1/cont/a/b/", keep=3)
    assert store.uri == "az://acct1/cont/a/b" and store.keep == 3
    assert store.blobs.location("x.pt") == "az://acct1/cont/a/b/x.pt"
    assert repr(store) == "AzureBlobCheckpointStore('az://acct1/cont/a/b', keep=3)"
    assert AzureBlobs("acct1", "cont").uri == "az://acct1/cont"
    assert isinstance(store.blobs, Blobs) and isinstance(store, CheckpointStore)


# -- the store ----------------------------------------------------------------------------------
def test_put_get_latest_and_retention(fake: FakeBlobService) -> None:
    store = _store(fake)
    assert store.get_latest() is None and store.list() == []
    for step in (5, 10, 15):
        uri = store.put(f"ckpt-{step:08d}.pt", f"state {step}".encode(), {"step": step})
        assert uri == f"az://{ACCOUNT}/{CONTAINER}/jobs/j1/trial-3/ckpt-{step:08d}.pt"
    data, manifest = store.get_latest()
    assert data == b"state 15" and manifest["step"] == 15 and manifest["size"] == 8
    assert [m["step"] for m in store.list()] == [10, 15]  # keep=2
    assert _names(fake) == {
        "jobs/j1/trial-3/LATEST",
        "jobs/j1/trial-3/ckpt-00000010.json",
        "jobs/j1/trial-3/ckpt-00000010.pt",
        "jobs/j1/trial-3/ckpt-00000015.json",
        "jobs/j1/trial-3/ckpt-00000015.pt",
    }
    assert fake.containers[CONTAINER]["jobs/j1/trial-3/LATEST"].data == b"ckpt-00000015.json\n"
    # five blobs in pages of two: the last listing followed NextMarker twice
    assert fake.listing_pages()[-1] == 3


def test_a_corrupt_newest_checkpoint_falls_back(fake: FakeBlobService) -> None:
    store = _store(fake, "p", keep=3)
    store.put("ckpt-00000001.pt", b"one", {"step": 1})
    store.put("ckpt-00000002.pt", b"two", {"step": 2})
    fake.write(CONTAINER, "p/ckpt-00000002.pt", b"tw0")  # same size, other bytes
    data, manifest = _store(fake, "p").get_latest()
    assert data == b"one" and manifest["step"] == 1
    assert manifest["fallback_from"] == "ckpt-00000002.pt"
    assert "sha256" in manifest["fallback_reason"]
    assert "az://spotwisetest/checkpoints/p/ckpt-00000002.pt" in manifest["fallback_reason"]


def test_only_direct_children_are_the_stores(fake: FakeBlobService) -> None:
    store = _store(fake, "trial")
    store.put("ckpt-00000003.pt", b"x", {"step": 3})
    for name in (
        "trial/events-1.jsonl",
        "trial/agent-1.json",
        "trial/nested/ckpt-00000009.json",
        "trial-2/ckpt-00000009.json",
        "ckpt-00000009.json",
    ):
        fake.write(CONTAINER, name, b"{}")
    assert [m["step"] for m in store.list()] == [3]
    assert store.blobs.names() == [
        "LATEST",
        "agent-1.json",
        "ckpt-00000003.json",
        "ckpt-00000003.pt",
        "events-1.jsonl",
    ]
    for step in (4, 5):
        store.put(f"ckpt-{step:08d}.pt", b"y", {"step": step})
    assert {"trial/events-1.jsonl", "trial/nested/ckpt-00000009.json"} <= _names(fake)
    assert "trial/ckpt-00000003.pt" not in _names(fake)  # retention ran, beside files kept


def test_names_follow_every_page_and_are_sorted(fake: FakeBlobService) -> None:
    blobs = AzureBlobs(ACCOUNT, CONTAINER, "d", client=fake_client(fake))
    for name in ("g", "c", "a", "f", "e", "b", "sub/z", "sub/y"):
        fake.write(CONTAINER, f"d/{name}", b".")
    fake.requests.clear()
    assert blobs.names() == ["a", "b", "c", "e", "f", "g"]
    assert fake.listing_pages() == [4]  # 7 entries (6 blobs + the sub/ prefix), 2 per page
    assert all(s.query["delimiter"] == "/" and s.query["prefix"] == "d/" for s in fake.requests)


def test_conditional_get(fake: FakeBlobService) -> None:
    blobs = AzureBlobs(ACCOUNT, CONTAINER, "chan", client=fake_client(fake))
    blobs.put("progress.json", b'{"step": 1}', "application/json")
    data, token = blobs.get("progress.json")
    assert data == b'{"step": 1}' and token.startswith('"0x')
    assert fake.containers[CONTAINER]["chan/progress.json"].content_type == "application/json"
    assert blobs.get("progress.json", token) == (None, token)
    last = fake.ops("get-blob")[-1]
    assert last.status == 304 and last.headers["if-none-match"] == token
    blobs.put("progress.json", b'{"step": 2}')
    data2, token2 = blobs.get("progress.json", token)
    assert data2 == b'{"step": 2}' and token2 != token
    assert blobs.get("progress.json", token2) == (None, token2)
    assert blobs.get("missing.json", token2) == (None, token2)
    assert blobs.get("missing.json") == (None, "")
    assert blobs.exists("progress.json") and not blobs.exists("missing.json")
    blobs.delete("progress.json")
    blobs.delete("progress.json")  # a missing blob is not an error
    assert not blobs.exists("progress.json")


def test_a_blob_replaced_between_chunks_is_read_again(fake: FakeBlobService) -> None:
    blobs = AzureBlobs(ACCOUNT, CONTAINER, "", client=fake_client(fake))
    old, new = b"o" * 3000, b"n" * 2500
    blobs.put("big.pt", old)

    def replace_once(seen: Seen) -> None:
        if seen.op == "get-blob" and "if-match" in seen.headers:
            fake.hooks.clear()
            fake.write(CONTAINER, "big.pt", new)

    fake.hooks.append(replace_once)
    data, token = blobs.get("big.pt")
    assert data == new and token == fake.containers[CONTAINER]["big.pt"].etag
    assert [s.status for s in fake.ops("get-blob")][:3] == [206, 412, 206]


@pytest.mark.parametrize(
    ("block_size", "blocks"),
    [(512, 20), (4 * 1024 * 1024 + 1, 1)],  # the client's chunked and its sub-stream paths
)
def test_a_big_checkpoint_goes_up_in_blocks_and_comes_back_in_ranges(
    fake: FakeBlobService, block_size: int, blocks: int
) -> None:
    client = fake_client(fake, max_block_size=block_size)
    store = AzureBlobCheckpointStore(ACCOUNT, CONTAINER, "big", client=client)
    payload = bytes(range(256)) * 40  # 10,240 bytes: over max_single_put_size (1,024)
    store.put("ckpt-00000007.pt", payload, {"step": 7})
    assert len(fake.ops("put-block")) == blocks and len(fake.ops("put-block-list")) == 1
    assert not [s for s in fake.ops("put-blob") if s.blob.endswith(".pt")]
    assert fake.containers[CONTAINER]["big/ckpt-00000007.pt"].data == payload
    fake.requests.clear()
    data, manifest = _store(fake, "big").get_latest()
    assert data == payload and manifest["size"] == 10_240
    # the first GET asks for 1,024 bytes, then 18 chunks of 512, each pinned with If-Match
    ranges = [s.headers["x-ms-range"] for s in fake.ops("get-blob") if "if-match" in s.headers]
    assert len(ranges) == 18 and ranges[0] == "bytes=1024-1535"
    assert ranges[-1] == "bytes=9728-10239"


# -- failures -----------------------------------------------------------------------------------
def test_missing_container_names_the_uri_and_how_to_create_it(fake: FakeBlobService) -> None:
    store = _store(fake, "t", container="nocontainer")
    with pytest.raises(CheckpointError) as err:
        store.put("ckpt-00000001.pt", b"x", {"step": 1})
    msg = str(err.value)
    # nothing could be read to say whether step 1 has a checkpoint: its data goes under a
    # content name, which never overwrites bytes a manifest may name
    assert re.match(
        r"checkpoint store: azure: writing az://spotwisetest/nocontainer/t/"
        r"ckpt-00000001-[0-9a-f]{12}\.pt failed: ",
        msg,
    )
    assert "ContainerNotFound (HTTP 404): The specified container does not exist." in msg
    assert "\n" not in msg and "RequestId" not in msg
    assert err.value.hint == CREATE_HINT
    with pytest.raises(
        CheckpointError, match=r"listing az://spotwisetest/nocontainer/t failed"
    ) as err:
        store.get_latest()
    assert err.value.hint == CREATE_HINT
    blobs = AzureBlobs(ACCOUNT, "nocontainer", client=fake_client(fake, "nocontainer"))
    for call in (lambda: blobs.exists("x"), lambda: blobs.delete("x"), lambda: blobs.get("x")):
        with pytest.raises(ProviderError, match="ContainerNotFound") as perr:
            call()
        assert perr.value.hint == CREATE_HINT


def test_permission_denied_names_the_role_and_never_the_token(fake: FakeBlobService) -> None:
    fake.fail(403, "AuthorizationPermissionMismatch")
    store = _store(fake, "t", credential=FakeCredential(SECRET))
    with pytest.raises(CheckpointError) as err:
        store.put("ckpt-00000001.pt", b"x", {"step": 1})
    assert fake.requests[-1].headers["authorization"] == f"Bearer {SECRET}"  # it was sent
    msg = str(err.value)
    assert re.search(
        r"writing az://spotwisetest/checkpoints/t/ckpt-00000001-\w{12}\.pt failed", msg
    )
    assert "AuthorizationPermissionMismatch (HTTP 403)" in msg and "\n" not in msg
    assert err.value.hint == (
        "grant your identity the Storage Blob Data Contributor role on container checkpoints "
        "of storage account spotwisetest"
    )
    shown = (
        f"{msg} {err.value.hint} {err.value!r} {err.value.__cause__!r} {err.value.__context__!r}"
    )
    assert SECRET not in shown and "Bearer" not in shown and "x-ms-" not in shown  # no headers


def test_a_server_error_fails_fast_and_is_not_sticky(fake: FakeBlobService) -> None:
    fake.fail(500, "InternalError", times=1)
    store = _store(fake, "t")
    started = time.monotonic()
    with pytest.raises(
        CheckpointError,
        match=r"listing az://spotwisetest/checkpoints/t failed: InternalError \(HTTP 500\)",
    ):
        store.get_latest()
    assert time.monotonic() - started < 2.0 and len(fake.requests) == 1  # retry_total=0
    assert store.get_latest() is None


def test_an_unreachable_account_is_one_line_with_a_hint(fake: FakeBlobService) -> None:
    other = FakeBlobService(account="otheracct")  # not installed: nothing answers it
    blobs = AzureBlobs("otheracct", CONTAINER, "t", client=fake_client(other))
    with pytest.raises(ProviderError) as err:
        blobs.names()
    assert str(err.value) == (
        "azure: listing az://otheracct/checkpoints/t failed: cannot reach the Blob service "
        "(ServiceRequestError)"
    )
    assert err.value.hint == "check that storage account otheracct exists and is reachable"


def test_no_credential_is_provider_unavailable_with_az_login(fake: FakeBlobService) -> None:
    from azure.core.exceptions import ClientAuthenticationError

    class NoChain:
        def get_token(self, *scopes: str, **kwargs: Any) -> Any:
            raise ClientAuthenticationError(f"DefaultAzureCredential failed\n{SECRET}")

    blobs = AzureBlobs(ACCOUNT, CONTAINER, "t", client=fake_client(fake, credential=NoChain()))
    with pytest.raises(ProviderUnavailable) as err:
        blobs.put("x", b"1")
    assert err.value.hint == "az login" and SECRET not in str(err.value)
    assert "ClientAuthenticationError" in str(err.value) and fake.requests == []
    store = _store(fake, "t", credential=NoChain())
    with pytest.raises(CheckpointError) as cerr:
        store.get_latest()
    assert cerr.value.hint == "az login"


def test_programming_errors_are_not_swallowed(fake: FakeBlobService) -> None:
    class Broken:
        def get_token(self, *scopes: str, **kwargs: Any) -> Any:
            raise RuntimeError("a bug in the credential")

    blobs = AzureBlobs(ACCOUNT, CONTAINER, "t", client=fake_client(fake, credential=Broken()))
    with pytest.raises(RuntimeError, match="a bug"):
        blobs.get("x")
    with pytest.raises(ValueError, match="plain file name"):
        AzureBlobs(ACCOUNT, CONTAINER, client=fake_client(fake)).put("a/b", b"x")


def test_messages_drop_query_strings_and_authorization() -> None:
    from azure.core.exceptions import HttpResponseError

    e = HttpResponseError(
        message=f"GET https://a.blob.core.windows.net/c/x?sv=1&sig={SECRET} Bearer {SECRET}\nmore"
    )
    err = blob_error(e, "acct1", "cont", "az://acct1/cont/x", "reading")
    assert SECRET not in str(err) and "https://a.blob.core.windows.net/c/x" in str(err)
    assert "\n" not in str(err)


# -- clients, endpoints, the registry -----------------------------------------------------------
def test_default_credential_is_the_standard_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPOTWISE_AZURE_BLOB_ENDPOINT", raising=False)
    client = container_client("acct1", "cont")
    assert type(client.credential).__name__ == "BoundedCredential"  # token requests bounded
    assert type(client.credential.credential).__name__ == "DefaultAzureCredential"
    assert client.url == "https://acct1.blob.core.windows.net/cont"


def test_open_checkpoint_store_after_register(
    fake: FakeBlobService, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spotwise.checkpoint import registry
    from spotwise.providers import azure

    monkeypatch.setattr(registry, "_SCHEMES", dict(registry._SCHEMES))
    cred = FakeCredential()
    monkeypatch.setattr(azure, "default_credential", lambda: cred)
    register()
    register()  # idempotent
    assert "az" in registry.registered_schemes()
    store = registry.open_checkpoint_store(f"az://{ACCOUNT}/{CONTAINER}/reg/t1")
    assert isinstance(store, AzureBlobCheckpointStore)
    assert store.uri == f"az://{ACCOUNT}/{CONTAINER}/reg/t1"
    store.put("ckpt-00000001.pt", b"one", {"step": 1})
    assert store.get_latest()[0] == b"one"  # type: ignore[index]
    assert cred.calls >= 1 and "reg/t1/ckpt-00000001.pt" in _names(fake)


def test_http_endpoint_override_signs_with_the_account_key(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = "http://127.0.0.1:10000/devstoreaccount1"
    fake = start_fake(request, account="devstoreaccount1", base_url=base)
    monkeypatch.setenv("SPOTWISE_AZURE_BLOB_ENDPOINT", "http://127.0.0.1:10000/{account}")
    monkeypatch.setenv("AZURE_STORAGE_KEY", "ZmFrZS1henVyaXRlLWtleQ==")
    cred = FakeCredential(SECRET)
    store = AzureBlobCheckpointStore("devstoreaccount1", CONTAINER, "t", credential=cred)
    store.put("ckpt-00000002.pt", b"two", {"step": 2})
    assert store.get_latest()[0] == b"two"  # type: ignore[index]
    assert "t/ckpt-00000002.pt" in _names(fake)
    auth = {s.headers.get("authorization", "").split(":")[0] for s in fake.requests}
    assert auth == {"SharedKey devstoreaccount1"} and cred.calls == 0  # no token over http
    assert all(s.headers.get("x-ms-date") for s in fake.requests)
    monkeypatch.delenv("AZURE_STORAGE_KEY")
    fake.requests.clear()
    assert AzureBlobs("devstoreaccount1", CONTAINER, "t", credential=cred).exists("LATEST")
    assert "authorization" not in fake.requests[-1].headers  # anonymous without a key


def test_https_endpoint_override_uses_the_token(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = start_fake(request, base_url=f"https://{ACCOUNT}.blob.example.test")
    monkeypatch.setenv("SPOTWISE_AZURE_BLOB_ENDPOINT", "https://{account}.blob.example.test/")
    blobs = AzureBlobs(ACCOUNT, CONTAINER, "x", credential=FakeCredential(SECRET))
    blobs.put("a", b"1")
    assert fake.requests[-1].headers["authorization"] == f"Bearer {SECRET}"
    assert "_credential" not in repr(blobs) and blobs._credential is None  # dropped once used


@pytest.mark.parametrize("template", ["http://127.0.0.1:10000/", "ftp://{account}", "{account}"])
def test_a_bad_endpoint_template_is_one_line(
    template: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTWISE_AZURE_BLOB_ENDPOINT", template + "?sig=" + SECRET)
    with pytest.raises(ProviderError, match="SPOTWISE_AZURE_BLOB_ENDPOINT=") as err:
        azure_blobs.account_url("acct1")
    assert SECRET not in str(err.value) and "{account}" in str(err.value.hint)
    store = AzureBlobCheckpointStore("acct1", "cont", credential=FakeCredential())
    with pytest.raises(CheckpointError, match="must be an http"):
        store.get_latest()


def _run(code: str) -> str:
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return res.stdout.strip()


def test_importing_and_opening_loads_no_sdk() -> None:
    out = _run(
        "import sys, json\n"
        "from spotwise.checkpoint.azure_blob import AzureBlobCheckpointStore, register\n"
        "import spotwise.providers.azure_blobs\n"
        "register()\n"
        "from spotwise.checkpoint.registry import open_checkpoint_store\n"
        "s = open_checkpoint_store('az://acct1/cont/p')\n"
        "assert isinstance(s, AzureBlobCheckpointStore), s\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'azure')))\n"
    )
    assert json.loads(out) == []


def test_a_missing_sdk_is_provider_unavailable_with_the_install_hint() -> None:
    out = _run(
        "import sys; sys.modules['azure.storage.blob'] = None\n"
        "from spotwise.providers.azure_blobs import container_client\n"
        "from spotwise.errors import ProviderUnavailable\n"
        "try:\n    container_client('acct1', 'cont', object())\n"
        "except ProviderUnavailable as e:\n    print(e.hint)\n"
    )
    assert out == "pip install 'spotwise[azure]'"
