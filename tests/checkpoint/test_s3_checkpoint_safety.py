"""The S3 checkpoint store on moto, in process: a step saved again survives a failed manifest
PUT, a save succeeds without the right to delete, and a large object goes up as a multipart
upload that is visible only once complete and aborted when it fails. The multipart upload is
:meth:`S3Blobs.put`'s (the checkpoint store uses only S3Blobs' public methods), so every S3
folder (a trial's artifacts and channel too) writes a large object in parts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from spotwise.checkpoint import checkpoint_name
from spotwise.checkpoint.s3 import S3CheckpointStore
from spotwise.errors import CheckpointError, ProviderError
from spotwise.providers import s3_blobs
from spotwise.providers.s3_blobs import S3Blobs

pytest.importorskip("moto")
pytest.importorskip("boto3")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
BUCKET = "ckpt-bucket"


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    import boto3
    from moto import mock_aws

    for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        c = boto3.client("s3", region_name="us-east-1")
        c.create_bucket(Bucket=BUCKET)
        yield c


def _error(code: str, op: str) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": code}}, op)


def _store(client: Any, prefix: str = "job/t1", keep: int = 2) -> S3CheckpointStore:
    return S3CheckpointStore(BUCKET, prefix, client=client, keep=keep)


def _put(store: S3CheckpointStore, step: int, data: bytes) -> str:
    return store.put(checkpoint_name(step), data, {"step": step})


def _keys(client: Any, prefix: str = "job/t1/") -> list[str]:
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return sorted(str(o["Key"])[len(prefix) :] for o in listed)


def test_a_failed_manifest_put_of_a_step_saved_again_keeps_its_checkpoint(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from botocore.exceptions import EndpointConnectionError

    _put(_store(client), 5, b"five, attempt 0")
    real = client.put_object

    def flaky(**kw: Any) -> Any:
        if kw["Key"].endswith(".json"):
            raise EndpointConnectionError(endpoint_url="https://s3")
        return real(**kw)

    monkeypatch.setattr(client, "put_object", flaky)
    with pytest.raises(CheckpointError, match=r"while writing ckpt-00000005\.json"):
        _put(_store(client), 5, b"five, attempt 1")
    monkeypatch.setattr(client, "put_object", real)
    found = _store(client).get_latest()
    assert found is not None and (found[0], found[1]["step"]) == (b"five, attempt 0", 5)
    assert "fallback_from" not in found[1]


def test_a_save_without_the_right_to_delete_succeeds_and_says_so(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def denied(**kw: Any) -> Any:
        raise _error("AccessDenied", "DeleteObject")

    monkeypatch.setattr(client, "delete_object", denied)
    store = _store(client)
    for step in (5, 10, 15):
        assert _put(store, step, f"state {step}".encode()).endswith(checkpoint_name(step))
    problem = store.put_problems["retention"]
    assert "AccessDenied" in problem.message and "s3:DeleteObject" in (problem.hint or "")
    assert _keys(client)[:3] == ["LATEST", "ckpt-00000005.json", "ckpt-00000005.pt"]
    assert client.get_object(Bucket=BUCKET, Key="job/t1/LATEST")["Body"].read() == (
        b"ckpt-00000015.json\n"
    )
    found = _store(client).get_latest()
    assert found is not None and found[1]["step"] == 15


@pytest.fixture
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Multipart above 1000 bytes, in parts of 300 (moto's minimum part size lowered)."""
    monkeypatch.setattr(s3_blobs, "MULTIPART_THRESHOLD", 1000)
    monkeypatch.setattr(s3_blobs, "PART_SIZE", 300)
    monkeypatch.setattr("moto.s3.models.S3_UPLOAD_PART_MIN_SIZE", 100)


def test_a_large_checkpoint_goes_up_in_parts(
    client: Any, small_parts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(client)
    name, key = checkpoint_name(6), f"job/t1/{checkpoint_name(6)}"
    store._write(name, b"left by a killed writer")  # no manifest names it: replaced
    big = bytes(range(256)) * 10  # 2560 bytes: 9 parts of at most 300
    calls: dict[str, list[Any]] = {"put": [], "part": [], "seen": []}
    real_put, real_part = client.put_object, client.upload_part

    def put(**kw: Any) -> Any:
        calls["put"].append(kw["Key"])
        return real_put(**kw)

    def part(**kw: Any) -> Any:
        calls["part"].append((kw["PartNumber"], len(kw["Body"])))
        if kw["PartNumber"] == 3:  # half way: readers still see the old object, whole
            calls["seen"].append(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())
        return real_part(**kw)

    monkeypatch.setattr(client, "put_object", put)
    monkeypatch.setattr(client, "upload_part", part)
    assert _put(store, 6, big) == store._location(name)
    assert sorted(calls["part"]) == [(n, 300) for n in range(1, 9)] + [(9, 160)]
    assert key not in calls["put"]  # the data went up in parts only
    assert calls["seen"] == [b"left by a killed writer"]
    assert client.get_object(Bucket=BUCKET, Key=key)["Body"].read() == big
    found = _store(client).get_latest()
    assert found is not None and found[0] == big and found[1]["size"] == 2560
    assert client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []


def test_a_failed_part_aborts_the_upload_and_keeps_the_old_checkpoint(
    client: Any, small_parts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(client)
    _put(store, 5, b"old five")
    real_part = client.upload_part

    def part(**kw: Any) -> Any:
        if kw["PartNumber"] == 4:
            raise _error("AccessDenied", "UploadPart")
        return real_part(**kw)

    monkeypatch.setattr(client, "upload_part", part)
    with pytest.raises(CheckpointError) as err:
        _put(store, 5, b"x" * 2500)
    assert err.value.message.startswith("checkpoint store: ")
    assert "AccessDenied" in err.value.message and "\n" not in err.value.message
    assert "s3:PutObject" in (err.value.hint or "")  # the same hint as a failed PutObject
    assert client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []  # aborted
    assert _keys(client) == ["LATEST", "ckpt-00000005.json", "ckpt-00000005.pt"]
    found = _store(client).get_latest()
    assert found is not None and found[0] == b"old five"


def test_a_small_checkpoint_is_one_put_object(client: Any, small_parts: None) -> None:
    store = _store(client)
    _put(store, 1, b"y" * 1000)  # at the threshold: one PutObject
    assert client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []
    found = store.get_latest()
    assert found is not None and found[0] == b"y" * 1000


def test_s3_blobs_put_sends_a_large_object_in_parts_for_every_user(
    client: Any, small_parts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The multipart upload lived in the checkpoint store: any other S3 folder (artifacts, the
    trial channel) sent a large object as one PutObject, which stops at 5 GB."""
    blobs = S3Blobs(BUCKET, "runs/j/t", client=client)
    real_put, real_part = client.put_object, client.upload_part
    calls: dict[str, list[Any]] = {"put": [], "part": []}

    def put(**kw: Any) -> Any:
        calls["put"].append(kw["Key"])
        return real_put(**kw)

    def part(**kw: Any) -> Any:
        calls["part"].append(kw["PartNumber"])
        return real_part(**kw)

    monkeypatch.setattr(client, "put_object", put)
    monkeypatch.setattr(client, "upload_part", part)
    big = bytes(range(256)) * 5  # 1280 bytes: parts of 300, 300, 300, 300 and 80
    blobs.put("model.bin", big, content_type="application/x-model")
    assert calls["put"] == [] and sorted(calls["part"]) == [1, 2, 3, 4, 5]
    got = client.get_object(Bucket=BUCKET, Key="runs/j/t/model.bin")
    assert got["Body"].read() == big and got["ContentType"] == "application/x-model"
    assert blobs.get("model.bin")[0] == big
    blobs.put("small.txt", b"z" * 1000)  # at the threshold: one PutObject
    assert calls["put"] == ["runs/j/t/small.txt"] and len(calls["part"]) == 5

    def denied(**kw: Any) -> Any:
        raise _error("AccessDenied", "CreateMultipartUpload")

    monkeypatch.setattr(client, "create_multipart_upload", denied)
    with pytest.raises(ProviderError) as err:
        blobs.put("model.bin", b"w" * 2000)
    assert err.value.message.startswith("aws: ") and "writing model.bin to" in err.value.message
    assert "s3:PutObject" in (err.value.hint or "")  # the same hint as a failed PutObject
    assert client.get_object(Bucket=BUCKET, Key="runs/j/t/model.bin")["Body"].read() == big
