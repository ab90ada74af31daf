"""Defer the two rich modules that typer's help formatter imports but spotwise never uses.

``typer.rich_utils`` (loaded for every ``--help`` and every usage error) imports
``rich.markdown`` (which pulls in markdown-it: ~70 ms here) and ``rich.traceback`` (~30 ms) at
its top. spotwise renders help in ``rich_markup_mode="rich"`` (never markdown) and turns
typer's pretty exceptions off, so neither is used on those paths: a third of ``spotwise
--help``'s time went to them.

``install()`` puts a stand-in module for each in ``sys.modules`` (only where the real one is
not loaded yet). A stand-in loads the real module the first time anything is asked of it:
a name of the module other than a dunder, or any use of the class it names (calling it, a
class attribute such as ``Traceback.from_exception``, ``isinstance``/``issubclass``, a class
derived from it, which derives from the real class). After that load the real module is in
``sys.modules`` and on the ``rich`` package, so later imports get it directly. A dunder of the
stand-in module (``__file__``, ``__path__``: what tools that walk ``sys.modules`` ask) is
answered as a module without it answers, without loading. What still tells a stand-in from the
real class: ``type(obj) is StandIn`` (use isinstance) and pickling the stand-in class itself.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

# module name -> the class ``typer.rich_utils`` imports from it by name
DEFERRED = {"rich.markdown": "Markdown", "rich.traceback": "Traceback"}


class _Forwarding(type):
    """Metaclass of a stand-in class: every use goes to the real class, loaded on demand."""

    _module_name: str
    _class_name: str

    def __new__(mcls, name: str, bases: tuple[type, ...], ns: dict[str, Any], **kw: Any) -> Any:
        """A stand-in (no bases), or a class derived from one: made from the real class, so
        that ``class M(Markdown)`` is a Markdown whose methods are its own."""
        if not any(isinstance(b, _Forwarding) for b in bases):
            return super().__new__(mcls, name, bases, ns, **kw)
        real = tuple(b._real_class() if isinstance(b, _Forwarding) else b for b in bases)
        return types.new_class(name, real, kw, lambda body: body.update(ns))

    def _real_class(cls) -> Any:
        return getattr(_load(cls._module_name), cls._class_name)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls._real_class()(*args, **kwargs)

    def __getattr__(cls, name: str) -> Any:
        return getattr(cls._real_class(), name)

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls._real_class())

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, cls._real_class())


class _DeferredModule(types.ModuleType):
    """Stand-in module: its class is a forwarding stand-in; any other name loads the real one."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__") and name != "__all__":
            # the import system asks __path__ on every `from ... import`; tools walking
            # sys.modules ask __file__: answered as by a module without it, nothing loaded (a
            # load in their loop would change sys.modules under it)
            raise AttributeError(name)
        return getattr(_load(self.__name__), name)


def _load(name: str) -> types.ModuleType:
    current = sys.modules.get(name)
    if current is not None and not isinstance(current, _DeferredModule):
        return current
    sys.modules.pop(name, None)
    module = importlib.import_module(name)  # also sets it on the parent package
    parent, _, child = name.rpartition(".")
    setattr(sys.modules[parent], child, module)
    return module


def install() -> None:
    """Put a stand-in for each deferred module not loaded yet (idempotent)."""
    import rich

    for name, class_name in DEFERRED.items():
        if name in sys.modules:
            continue
        module = _DeferredModule(name)
        stand_in = _Forwarding(class_name, (), {"_module_name": name, "_class_name": class_name})
        setattr(module, class_name, stand_in)
        sys.modules[name] = module
        setattr(rich, name.rpartition(".")[2], module)
