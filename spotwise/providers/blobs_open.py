"""Open the :class:`~spotwise.providers.blobs.Blobs` folder a URI names.

* ``s3://bucket/prefix`` → :class:`~spotwise.providers.s3_blobs.S3Blobs`
* ``gs://bucket/prefix`` → ``spotwise.providers.gcs_blobs.GcsBlobs``
* ``az://account/container/prefix`` → ``spotwise.providers.azure_blobs.AzureBlobs``
* ``file:///abs/path`` or ``/abs/path`` → :class:`~spotwise.providers.file_blobs.FileBlobs`

Each backend module is imported only when its scheme is opened (and imports its cloud SDK only
when it is used), so this module stays cheap to import. Anything else is a
:class:`~spotwise.errors.ProviderError` naming the URI and the valid forms.
"""

from __future__ import annotations

import importlib

from spotwise.errors import ProviderError
from spotwise.providers.blobs import Blobs

FORMS = "s3://bucket/prefix, gs://bucket/prefix, az://account/container/prefix, file:///abs/path"
_BY_SCHEME = {
    "s3": ("spotwise.providers.s3_blobs", "S3Blobs"),
    "gs": ("spotwise.providers.gcs_blobs", "GcsBlobs"),
    "az": ("spotwise.providers.azure_blobs", "AzureBlobs"),
    "file": ("spotwise.providers.file_blobs", "FileBlobs"),
}


def scheme_of(uri: str) -> str:
    """``"gs"`` for ``gs://b/p``; ``"file"`` for an absolute path; ``""`` for anything else."""
    head, sep, _ = uri.partition(":")
    if sep and head.isalnum() and head.lower() in _BY_SCHEME:
        return head.lower()
    return "file" if uri.startswith("/") else ""


CHANNEL_RETRY_S = 10.0  # a trial channel's GCS retries (the client's default: 120 s)
CHANNEL_AZURE_OPTIONS = {"retry_total": 2}  # and Azure's (default: 10 retries, backing off)


def open_blobs(uri: str, *, channel: bool = False) -> Blobs:
    """The folder at ``uri`` (see the module docstring). ``channel``: a trial channel's folder,
    polled every few seconds — a failing call gives up after seconds rather than minutes (the
    next poll tries again), so an agent keeps watching for notices while storage hiccups."""
    scheme = scheme_of(uri.strip()) if isinstance(uri, str) else ""
    if not scheme:
        raise ProviderError(f"{uri!r} is not a storage location spotwise can open; use {FORMS}")
    module, name = _BY_SCHEME[scheme]
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        why = f"{module}.{name} is not available ({e})"
        raise ProviderError(f"cannot open {uri!r}: {why}") from None
    kwargs: dict[str, object] = {}
    if channel and scheme == "gs":
        kwargs["retry_s"] = CHANNEL_RETRY_S
    elif channel and scheme == "az":
        kwargs["client_options"] = dict(CHANNEL_AZURE_OPTIONS)
    blobs: Blobs = cls.from_uri(uri.strip(), **kwargs)
    return blobs
