"""The per-field MERGE rule, defined once: which columns are keys and how every other column folds.

Events for one key arrive out of order, so each value column F carries the event time T of the event
that set it, and a change lands only when it is at least as new (DESIGN.md section 2):

    F, T, companions := s.F, s.T, s.companions   when s.F is not null and (t.T is null or s.T >= t.T)

``greatest`` columns are the same rule with F and T one column; unguarded columns take the source value
when it is not null; keys never change. ``MergeSpec`` holds the rule and interprets it twice here: as
SQL for the Delta MERGE (``update_expressions``) and as the Python reference fold (``merge_row``,
``fold_rows``). ``lakestream.merge_reduce`` is its columnar (numpy) interpreter. The fold is associative,
so pre-reducing a checkpoint's rows per key and MERGE-ing once equals applying them one by one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pyarrow as pa

from lakestream.errors import LakestreamError


class MergeSpecError(LakestreamError, ValueError):
    """A MergeSpec that does not fit the table schema or gives a column two roles."""


class GuardGroup(NamedTuple):
    """Columns that change together under one guard: the value, its time, and what moves with them."""

    value: str
    time: str
    #: value, then time (unless it is the value), then companions: everything the guard assigns.
    moved: tuple[str, ...]


def quote_ident(name: str) -> str:
    """SQL identifier for DataFusion: quoted, so mixed case and odd names survive."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class MergeSpec:
    """Which columns are keys and how every other column folds under MERGE (see module docstring)."""

    keys: tuple[str, ...]
    #: guarded value column -> the event-time column that guards it (one time column per value column).
    guarded: Mapping[str, str] = field(default_factory=dict)
    #: columns that keep the larger of source and target (e.g. ``last_event_time``).
    greatest: tuple[str, ...] = ()
    #: guarded or greatest column -> columns that move with it (e.g. ``status`` -> ``status__eid``).
    companions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: column -> text value: a target row holding that value is never updated (upsert tables written
    #: by two layers, e.g. gold's ``layer = 'batch'`` rows, which the streaming upsert must not replace).
    protected: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", tuple(self.keys))
        object.__setattr__(self, "guarded", dict(self.guarded))
        object.__setattr__(self, "greatest", tuple(self.greatest))
        object.__setattr__(self, "companions", {k: tuple(v) for k, v in self.companions.items()})
        object.__setattr__(self, "protected", dict(self.protected))
        for col in self.protected:
            if col in self.keys:
                raise MergeSpecError(f"MergeSpec.protected: {col!r} is a key; protect by a non-key column")
        if not self.keys:
            raise MergeSpecError("MergeSpec.keys is empty: a MERGE needs at least one key column")
        roles: dict[str, str] = {}

        def claim(col: str, role: str) -> None:
            if col in roles:
                raise MergeSpecError(
                    f"MergeSpec: column {col!r} is both {roles[col]} and {role}; give each column one role"
                )
            roles[col] = role

        for k in self.keys:
            claim(k, "a key")
        for value in self.guarded:
            claim(value, "a guarded value")
        for value, time in self.guarded.items():
            claim(time, f"the event-time column of {value!r}")
        for g in self.greatest:
            claim(g, "a greatest column")
        for owner, cols in self.companions.items():
            if owner not in self.guarded and owner not in self.greatest:
                raise MergeSpecError(
                    f"MergeSpec.companions: {owner!r} is neither a guarded nor a greatest column, so "
                    "there is no guard for its companions to follow"
                )
            for c in cols:
                claim(c, f"a companion of {owner!r}")

    @classmethod
    def with_suffixes(
        cls,
        *,
        keys: Sequence[str],
        fields: Iterable[str],
        time_suffix: str = "__ts",
        id_suffix: str | None = "__eid",
        greatest: Sequence[str] = (),
        greatest_companions: Mapping[str, Sequence[str]] | None = None,
    ) -> MergeSpec:
        """Spec for the naming convention ``F``, ``F__ts`` (its event time), ``F__eid`` (its event id)."""
        fields = list(fields)
        companions: dict[str, tuple[str, ...]] = {
            f: (f"{f}{id_suffix}",) for f in fields if id_suffix is not None
        }
        for owner, cols in (greatest_companions or {}).items():
            companions[owner] = tuple(cols)
        return cls(
            keys=tuple(keys),
            guarded={f: f"{f}{time_suffix}" for f in fields},
            greatest=tuple(greatest),
            companions=companions,
        )

    def sequenced(self, column: str) -> MergeSpec:
        """This rule over rows that also carry ``column``, an arrival sequence kept as a greatest column.

        The merge-on-read layout folds, compacts and reads with it (DESIGN.md section 13): the snapshot
        row keeps the highest sequence folded into it, so ties of event time order as arrival does.
        """
        return MergeSpec(
            keys=self.keys,
            guarded=self.guarded,
            greatest=(*self.greatest, column),
            companions=self.companions,
            protected=self.protected,
        )

    def groups(self) -> list[GuardGroup]:
        """Guarded columns and greatest columns, uniformly as (value, time, moved columns)."""
        out = []
        for value, time in self.guarded.items():
            out.append(GuardGroup(value, time, (value, time, *self.companions.get(value, ()))))
        for g in self.greatest:
            out.append(GuardGroup(g, g, (g, *self.companions.get(g, ()))))
        return out

    def unguarded(self, schema: pa.Schema) -> list[str]:
        """Non-key columns without a guard: they take the source value when it is not null."""
        covered = set(self.keys)
        for grp in self.groups():
            covered.update(grp.moved)
        return [name for name in schema.names if name not in covered]

    def validate(self, schema: pa.Schema) -> None:
        """Fail early when the spec names columns the table does not have."""
        names = set(schema.names)
        referenced = [*self.keys, *self.protected]
        for grp in self.groups():
            referenced.extend(grp.moved)
        missing = [c for c in referenced if c not in names]
        if missing:
            raise MergeSpecError(
                f"MergeSpec names columns the schema does not have: {', '.join(missing)} "
                f"(schema columns: {', '.join(schema.names)})"
            )

    def merge_predicate(self, source_alias: str = "s", target_alias: str = "t") -> str:
        """Key equality predicate of the MERGE."""
        return " AND ".join(
            f"{target_alias}.{quote_ident(k)} = {source_alias}.{quote_ident(k)}" for k in self.keys
        )

    def update_condition(self, target_alias: str = "t") -> str | None:
        """SQL condition on the target under which a matched row may be updated (None: always)."""
        if not self.protected:
            return None
        return " AND ".join(
            f"({target_alias}.{quote_ident(col)} IS NULL OR {target_alias}.{quote_ident(col)} <> "
            f"'{value.replace(chr(39), chr(39) * 2)}')"
            for col, value in self.protected.items()
        )

    def is_protected(self, target: Mapping[str, Any]) -> bool:
        """``update_condition`` in Python: whether ``target`` holds a protected value."""
        return any(target.get(col) == value for col, value in self.protected.items())

    def guard_condition(self, group: GuardGroup, source_alias: str = "s", target_alias: str = "t") -> str:
        """SQL condition under which the source side of ``group`` wins."""
        s_val = f"{source_alias}.{quote_ident(group.value)}"
        s_time = f"{source_alias}.{quote_ident(group.time)}"
        t_time = f"{target_alias}.{quote_ident(group.time)}"
        return f"{s_val} IS NOT NULL AND ({t_time} IS NULL OR {s_time} >= {t_time})"

    def update_expressions(
        self, schema: pa.Schema, source_alias: str = "s", target_alias: str = "t"
    ) -> dict[str, str]:
        """``when_matched_update`` assignments for every non-key column (quoted column -> SQL)."""
        updates: dict[str, str] = {}
        for grp in self.groups():
            cond = self.guard_condition(grp, source_alias, target_alias)
            for col in grp.moved:
                q = quote_ident(col)
                updates[q] = f"CASE WHEN {cond} THEN {source_alias}.{q} ELSE {target_alias}.{q} END"
        for col in self.unguarded(schema):
            q = quote_ident(col)
            updates[q] = f"COALESCE({source_alias}.{q}, {target_alias}.{q})"
        return updates

    # ------------------------------------------------------------------ Python reference

    def source_wins(self, group: GuardGroup, source: Mapping[str, Any], target: Mapping[str, Any]) -> bool:
        """``guard_condition`` in Python, with SQL's null logic (a null source time never beats a time)."""
        s_time, t_time = source.get(group.time), target.get(group.time)
        return source.get(group.value) is not None and (
            t_time is None or (s_time is not None and bool(s_time >= t_time))
        )

    def key_of(self, row: Mapping[str, Any]) -> tuple[Any, ...]:
        """The key tuple of a row."""
        return tuple(row[k] for k in self.keys)

    def merge_row(
        self, target: Mapping[str, Any] | None, source: Mapping[str, Any], schema: pa.Schema
    ) -> dict[str, Any]:
        """Fold one source row onto ``target`` (``None``: a new key, all non-key columns null), as a new row.

        The reference the SQL and the columnar interpreter are tested against. The writer always
        pre-reduces its MERGE source with this rule, so a row the MERGE inserts is a folded one.
        """
        if target is None:
            out: dict[str, Any] = dict.fromkeys(schema.names)
            out.update(zip(self.keys, self.key_of(source), strict=True))
        else:
            if self.key_of(target) != self.key_of(source):
                raise ValueError(
                    f"{', '.join(self.keys)}: cannot merge row {self.key_of(source)!r} into row "
                    f"{self.key_of(target)!r}"
                )
            out = dict(target)
        for grp in self.groups():
            if self.source_wins(grp, source, out):
                for col in grp.moved:
                    out[col] = source.get(col)
        for col in self.unguarded(schema):
            value = source.get(col)
            if value is not None:
                out[col] = value
        return out

    def fold_rows(
        self,
        rows: Iterable[Mapping[str, Any]],
        schema: pa.Schema,
        target: Mapping[tuple[Any, ...], Mapping[str, Any]] | None = None,
    ) -> dict[tuple[Any, ...], dict[str, Any]]:
        """Apply ``rows`` one by one in arrival order onto a keyed table: the reference MERGE."""
        out: dict[tuple[Any, ...], dict[str, Any]] = {k: dict(v) for k, v in (target or {}).items()}
        for row in rows:
            key = self.key_of(row)
            out[key] = self.merge_row(out.get(key), row, schema)
        return out
