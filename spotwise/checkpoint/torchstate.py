"""Turning a checkpoint's state into bytes and back with torch, safely.

:func:`torch_load` is ``torch.load(weights_only=True)`` whose every failure is a one-line
:class:`~spotwise.errors.CheckpointError` naming the file (never torch's advice to load
unsafely); :func:`check_loadable` refuses at save time what such a load would refuse.
"""

from __future__ import annotations

import collections
import io
import re
from typing import Any

from spotwise.errors import CheckpointError, ConfigError

_GLOBAL_RE = re.compile(r"GLOBAL ([\w.]+)")


def torch_load(data: bytes, where: str, map_location: Any) -> dict[str, Any]:
    """``torch.load(weights_only=True)`` of one checkpoint's bytes, as a dict. Whatever it
    fails with becomes a one-line :class:`CheckpointError` naming the file (which the load
    falls back from), without torch's advice to load unsafely."""
    import warnings

    import torch

    try:
        with warnings.catch_warnings():  # e.g. "Detected pickle protocol 4": the error says it
            warnings.simplefilter("ignore")
            state = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except MemoryError:
        raise
    except Exception as e:  # any failure to read a file is that file's failure
        text = str(e)
        if "deserialize object on" in text:  # this machine, not the file: no fallback
            raise ConfigError(
                f"checkpoint {where} cannot be loaded here: {_first_sentence(text)}",
                hint="pass map_location to sdk.load_checkpoint (the default is 'cpu')",
            ) from None
        raise CheckpointError(f"checkpoint {where} {_load_failure(e, data)}") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {where} holds a {type(state).__name__}, not a dict")
    return state


def _load_failure(e: Exception, data: bytes) -> str:
    """Why ``torch.load(weights_only=True)`` refused a file, in a few words."""
    if not data:
        return "is empty"
    text = str(e)
    found = _GLOBAL_RE.search(text)
    if found:
        return (
            f"holds objects that safe loading (weights_only) refuses: {found.group(1)}; "
            "save only tensors, numbers, strings and lists/dicts of them"
        )
    detail = _first_sentence(text) if isinstance(e, RuntimeError) else ""
    if "weights_only" in detail or "weights only" in detail.lower():
        detail = ""
    return "is not a file torch.save wrote, or it is damaged" + (
        f" (torch.load: {detail})" if detail else ""
    )


def _first_sentence(text: str) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line.split(". ")[0].rstrip(".")


_LEAVES = (bool, int, float, complex, str, bytes, type(None))
_MAPPINGS = (dict, collections.OrderedDict, collections.Counter)
_SEQUENCES = (list, tuple, set)


def check_loadable(value: Any, path: str, torch: Any) -> None:
    """Refuse, at save time, anything ``torch.load(weights_only=True)`` would refuse to load."""
    kind = type(value)
    if kind in _LEAVES or isinstance(value, torch.Tensor | torch.dtype | torch.device):
        return
    if kind is torch.Size:
        return
    if kind in _MAPPINGS:
        for k, v in value.items():
            check_loadable(k, f"{path} key {k!r}", torch)
            check_loadable(v, f"{path}[{k!r}]", torch)
        return
    if kind in _SEQUENCES:
        for i, v in enumerate(value):
            check_loadable(v, f"{path}[{i}]", torch)
        return
    hint = " (use torch.from_numpy / .item())" if kind.__module__.startswith("numpy") else ""
    raise TypeError(
        f"save_checkpoint: {path} is a {kind.__module__}.{kind.__qualname__}, which safe loading "
        f"refuses; store tensors, numbers, str, bytes, None and list/tuple/set/dict of these{hint}"
    )
