"""Turning a checkpoint's state into bytes and back with torch, safely.

:func:`torch_load` is ``torch.load(weights_only=True)`` whose every failure is one line naming
the file (never torch's advice to load unsafely): an
:class:`~spotwise.checkpoint.base.UnusableCheckpointError` when the file is at fault (a load
falls back from it and sets it aside), a :class:`~spotwise.errors.ConfigError` when this
machine is (out of memory, no such device; the file is left alone for the next attempt).
:func:`check_loadable` refuses at save time what such a load would refuse.
"""

from __future__ import annotations

import collections
import io
import re
from collections.abc import Callable
from typing import Any

from spotwise.checkpoint.base import UnusableCheckpointError
from spotwise.errors import ConfigError

_GLOBAL_RE = re.compile(r"GLOBAL ([\w.]+)")
# a RuntimeError about the machine, not the file: no such device, an accelerator's failure
_DEVICE_RE = re.compile(
    r"deserialize object on|restore data location|\bdevice\b|\bcuda|cudnn|cublas|cusparse|"
    r"\bnccl\b|\bhip\b|\bmps\b|\bxpu\b|\bnpu\b|accelerator",
    re.IGNORECASE,
)
DEVICE_HINT = "pass map_location to sdk.load_checkpoint (the default is 'cpu')"
MEMORY_HINT = (
    "free memory before sdk.load_checkpoint, or load to the CPU (map_location='cpu', the "
    "default) and move the state after; the checkpoint is left as it is"
)


def torch_load(data: bytes, where: str, map_location: Any) -> dict[str, Any]:
    """``torch.load(weights_only=True)`` of one checkpoint's bytes, as a dict.

    A failure of the file (not a torch file, a damaged archive, an unpickling error, objects
    safe loading refuses, not a dict) is a one-line :class:`UnusableCheckpointError` naming
    it, without torch's advice to load unsafely. A failure of this machine (out of memory, a
    device that is missing or failing) is a one-line :class:`ConfigError`, and an exception
    from a ``map_location`` function propagates as it is: the file may be fine."""
    import warnings

    import torch

    if not (
        map_location is None
        or isinstance(map_location, str | torch.device | dict)
        or callable(map_location)
    ):
        raise TypeError(
            "map_location must be a device name ('cpu', 'cuda:0'), a torch.device, a dict or a "
            f"function, got {type(map_location).__name__} {map_location!r}"
        )
    raised: list[BaseException] = []  # by the caller's map_location function, if any
    try:
        with warnings.catch_warnings():  # e.g. "Detected pickle protocol 4": the error says it
            warnings.simplefilter("ignore")
            state = torch.load(
                io.BytesIO(data), map_location=_watch(map_location, raised), weights_only=True
            )
    except MemoryError as e:  # this machine, not the file: no fallback, nothing set aside
        raise _no_memory(e, where) from None
    except Exception as e:
        if raised and e is raised[0]:
            raise
        if isinstance(e, torch.OutOfMemoryError) or (
            isinstance(e, RuntimeError) and "out of memory" in str(e).lower()
        ):
            raise _no_memory(e, where) from None
        accelerator = getattr(torch, "AcceleratorError", ())  # torch >= 2.8
        if isinstance(e, accelerator) or (
            isinstance(e, RuntimeError) and _DEVICE_RE.search(str(e))
        ):
            raise ConfigError(
                f"checkpoint {where} cannot be loaded here: {_first_sentence(str(e))}",
                hint=DEVICE_HINT,
            ) from None
        # anything else is the file's failure: a weights-only unpickler fails on bad bytes
        # with many exception types (KeyError, IndexError, AssertionError, struct.error, ...)
        raise UnusableCheckpointError(f"checkpoint {where} {_load_failure(e, data)}") from None
    if not isinstance(state, dict):
        raise UnusableCheckpointError(
            f"checkpoint {where} holds a {type(state).__name__}, not a dict"
        )
    return state


def _watch(map_location: Any, raised: list[BaseException]) -> Any:
    """``map_location``; a function wrapped to record what it raises (not the file's fault)."""
    if not callable(map_location) or isinstance(map_location, dict):
        return map_location
    user: Callable[[Any, str], Any] = map_location

    def watched(storage: Any, location: str) -> Any:
        try:
            return user(storage, location)
        except BaseException as e:
            raised.append(e)
            raise

    return watched


def _no_memory(e: BaseException, where: str) -> ConfigError:
    detail = _first_sentence(str(e))
    if "memory" not in detail.lower():
        detail = "out of memory" + (f" ({detail})" if detail else "")
    return ConfigError(f"checkpoint {where} cannot be loaded here: {detail}", hint=MEMORY_HINT)


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
MAX_DEPTH = 100  # containers nested deeper than this are refused (a state dict nests a few)
_SAFE_HINT = "store tensors, numbers, str, bytes, None and list/tuple/set/dict of these"


def check_loadable(value: Any, path: str, torch: Any) -> None:
    """Refuse, at save time, anything ``torch.load(weights_only=True)`` would refuse to load,
    and a state that refers to itself or nests deeper than :data:`MAX_DEPTH`: a one-line
    :class:`TypeError` (a :class:`ValueError` for the shape) naming the path in the state."""
    _check(value, path, torch, 0, set(), set())


def _check(value: Any, path: str, torch: Any, depth: int, open_: set[int], done: set[int]) -> None:
    kind = type(value)
    if kind in _LEAVES or kind in (torch.dtype, torch.device, torch.Size):
        return
    if isinstance(value, torch.Tensor):
        if not _plain_tensor(kind, torch):
            raise TypeError(
                f"save_checkpoint: {path} is a {_qualname(kind)}, a tensor subclass that safe "
                "loading (weights_only) refuses; store a plain tensor instead "
                "(t.as_subclass(torch.Tensor); a DTensor: t.full_tensor())"
            )
        return
    if kind not in _MAPPINGS and kind not in _SEQUENCES:
        hint = " (use torch.from_numpy / .item())" if kind.__module__.startswith("numpy") else ""
        raise TypeError(
            f"save_checkpoint: {path} is a {_qualname(kind)}, which safe loading refuses; "
            f"{_SAFE_HINT}{hint}"
        )
    key = id(value)
    if key in open_:
        raise ValueError(
            f"save_checkpoint: {_short(path)} refers back to a container that holds it (a cycle); "
            "a checkpoint's state must be a tree"
        )
    if key in done:  # the same container again (shared, not a cycle): already checked
        return
    if depth >= MAX_DEPTH:
        raise ValueError(
            f"save_checkpoint: {_short(path)} is nested more than {MAX_DEPTH} containers deep; "
            "flatten the state"
        )
    open_.add(key)
    if kind in _MAPPINGS:
        for k, v in value.items():
            _check(k, f"{path} key {k!r}", torch, depth + 1, open_, done)
            _check(v, f"{path}[{k!r}]", torch, depth + 1, open_, done)
    else:
        for i, v in enumerate(value):
            _check(v, f"{path}[{i}]", torch, depth + 1, open_, done)
    open_.discard(key)
    done.add(key)


def _plain_tensor(kind: type, torch: Any) -> bool:
    """Whether safe loading reads back a tensor of this type: ``torch.Tensor`` and
    ``torch.nn.Parameter``, and a subclass of Parameter pickled as one (it loads as a
    Parameter); any other subclass is refused unless every loading process has registered it
    (``torch.serialization.add_safe_globals``), which a save cannot know."""
    parameter = torch.nn.Parameter
    if kind is torch.Tensor or kind is parameter:
        return True
    return issubclass(kind, parameter) and kind.__reduce_ex__ is parameter.__reduce_ex__


def _short(path: str, limit: int = 120) -> str:
    """A path in the state, its middle cut when it is long (a deep one)."""
    return path if len(path) <= limit else f"{path[: limit // 2]}…{path[-limit // 2 :]}"


def _qualname(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"
