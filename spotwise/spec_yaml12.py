"""How a job spec's plain scalars are read: YAML 1.2's core schema, not PyYAML's YAML 1.1.

PyYAML's ``SafeLoader`` reads YAML 1.1, where ``deadline_hours: 1:30`` is the base-60 number 90
(a 90-hour deadline), ``NO`` in ``choices: [SE, NO, DK]`` is false, ``steps: 010`` is the octal
8, ``max_cost_usd: on`` is true (a $1 cap) and ``1e-4`` (no dot) is a string (review-ak F3, F4).
A spec is read with the core schema of YAML 1.2 instead (:func:`install_core_schema`):

* null: ``null``, ``Null``, ``NULL``, ``~`` or nothing;
* bool: ``true``/``false`` (also ``True``, ``TRUE``, ...), never yes/no/on/off/y/n;
* int: decimal (``010`` is 10), ``0o17``, ``0x1F``; never base 60, never ``0b``;
* float: with or without a dot, with an exponent (``1e-4``), ``.inf``, ``-.inf``, ``.nan``;
* ``_`` between the digits of a decimal number is kept as YAML 1.1 read it (``1_000`` is
  1000: it means nothing else to anyone), which the core schema leaves a string;
* anything else is a string (``1:30``, ``on``, ``2024-01-01``).

A spec that loaded under YAML 1.1 must not silently mean something else now, with one
exception: :func:`scalar_notes` lists the plain scalars YAML 1.1 read as another bool or number,
and :func:`refuse_changed` refuses the spec when one of them now gives a field another value
(``NO`` in ``choices``: false then, the text "NO" now; ``steps: 010``: 8 then, 10 now).

The exception, kept on purpose (review-al F2): a number YAML 1.1 read as text (``1e-3``, with no
dot; ``1.0e3``, an unsigned exponent; ``0o17``) is that number now, not refused. It changes
meaning only in a ``categorical``'s ``choices``, which take text and numbers alike:
``choices: [1e-3, 3e-4]`` gave the trial the strings "1e-3" and "3e-4" and gives it the floats
0.001 and 0.0003 now. The number is what the user meant, and the text broke trials that used
it as one (review-ak F4: ``weight_decay="1e-4"`` raised inside the trial); quote it
(``"1e-3"``) for the text. Elsewhere it means what it did: a string field refuses the number
(``env: {LR: 1e-4}``: quote it), a number field read the text as the same number
(``low: 1e-4``), a provider option is the same number as text (``"0.001"``), and a policy
option refused the text.
"""

from __future__ import annotations

import re
import typing
from typing import Any

if typing.TYPE_CHECKING:
    import yaml

    from spotwise.spec import JobSpec
    from spotwise.spec_yaml import SpecDocument

Loc = tuple[str | int, ...]

STR = "tag:yaml.org,2002:str"
_NULL, _BOOL = "tag:yaml.org,2002:null", "tag:yaml.org,2002:bool"
_INT, _FLOAT = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_MERGE = "tag:yaml.org,2002:merge"

_CORE: list[tuple[str, str, str]] = [  # (tag, pattern, first characters), tried in this order
    (_NULL, r"^(?:~|null|Null|NULL|)$", "~nN"),
    (_BOOL, r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    (_INT, r"^(?:[-+]?[0-9][0-9_]*|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    (
        _FLOAT,
        r"^(?:[-+]?(?:\.[0-9][0-9_]*|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        "-+.0123456789",
    ),
    (_MERGE, r"^(?:<<)$", "<"),
]


def install_core_schema(cls: type[yaml.SafeLoader]) -> None:
    """Make ``cls`` (a SafeLoader subclass) resolve and build plain scalars as YAML 1.2's core
    schema does (the module docstring)."""
    cls.yaml_implicit_resolvers = {}
    for tag, pattern, first in _CORE:
        regexp = re.compile(pattern)
        cls.add_implicit_resolver(tag, regexp, list(first))
    cls.add_implicit_resolver(_NULL, re.compile(r"^$"), [""])  # an empty value
    cls.add_constructor(_INT, _construct_int)
    cls.add_constructor(_FLOAT, _construct_float)


def core_int(text: str) -> int:
    """A YAML 1.2 core int: decimal (leading zeros too), ``0o`` octal or ``0x`` hex."""
    sign, body = (-1, text[1:]) if text[:1] == "-" else (1, text.lstrip("+"))
    if body[:2] in ("0o", "0x"):
        return sign * int(body[2:], 8 if body[1] == "o" else 16)
    return sign * int(body.replace("_", ""), 10)


def core_float(text: str) -> float:
    low = text.lower()
    if low in (".inf", "+.inf", "-.inf"):
        return float("-inf") if low[0] == "-" else float("inf")
    if low == ".nan":
        return float("nan")
    return float(text.replace("_", ""))


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    return _built(node, core_int, "an integer")


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    return _built(node, core_float, "a number")


_T = typing.TypeVar("_T")


def _built(node: yaml.ScalarNode, make: typing.Callable[[str], _T], what: str) -> _T:
    """``make(node.value)``; an explicit ``!!int``/``!!float`` YAML 1.2 cannot read is a YAML
    error at its line."""
    import yaml

    try:
        return make(str(node.value))
    except ValueError:
        raise yaml.constructor.ConstructorError(
            None, None, f"cannot read {node.value!r} as {what}", node.start_mark
        ) from None


def yaml11_tag(text: str) -> str:
    """The tag PyYAML's SafeLoader (YAML 1.1) gives a plain scalar ``text``."""
    import yaml

    table = yaml.SafeLoader.yaml_implicit_resolvers
    for tag, regexp in table.get(text[:1], []) + table.get(None, []):
        if regexp.match(text):
            return str(tag)
    return STR


def _read_otherwise(text: str, tag: str) -> bool:
    """Whether YAML 1.1 read the plain scalar ``text`` (``tag`` in YAML 1.2) as a bool or a
    number other than the one it is now: another tag (``on``, ``1:30``, ``0b11``), or an int
    with a leading zero (``010``: octal 8 then, 10 now)."""
    then = yaml11_tag(text)
    if then not in (_BOOL, _INT, _FLOAT):
        return False
    return then != tag or (then == _INT and re.fullmatch(r"[-+]?0[0-9_]+", text) is not None)


def scalar_notes(root: yaml.Node) -> tuple[dict[Loc, str], list[tuple[Loc, str]]]:
    """Walk a composed document: (the source text of each plain scalar read as no string, by
    location; the location and text of each plain scalar YAML 1.1 read as a bool or a number
    otherwise than YAML 1.2 (:func:`_read_otherwise`; whether a field's value changed with it is
    for :func:`refuse_changed` to tell)). A location is a pydantic error's: mapping keys as
    written, list indexes."""
    import yaml

    sources: dict[Loc, str] = {}
    legacy: list[tuple[int, int, Loc, str]] = []
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, Loc]] = [(root, ())]
    while stack:
        node, loc = stack.pop()
        if id(node) in seen:  # an alias of a node already walked
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            if node.style is None:  # plain: quoted text is a string in every YAML
                text = str(node.value)
                if node.tag != STR:
                    sources[loc] = text
                if _read_otherwise(text, str(node.tag)):
                    legacy.append((node.start_mark.line, node.start_mark.column, loc, text))
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    stack.append((value, (*loc, str(key.value))))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, (*loc, i)) for i, item in enumerate(node.value))
    return sources, [(loc, text) for _, _, loc, text in sorted(legacy, key=lambda x: x[:2])]


def load_yaml11(text: str) -> Any:
    """``text`` as PyYAML's SafeLoader (YAML 1.1, what spotwise read before) reads it; None
    when it cannot (then no spec loaded from it before)."""
    import yaml

    try:
        return yaml.load(text, Loader=yaml.SafeLoader)
    except (yaml.YAMLError, ValueError, TypeError):
        return None


_GONE = object()


def refuse_changed(spec: JobSpec, doc: SpecDocument, source: str) -> None:
    """Refuse a spec that loaded under YAML 1.1 (spotwise before) and now gives a field another
    value: a plain scalar YAML 1.1 read as a bool or a number that YAML 1.2 reads otherwise
    (``NO`` in ``choices``: false then, the text "NO" now; ``steps: 010``: 8 then, 10 now;
    ``offline: yes``). Nothing to do when no such scalar is in the spec, or when its YAML 1.1
    reading was refused anyway (``env: {FLAG: on}``: a bool where a string is wanted)."""
    if not doc.legacy:
        return
    from pydantic import ValidationError

    from spotwise.errors import SpecError
    from spotwise.spec import JobSpec
    from spotwise.spec_yaml import yaml_text

    try:
        then = JobSpec.model_validate(doc.yaml11()).model_dump()
    except (ValidationError, ValueError, TypeError):
        return  # it did not load before: nothing changed meaning
    now = spec.model_dump()
    for loc, text in doc.legacy:
        a, b = _at(then, loc), _at(now, loc)
        if a is _GONE or b is _GONE or (type(a) is type(b) and a == b):
            continue
        old = a if isinstance(a, str) else yaml_text(a)
        if isinstance(b, str):
            fix = f'quote it ("{text}") if the text is meant, or write {old}'
        else:
            fix = f"write {yaml_text(b)}, or {old} if that is meant"
        where = ".".join(map(str, loc))
        raise SpecError(
            f"{source}: spec field '{where}': {text} is {old} in YAML 1.1 (PyYAML, older "
            f"spotwise) but {yaml_text(b)} in YAML 1.2, which spotwise reads; {fix}"
        )


def _at(data: Any, loc: Loc) -> Any:
    """The value at ``loc`` in a model's dump, or :data:`_GONE`."""
    for part in loc:
        listed = isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data)
        if not (listed or (isinstance(data, dict) and part in data)):
            return _GONE
        data = data[part]
    return data
