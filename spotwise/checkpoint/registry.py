"""Open a trial's checkpoint store from its location: storage backends registered by URI scheme.

``file://`` URIs and plain paths open a :class:`~spotwise.checkpoint.local.LocalCheckpointStore`,
``s3://bucket/prefix`` an :class:`~spotwise.checkpoint.s3.S3CheckpointStore`, ``gs://bucket/prefix``
a :class:`~spotwise.checkpoint.gcs.GcsCheckpointStore` and ``az://account/container/prefix`` an
:class:`~spotwise.checkpoint.azure_blob.AzureBlobCheckpointStore`. A cloud backend is
added with one factory that imports its module inside the function (the module imports the
cloud SDK lazily in turn), so importing this registry stays cheap — see ``_open_s3`` below.

An unknown scheme raises :class:`~spotwise.errors.SpecError` listing the registered ones; a
registered one without its ``//`` or not in lower case, one naming the URI meant.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

from spotwise.checkpoint.base import CheckpointStore
from spotwise.checkpoint.local import LocalCheckpointStore
from spotwise.errors import ProviderError, SpecError, did_you_mean

StoreFactory = Callable[[str], CheckpointStore]

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_SCHEMES: dict[str, StoreFactory] = {}


def register_scheme(scheme: str, factory: StoreFactory) -> None:
    """Open ``<scheme>://...`` URIs with ``factory(uri)``; registering again replaces it."""
    if not re.fullmatch(r"[a-z][a-z0-9+.-]*", scheme):
        raise ValueError(f"scheme must be lower-case, without '://', got {scheme=}")
    if not callable(factory):
        raise TypeError(f"factory for {scheme!r} must be callable, got {type(factory).__name__}")
    _SCHEMES[scheme] = factory


def registered_schemes() -> list[str]:
    """The registered URI schemes, sorted."""
    return sorted(_SCHEMES)


def open_checkpoint_store(uri: str) -> CheckpointStore:
    """The checkpoint store at ``uri``: a folder path, ``file://...``, or a registered scheme.
    A registered scheme misspelt (``s3:/b/x``, ``S3://b/x``) or a URI that may carry a
    credential is refused in the spec's one line (:func:`check_location`), not opened."""
    if not isinstance(uri, str) or not uri.strip():
        raise SpecError(f"checkpoint location must be a non-empty path or URI, got {uri!r}")
    if (typo := _misspelt(uri)) is not None:  # a hand-set SPOTWISE_CHECKPOINT_URI=s3:/b/x
        _refuse_misspelt(uri, typo)  # as the spec refuses it: never a folder named 's3:'
    m = _SCHEME_RE.match(uri)
    if m is None:
        return LocalCheckpointStore(Path(uri))
    _no_credentials(uri)  # as the spec: a store's own refusal would echo a key pair
    scheme = m.group(1).lower()
    factory = _SCHEMES.get(scheme)
    if factory is None:
        valid = ", ".join(f"{s}://" for s in registered_schemes())
        raise SpecError(
            f"checkpoint location {uri!r}: unknown scheme '{scheme}://'"
            f"{did_you_mean(scheme, registered_schemes())}; valid: {valid} or a plain folder path"
        )
    return factory(uri)


def check_location(uri: str) -> None:
    """Raise :class:`~spotwise.errors.SpecError` (one line, with the fix) when ``uri`` cannot
    name a checkpoint store: an unknown scheme, a ``file://`` URI that names no absolute folder,
    or a cloud URI whose bucket, container or account is malformed; or when it carries what
    may be a credential (``user:key@`` in its authority, a ``?query`` such as a SAS token, a
    ``#fragment``), refused without showing the URI. No I/O and no cloud SDK: a spec is
    checked before anything runs."""
    if not isinstance(uri, str) or not uri.strip():
        raise SpecError(f"checkpoint location must be a non-empty path or URI, got {uri!r}")
    _no_credentials(uri)
    if (typo := _misspelt(uri)) is not None:
        _refuse_misspelt(uri, typo)
    m = _SCHEME_RE.match(uri)
    if m is None:
        return
    scheme = m.group(1).lower()
    if scheme not in _SCHEMES:
        open_checkpoint_store(uri)  # raises the unknown-scheme error
    parse = _PARSERS.get(scheme)
    if parse is None:
        return
    try:
        parse(uri)
    except ProviderError as e:
        raise SpecError(f"checkpoint location: {e.message}", hint=e.hint) from None


# `s3:/bucket/x`, `gs:bucket`, `file:/abs`: a registered scheme without its `//`
_TYPO_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):(?!//)(.*)$", re.DOTALL)
_EXAMPLES = {
    "s3": "s3://BUCKET/PREFIX",
    "gs": "gs://BUCKET/PREFIX",
    "az": "az://ACCOUNT/CONTAINER/PREFIX",
    "file": "file:///abs/path",
}


def _no_credentials(uri: str) -> None:
    """Refuse, without showing it, a location that may carry a credential (a key pair before
    ``@``, a SAS token in a ``?query``)."""
    if not any(c in uri for c in "@?#"):  # none: the check's import (0.2 s) is not paid
        return
    from spotwise.providers.channel import NO_CREDENTIALS_IN_URI, uri_credentials

    if what := uri_credentials(uri):  # never echoed
        raise SpecError(
            f"checkpoint location {what} (not shown: it may be a credential); "
            f"{NO_CREDENTIALS_IN_URI}"
        )


def _misspelt(uri: str) -> tuple[str, str, str | None] | None:
    """A registered scheme without its ``//`` (``s3:/bucket/x``), or a built-in one not in
    lower case (``S3://bucket/x``, ``GS://``: the provisioners, the channel and the parsers of
    s3, az and file read lower case only; a plugin's scheme is matched in any case): the
    refusal, naming the URI meant, that URI, and a hint; None for anything else."""
    if (typo := _scheme_typo(uri)) is not None:
        return typo[0], typo[1], f"for a local folder of that name, write ./{uri.strip()}"
    m = _SCHEME_RE.match(uri.strip())
    written = m.group(1) if m else ""
    if written == written.lower() or written.lower() not in _PARSERS:
        return None
    meant = written.lower() + uri.strip()[len(written) :]
    why = f"checkpoint location {uri!r} has its scheme '{written}:' not in lower case "
    why += f"(did you mean {meant}?)"
    return why, meant, None


def _refuse_misspelt(uri: str, typo: tuple[str, str, str | None]) -> None:
    """The one-line refusal of a misspelt location; a credential in the URI it meant is
    refused first, unshown (the refusal would echo it)."""
    _no_credentials(typo[1])
    raise SpecError(typo[0], hint=typo[2])


def _scheme_typo(uri: str) -> tuple[str, str] | None:
    """For a location that starts with a registered scheme and a colon but no ``//``
    (``s3:/bucket/x``, ``gs:bucket``, ``file:/abs``), which read as a path would be a local
    folder named ``s3:`` (review-ao F3): the refusal, naming the URI meant, and that URI;
    None for anything else. A colon further on (``./runs/a:b``) and ``./s3:/x`` are folders."""
    m = _TYPO_RE.match(uri.strip())
    if m is None or m.group(1).lower() not in _SCHEMES:
        return None
    written, scheme, rest = m.group(1), m.group(1).lower(), m.group(2).lstrip("/")
    repaired = meant = f"{scheme}://{rest}"
    if scheme == "file":  # a file URI names an absolute folder; `file:runs` meant a folder
        meant = f"file:///{rest}" if m.group(2).startswith("/") else rest
    if not rest:
        meant = _EXAMPLES.get(scheme, f"{scheme}://...")
    why = f"checkpoint location {uri!r} has no '//' after '{written}:' (did you mean {meant}?)"
    return why, repaired


_FILE_FIX = "use a folder path (relative to the spec, e.g. checkpoints) or file:///abs/path"
_S3_URI_HINT = "use s3://BUCKET or s3://BUCKET/PREFIX, e.g. s3://my-bucket/checkpoints"
_S3_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")
_S3_BUCKET_RULE = (
    "use 3-63 lowercase letters, digits, '.' or '-', starting and ending with a letter or digit"
)


def _parse_file(uri: str) -> object:
    """``file:///abs/path`` or ``file://localhost/abs/path``; ``file://`` alone or
    ``file://dir/sub`` (a host, not a folder) would become a folder named ``file:`` or a path
    relative to wherever the trial runs."""
    parts = urlsplit(uri.strip())
    if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
        raise ProviderError(f"{uri!r} is not a file URI of an absolute folder; {_FILE_FIX}")
    return Path(unquote(parts.path))


def _parse_s3(uri: str) -> object:
    from spotwise.providers.aws import parse_s3_uri  # pure: boto3 is not imported

    m = re.match(r"^s3:/{1,2}([^/]*)", uri.strip())
    bucket = m.group(1) if m else ""
    if m is not None and not bucket:
        raise ProviderError(f"aws: {uri!r} names no bucket", hint=_S3_URI_HINT)
    if m is not None and not _S3_BUCKET_RE.fullmatch(bucket):
        raise ProviderError(
            f"aws: {uri!r} has an invalid S3 bucket name {bucket!r}: {_S3_BUCKET_RULE}",
            hint=_S3_URI_HINT,
        )
    return parse_s3_uri(uri)


def _parse_gs(uri: str) -> object:
    from spotwise.providers.gcs_blobs import parse_gs_uri

    return parse_gs_uri(uri)


def _parse_az(uri: str) -> object:
    from spotwise.providers.azure_blobs import parse_az_uri

    return parse_az_uri(uri)


_PARSERS: dict[str, Callable[[str], object]] = {
    "file": _parse_file,
    "s3": _parse_s3,
    "gs": _parse_gs,
    "az": _parse_az,
}


def _open_file(uri: str) -> CheckpointStore:
    """``file:///abs/path`` (or ``file://localhost/abs/path``) → a local folder."""
    parts = urlsplit(uri)
    if parts.netloc not in ("", "localhost"):
        # file://relative/dir is not a valid file URI; read it as the relative path it names
        return LocalCheckpointStore(Path(unquote(parts.netloc + parts.path)))
    if not parts.path:
        raise SpecError(f"checkpoint location {uri!r} names no folder; use file:///abs/path")
    return LocalCheckpointStore(Path(unquote(parts.path)))


def _open_s3(uri: str) -> CheckpointStore:
    from spotwise.checkpoint.s3 import open_s3_store  # boto3 loads only when S3 is used

    return open_s3_store(uri)


def _open_gs(uri: str) -> CheckpointStore:
    from spotwise.checkpoint.gcs import open_gcs_store  # google-cloud-storage loads only when used

    return open_gcs_store(uri)


def _open_az(uri: str) -> CheckpointStore:
    from spotwise.checkpoint.azure_blob import open_azure_blob_store  # azure-storage-blob: same

    return open_azure_blob_store(uri)


register_scheme("file", _open_file)
register_scheme("s3", _open_s3)
register_scheme("gs", _open_gs)
register_scheme("az", _open_az)
