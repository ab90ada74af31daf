"""Checkpoint storage: one store per trial, atomic manifests, backends registered by URI scheme.

Only the standard library is imported here; cloud backends import their SDKs lazily.
"""

from spotwise.checkpoint.base import (
    DEFAULT_KEEP,
    CheckpointStore,
    ManifestCheckpointStore,
    checkpoint_name,
    manifest_name,
)
from spotwise.checkpoint.local import LocalCheckpointStore
from spotwise.checkpoint.registry import open_checkpoint_store, register_scheme, registered_schemes

__all__ = [
    "DEFAULT_KEEP",
    "CheckpointStore",
    "LocalCheckpointStore",
    "ManifestCheckpointStore",
    "checkpoint_name",
    "manifest_name",
    "open_checkpoint_store",
    "register_scheme",
    "registered_schemes",
]
