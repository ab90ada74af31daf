"""Small row helpers for the Store: field assignment, id/prefix lookup, value coercion.

Checks of shape only (a column exists, a state is one of the enum's values); no business
logic.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from sqlmodel import Session, SQLModel, col, func, select

from spotwise.errors import NotFoundError, StoreError
from spotwise.store.models import INSTANCE_STATES

RowT = TypeVar("RowT", bound=SQLModel)

PRICE_FIELDS = frozenset(
    {"provider", "region", "zone", "instance_type", "market", "price_per_hour", "observed_at",
     "fetched_at"}
)  # fmt: skip


def plain(value: Any) -> Any:
    """An enum's value; anything else unchanged."""
    return value.value if isinstance(value, enum.Enum) else value


def assign(row: SQLModel, fields: Mapping[str, Any], what: str) -> None:
    """Set columns of ``row``; StoreError naming the valid fields for an unknown one."""
    columns = type(row).__table__.columns.keys()  # type: ignore[attr-defined]
    for name, value in fields.items():
        if name == "id" or name not in columns:
            valid = ", ".join(c for c in columns if c != "id")
            raise StoreError(f"{what} has no updatable field {name!r}; valid: {valid}")
        # job/trial states stay enums (their column type stores the value)
        setattr(row, name, value if name == "state" else plain(value))


def find_by_id_or_prefix(
    session: Session, model: type[RowT], key: str, prefix: str, what: str, hint: str
) -> RowT:
    """The row whose id is ``key``, or else the only one whose id starts with ``key`` (or with
    ``prefix-key``). NotFoundError when none, and when the prefix is ambiguous (no one row:
    exit 3, never the 2 a command gives for its own refusals, e.g. `cancel`'s "runs
    elsewhere")."""
    row = session.get(model, key)
    if row is not None:
        return row
    id_col = col(model.id)  # type: ignore[attr-defined]
    candidates = [key] if key.startswith(f"{prefix}-") else [key, f"{prefix}-{key}"]
    for candidate in candidates if key else []:
        match = id_col.startswith(candidate, autoescape=True)
        total = session.exec(select(func.count()).select_from(model).where(match)).one()
        if total == 1:
            return session.exec(select(model).where(match)).one()
        if total > 1:
            first = session.exec(select(id_col).where(match).order_by(id_col).limit(5))
            shown = [str(i) for i in first]
            rest = f", … and {total - len(shown)} more" if total > len(shown) else ""
            raise NotFoundError(
                f"{what} id prefix {key!r} is ambiguous: it matches {', '.join(shown)}{rest}",
                hint="give more characters of the id",
            )
    raise NotFoundError(f"{what} {key!r} not found; {hint}")


def coerce_state(enum_cls: type[enum.Enum], value: Any, what: str) -> Any:
    """``value`` as a member of ``enum_cls``; StoreError listing the valid states."""
    try:
        return enum_cls(plain(value))
    except ValueError:
        valid = ", ".join(str(s.value) for s in enum_cls)
        raise StoreError(f"invalid {what} state {value!r}; valid: {valid}") from None


def instance_state(value: Any) -> str:
    """An instance state string (an InstanceState value or ``requested``)."""
    state = str(plain(value))
    if state not in INSTANCE_STATES:
        valid = ", ".join(sorted(INSTANCE_STATES))
        raise StoreError(f"invalid instance state {value!r}; valid: {valid}")
    return state


def price_rows(rows: Iterable[Mapping[str, Any]], now: float) -> list[dict[str, Any]]:
    """Validated price_cache rows: known keys only; zone defaults to "", fetched_at to now."""
    values: list[dict[str, Any]] = []
    for i, row in enumerate(rows):
        unknown = set(row) - PRICE_FIELDS
        if unknown:
            raise StoreError(f"price row {i} has unknown keys {sorted(unknown)}")
        item = {k: plain(v) for k, v in row.items()}
        item.setdefault("fetched_at", now)
        item.setdefault("zone", "")
        missing = PRICE_FIELDS - set(item)
        if missing:
            raise StoreError(f"price row {i} lacks {sorted(missing)}")
        values.append(item)
    return values
