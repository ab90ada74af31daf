"""Reading a job spec's YAML, and naming what a spec error is about.

* :func:`read_spec_yaml` (:func:`read_spec_document`): the spec's YAML read with YAML 1.2's
  core schema (:mod:`spotwise.spec_yaml12`: ``1:30`` and ``on`` are strings, ``1e-4`` a
  number), refusing a key given twice in one mapping (PyYAML keeps the last one silently: a
  second ``budget:`` block would drop the first one's cost cap), naming the key's path and both
  lines.
* :func:`error_line`: a pydantic ValidationError of a spec as one line naming the field, what is
  wrong and the fix.
* :func:`fields_at`: the field names a pydantic model takes at an error's location, for the
  "did you mean" of an unknown nested field (``budget.max_cost``).
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from spotwise.errors import SpecError, did_you_mean
from spotwise.spec_words import literal_words, pattern_words, untagged_words
from spotwise.spec_yaml12 import Loc, install_core_schema, load_yaml11, scalar_notes

if typing.TYPE_CHECKING:
    import yaml


@dataclass(frozen=True)
class SpecDocument:
    """A spec file's YAML document (:attr:`data`), with what its plain scalars were."""

    data: Any
    text: str = ""
    #: the source text of each plain scalar read as no string (``1e6``, ``True``), by location
    sources: dict[Loc, str] = field(default_factory=dict)
    #: (location, text) of each plain scalar that YAML 1.1 read as a bool or a number
    legacy: list[tuple[Loc, str]] = field(default_factory=list)

    def yaml11(self) -> Any:
        """The document as YAML 1.1 (PyYAML's SafeLoader, spotwise before) reads it."""
        return load_yaml11(self.text)


def read_spec_yaml(path: Path) -> Any:
    """The YAML document in ``path``; SpecError (one line) for a path that is no file,
    invalid YAML or a repeated key."""
    return read_spec_document(path).data


def read_spec_document(path: Path) -> SpecDocument:
    """:func:`read_spec_yaml`'s document with its scalars' notes (:class:`SpecDocument`)."""
    import yaml

    if path.is_dir():
        raise SpecError(_folder_message(path))
    if not path.is_file():
        raise SpecError(
            f"spec file {path} not found; pass the path to a job YAML, e.g. "
            "examples/digits/job.yaml"
        )
    text = _spec_text(path)
    loader = _loader_class()(text)
    try:
        node = loader.get_single_node()
        if node is None:  # an empty file
            return SpecDocument(None, text)
        data = loader.construct_document(node)
        return SpecDocument(data, text, *scalar_notes(node))
    except _DuplicateKey as e:
        raise SpecError(
            f"{path}: line {e.line}: key '{e.key}' is given twice (first at line {e.first}); "
            "keep one of them (YAML would silently keep only the last)"
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise SpecError(f"{path}:{where} is not valid YAML: {getattr(e, 'problem', e)}") from None
    finally:
        loader.dispose()


def _spec_text(path: Path) -> str:
    """The spec's text read as UTF-8 whatever the locale (a BOM dropped); SpecError (one line)
    for bytes that are not UTF-8 text: a UTF-16 file (PowerShell's ``>``) or Latin-1 exited 70,
    "a bug" (review-ao F6)."""
    data = path.read_bytes()
    skip = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    try:
        text = data[skip:].decode("utf-8")
        at = data.find(b"\x00")  # valid UTF-8, never in YAML: UTF-16 with no BOM
        if at < 0:
            return text
    except UnicodeDecodeError as e:
        at = skip + e.start
    utf16 = data[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\x00" in data[:64]
    line = data.count(b"\n", 0, at) + 1
    where = ": UTF-16?" if utf16 else f", line {line}"
    raise SpecError(
        f"{path}: the spec is not UTF-8 text (byte 0x{data[at]:02x} at {at}{where}); "
        "save it as UTF-8"
    )


def _folder_message(folder: Path) -> str:
    """A folder given as the spec: name up to 3 of its YAML files to pass instead."""
    try:
        found = sorted(
            (f for f in folder.iterdir() if f.suffix in (".yaml", ".yml") and f.is_file()),
            key=lambda f: (f.stem != "job", f.name),  # job.yaml, the usual name, first
        )
    except OSError:  # unreadable: name no file
        found = []
    if not found:
        return (
            f"spec path {folder} is a folder with no .yaml file in it; pass the path to a job "
            "YAML, e.g. examples/digits/job.yaml"
        )
    listed = ", ".join(str(f) for f in found[:3])
    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    return f"spec path {folder} is a folder; pass the job YAML inside it: {listed}{more}"


INF = float("inf")


def number_example(text: str, default: str, *, hours: bool = False) -> str:
    """The number meant by ``text`` when it can be told, for a fix's "e.g.": h:mm for
    ``hours`` (``1:30``: "1.5 for 1:30"), a dollar sign (``$10``: "10"); else ``default``."""
    import re

    if hours and (m := re.fullmatch(r"\s*(\d+):([0-5]\d)\s*", text)):
        return f"{int(m[1]) + int(m[2]) / 60:g} for {text.strip()}"
    try:
        return f"{float(text.strip().lstrip('$').replace(',', '')):g}"
    except ValueError:
        return default


def yaml_text(x: Any) -> str:
    """A value as YAML writes it (true, null, .inf), not as Python does (True, None, inf)."""
    import json

    if isinstance(x, float) and (x != x or x in (INF, -INF)):
        return ".nan" if x != x else ("-.inf" if x < 0 else ".inf")
    try:
        return json.dumps(x)
    except (TypeError, ValueError):
        return type(x).__name__


class _DuplicateKey(Exception):
    def __init__(self, key: str, line: int, first: int) -> None:
        super().__init__(key)
        self.key, self.line, self.first = key, line, first


_LOADER: type[yaml.SafeLoader] | None = None


def _loader_class() -> type[yaml.SafeLoader]:
    """A SafeLoader reading YAML 1.2's core schema (:mod:`spotwise.spec_yaml12`) whose
    documents are checked for repeated keys before they are built (made on first use: yaml is
    imported lazily)."""
    global _LOADER
    if _LOADER is None:
        import yaml

        class SpecLoader(yaml.SafeLoader):
            def construct_document(self, node: yaml.Node) -> Any:
                _refuse_duplicates(node, "", set())
                return super().construct_document(node)

        install_core_schema(SpecLoader)
        _LOADER = SpecLoader
    return _LOADER


def _refuse_duplicates(node: yaml.Node, path: str, seen: set[int]) -> None:
    """Walk the composed document; raise :class:`_DuplicateKey` for the first mapping that
    gives one scalar key twice (``<<`` merge keys are YAML's own, and may repeat)."""
    import yaml

    if id(node) in seen:  # an alias of a node already walked (or a recursive one)
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first: dict[str, int] = {}
        for key, value in node.value:
            name = str(key.value) if isinstance(key, yaml.ScalarNode) else None
            where = f"{path}.{name}" if path else str(name)
            if name is not None and key.tag != "tag:yaml.org,2002:merge":
                if name in first:
                    line = key.start_mark.line + 1
                    raise _DuplicateKey(_one_line(where), line, first[name])
                first[name] = key.start_mark.line + 1
            _refuse_duplicates(value, where, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _refuse_duplicates(item, f"{path}.{i}" if path else str(i), seen)


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


_FIXES = {
    "extra_forbidden": "remove it (the fields are listed in the README, 'Job spec reference')",
    "missing": "add it",
    "too_short": "give at least one entry",
}
# fields users often write in a shorter form than the spec takes: the form it takes
_SHAPES = {
    "command": "write it as a list of arguments, e.g. command: [python, train.py]",
    "metric": "write it as a mapping, e.g. metric: {name: val_accuracy, direction: maximize}",
    "providers": "write it as a list, e.g. providers: [{name: local}]",
    "search_space": "write it as a mapping of parameter names, e.g. "
    "search_space: {lr: {type: real, low: 0.001, high: 0.1, log: true}}",
    "budget": "write it as a mapping, e.g. budget: {max_cost_usd: 10, deadline_hours: 2}",
    "checkpoint": "write it as a mapping, e.g. checkpoint: {location: checkpoints, every: 5}",
    "search": "write it as a mapping, e.g. search: {optimizer: gp, seed: 0}",
    "env": 'write it as a mapping, e.g. env: {OMP_NUM_THREADS: "1"}',
    "policy_options": "write it as a mapping, e.g. policy_options: {min_steps: 3}",
}


def error_line(
    err: ValidationError, model: type[BaseModel], sources: typing.Mapping[Loc, str] | None = None
) -> str:
    """The first of ``err``'s errors as one line: the field's dotted path, what is wrong as
    YAML would write it, and the fix; an unknown field names the field of ``model`` meant.
    ``sources``: the text of the spec's plain scalars read as no string, by location
    (:class:`SpecDocument`), to show a value as it was written (``1e6``, not 1000000.0).
    A required field reported missing beside an unknown field that is its typo (``provider:``
    for ``providers:``) is told as the typo: "add it" would ask for a second section."""
    errors = err.errors()
    e, meant = _shown(errors, model)
    where = tuple(x for x in e["loc"] if not (isinstance(x, str) and x in _PARAM_TAGS))
    loc = ".".join(map(str, where))
    msg = e["msg"].removeprefix("Value error, ")
    fix = _FIXES.get(e["type"], "")
    value = e.get("input")
    written = (sources or {}).get(where)
    shown = written if written is not None and value is not None else yaml_text(value)
    if e["type"] == "extra_forbidden":  # a typo of a field: name the one meant
        typo, names = str(e["loc"][-1]), fields_at(model, e["loc"][:-1])
        close = _close_field(typo, names)
        msg = "unknown field" + close
        # removing a misspelt field would drop what it sets (`budget.max_cost_dollars`: the
        # job would run without a cap): name the fields that may be meant (review-ag F1)
        valid = ", ".join(sorted(dict.fromkeys(names)))
        fix = (
            ""
            if close
            else f"the fields here are {valid}: rename it to the one meant, or remove it"
            if valid
            else fix
        )
        if meant is not None:  # the field it misspells is required (review-ao F1)
            fix = f"rename it: '{meant}' is required"
    elif e["type"] in ("int_type", "int_parsing"):  # a strict count: `trials: true`, "8", 40.0
        msg = f"must be an integer, got {shown}"
        whole = isinstance(value, float) and value.is_integer()  # `steps: 1e3`, 40.0
        fix = f"write {int(value)}" if whole else ""
    elif e["type"] == "float_parsing":  # `low: 1:30` (a string in YAML 1.2), `low: "1,5"`
        msg = f"must be a number, got {shown}"
    elif e["type"] == "finite_number":
        msg = f"must be a finite number, got {shown}"
        fix = "leave it out for no limit" if e["loc"][:1] == ("budget",) else ""
    elif e["type"] == "string_type" and (value is None or isinstance(value, int | float)):
        # YAML read `X: 1` or `--lr, 0.1` as a number: the text wanted is what was written
        text = "" if value is None else shown
        key = f"{where[-1]}: " if where and isinstance(where[-1], str) else ""
        msg = f"must be a string, got {shown}"
        fix = f'quote it, e.g. {key}"{text}"'
    elif e["type"] == "union_tag_not_found":  # a search_space parameter without `type`
        for_type, msg, fix = untagged_words(value)  # `typ: real`: the key written named
        loc = ".".join(map(str, (*where, for_type))) if for_type is not None else loc
    elif e["type"] == "literal_error":  # `providers[].name: lcoal`: say the value meant
        msg, fix = literal_words(str((e.get("ctx") or {}).get("expected", "")), value, shown)
    elif e["type"] == "string_pattern_mismatch" and (
        said := pattern_words(str((e.get("ctx") or {}).get("pattern")), value, shown, loc)
    ):  # `name: tiny job`: the pattern in words, not a regex
        msg, fix = said
    elif e["type"] == "union_tag_invalid":  # `type: float`
        tag = str((e.get("ctx") or {}).get("tag", value))
        msg = f"unknown type {tag!r}{did_you_mean(tag, sorted(_PARAM_TAGS))}"
        fix = "write type: real, int or categorical" + (
            " (real for a range of floats)" if tag in ("float", "double", "uniform") else ""
        )
    elif len(e["loc"]) == 1 and e["type"] in ("list_type", "model_type", "dict_type"):
        fix = _SHAPES.get(str(e["loc"][0]), "")
        msg = msg.split(" or instance of ")[0]  # pydantic's class names mean nothing here
    rest = len(errors) - 1 - (meant is not None)  # the missing field is told as its typo
    more = f" (+{rest} more)" if rest > 0 else ""
    line = f"spec field '{loc or '<root>'}': {msg}" + (f"; {fix}" if fix else "") + more
    return line.replace("\r", "\\r").replace("\n", "\\n")  # one line, even for odd keys


_PARAM_TAGS = {"real", "int", "categorical"}


def _close_field(typo: str, names: list[str]) -> str:
    """' (did you mean X?)' for an unknown field ``typo`` among a model's ``names``, or ''."""
    longer = [n for n in names if _within(typo, n)]  # `sped`: speedup, not seed
    return did_you_mean(typo, longer if len(longer) == 1 else names)


def _shown(errors: list[Any], model: type[BaseModel]) -> tuple[Any, str | None]:
    """The error to show, and the required field it means when that is an unknown field
    whose did-you-mean is a field reported missing beside it (``provider:`` for
    ``providers:``, ``search_space.lr.lo`` for ``low``); else the first error and None."""
    for missing in (m for m in errors if m["type"] == "missing"):
        parent, name = tuple(missing["loc"][:-1]), str(missing["loc"][-1])
        names = fields_at(model, parent)
        for typo in errors:
            loc = tuple(typo["loc"])
            if typo["type"] != "extra_forbidden" or loc[:-1] != parent:
                continue
            if _close_field(str(loc[-1]), names) == f" (did you mean {name!r}?)":
                return typo, name
    return errors[0], None


def _within(typo: str, name: str) -> bool:
    """Whether ``name`` is ``typo`` with letters added (a letter left out while typing)."""
    rest = iter(name)
    return all(c in rest for c in typo)


def fields_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The field names (and aliases) of the model found at ``loc`` under ``model``: for the
    location of an unknown field, the fields it may have meant; [] when ``loc`` leads to no
    model. ``loc`` is a pydantic error location (list indexes, dict keys and the tags of a
    discriminated union appear in it)."""
    target: Any = model
    for part in loc:
        target = _step(target, part)
        if target is None:
            return []
    target = _strip(target)
    if not _is_model(target):
        return []
    names: list[str] = []
    for name, info in target.model_fields.items():
        names.append(name)
        if info.alias and info.alias != name:
            names.append(info.alias)
    return names


def _step(target: Any, part: int | str) -> Any:
    """The type found one location part below ``target``, or None."""
    target = _strip(target)
    if _is_union(target):  # a discriminated union: the part is the member's tag
        tagged = [m for m in typing.get_args(target) if _tag(m) == part]
        return tagged[0] if len(tagged) == 1 else None
    if _is_model(target):
        fields = target.model_fields
        field = fields.get(str(part)) or next((f for f in fields.values() if f.alias == part), None)
        return field.annotation if field is not None else None
    origin, args = typing.get_origin(target), typing.get_args(target)
    if origin in (list, tuple, set, frozenset) and args and isinstance(part, int):
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    return None


def _strip(target: Any) -> Any:
    """``Annotated[X, ...]`` → X and ``X | None`` → X, as often as they wrap it."""
    while True:
        if typing.get_origin(target) is typing.Annotated:
            target = typing.get_args(target)[0]
        elif _is_union(target):
            members = [a for a in typing.get_args(target) if a is not type(None)]
            if len(members) != 1:
                return target
            target = members[0]
        else:
            return target


def _is_union(target: Any) -> bool:
    return typing.get_origin(target) in (typing.Union, types.UnionType)


def _is_model(target: Any) -> bool:
    return isinstance(target, type) and issubclass(target, BaseModel)


def _tag(model: Any) -> Any:
    """The ``type`` tag of a discriminated union's member (``Literal["real"]`` → "real")."""
    field = model.model_fields.get("type") if _is_model(model) else None
    args = typing.get_args(field.annotation) if field is not None else ()
    return args[0] if len(args) == 1 else None
