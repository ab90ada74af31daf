"""The S3 checkpoint store on moto: the shared manifest logic over S3 objects."""

from __future__ import annotations

from typing import Any

import pytest

from spotwise.checkpoint.s3 import S3CheckpointStore, open_s3_store, register
from spotwise.errors import CheckpointError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _s3() -> Any:
    import boto3

    return boto3.client("s3", region_name="us-east-1")


def test_put_get_latest_and_retention(bucket: str) -> None:
    store = S3CheckpointStore.from_uri(f"s3://{bucket}/ckpt/job/trial")
    assert store.uri == f"s3://{bucket}/ckpt/job/trial"
    assert store.get_latest() is None and store.list() == []
    for step in (5, 10, 15):
        uri = store.put(f"ckpt-{step:08d}.pt", f"state {step}".encode(), {"step": step})
        assert uri == f"s3://{bucket}/ckpt/job/trial/ckpt-{step:08d}.pt"
    data, manifest = store.get_latest()  # type: ignore[misc]
    assert data == b"state 15" and manifest["step"] == 15
    assert [m["step"] for m in store.list()] == [10, 15]  # keep=2
    keys = {o["Key"] for o in _s3().list_objects_v2(Bucket=bucket, Prefix="ckpt/")["Contents"]}
    assert keys == {
        f"ckpt/job/trial/{k}"
        for k in (
            "ckpt-00000010.pt",
            "ckpt-00000010.json",
            "ckpt-00000015.pt",
            "ckpt-00000015.json",
            "LATEST",
        )
    }


def test_a_corrupt_newest_checkpoint_falls_back(bucket: str) -> None:
    store = S3CheckpointStore(bucket, "p", keep=3)
    store.put("ckpt-00000001.pt", b"one", {"step": 1})
    store.put("ckpt-00000002.pt", b"two", {"step": 2})
    _s3().put_object(Bucket=bucket, Key="p/ckpt-00000002.pt", Body=b"tw0")
    data, manifest = store.get_latest()  # type: ignore[misc]
    assert data == b"one" and manifest["fallback_from"] == "ckpt-00000002.pt"
    assert "sha256" in manifest["fallback_reason"]


def test_only_direct_children_are_the_stores(bucket: str) -> None:
    store = S3CheckpointStore(bucket, "trial")
    store.put("ckpt-00000003.pt", b"x", {"step": 3})
    s3 = _s3()
    s3.put_object(Bucket=bucket, Key="trial/events-1.jsonl", Body=b"{}\n")
    s3.put_object(Bucket=bucket, Key="trial/agent-1.json", Body=b"{}")
    s3.put_object(Bucket=bucket, Key="trial/nested/ckpt-00000009.json", Body=b"{}")
    s3.put_object(Bucket=bucket, Key="trial-2/ckpt-00000009.json", Body=b"{}")
    assert [m["step"] for m in store.list()] == [3]
    assert "events-1.jsonl" in store._keys() and "nested/ckpt-00000009.json" not in store._keys()


def test_missing_bucket_is_a_checkpoint_error_with_a_hint(aws_env: str) -> None:
    store = S3CheckpointStore.from_uri("s3://no-such-bucket-here/x")
    with pytest.raises(CheckpointError, match="NoSuchBucket") as err:
        store.put("ckpt-00000001.pt", b"x", {"step": 1})
    assert err.value.hint == "create it: aws s3 mb s3://no-such-bucket-here"


def test_bad_uri_is_a_checkpoint_error() -> None:
    with pytest.raises(CheckpointError, match="not an S3 location"):
        S3CheckpointStore.from_uri("s3://")


def test_registered_with_the_checkpoint_registry(bucket: str) -> None:
    from spotwise.checkpoint.registry import open_checkpoint_store, registered_schemes

    register()
    assert "s3" in registered_schemes()
    store = open_checkpoint_store(f"s3://{bucket}/reg")
    assert isinstance(store, S3CheckpointStore)
    assert isinstance(open_s3_store(f"s3://{bucket}/reg"), S3CheckpointStore)
