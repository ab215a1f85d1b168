"""Decide whether rows of a table version can be emitted with the stream's read schema.

The read schema is fixed at job build (downstream operators and sinks are typed then), so a version
written with another schema fails the stream or, with ``schema_changes='additive'``, is read with nulls
for the nullable columns it lacks; the rules are in DESIGN.md section 6.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from sources.options import SchemaChanges
from sources.source_errors import SchemaChangeError
from storage.delta_log import normalize_type


@dataclass(frozen=True, slots=True)
class SchemaDiff:
    """How a version's schema differs from the read schema (by column name)."""

    #: Columns of the version that the read schema does not have.
    unknown: tuple[str, ...] = ()
    #: Read-schema columns the version does not have, and whether each is nullable.
    absent: tuple[tuple[str, bool], ...] = ()
    #: Columns whose type changed, or that became nullable while the read schema says NOT NULL.
    changed: tuple[str, ...] = ()

    @property
    def identical(self) -> bool:
        """No difference at all."""
        return not (self.unknown or self.absent or self.changed)

    def describe(self) -> str:
        """Human summary for error messages."""
        parts = []
        if self.unknown:
            parts.append(f"new column(s) {', '.join(self.unknown)} not in the stream's read schema")
        if self.absent:
            parts.append(f"column(s) {', '.join(n for n, _ in self.absent)} of the read schema missing")
        if self.changed:
            parts.append(f"column(s) {', '.join(self.changed)} changed type or nullability")
        return "; ".join(parts) or "no difference"


def diff_schemas(read_schema: pa.Schema, version_schema: pa.Schema) -> SchemaDiff:
    """Compare by name; types are compared after view/large normalisation."""
    read = {f.name: f for f in read_schema}
    ver = {f.name: f for f in version_schema}
    unknown = tuple(n for n in ver if n not in read)
    absent = tuple((n, read[n].nullable) for n in read if n not in ver)
    changed = tuple(
        n
        for n, f in read.items()
        if n in ver
        and (normalize_type(f.type) != normalize_type(ver[n].type) or (not f.nullable and ver[n].nullable))
    )
    return SchemaDiff(unknown=unknown, absent=absent, changed=changed)


def check_version_schema(
    read_schema: pa.Schema, version_schema: pa.Schema, *, version: int, mode: SchemaChanges
) -> None:
    """Raise :class:`SchemaChangeError` unless rows of ``version`` can be emitted with ``read_schema``."""
    d = diff_schemas(read_schema, version_schema)
    if d.identical:
        return
    if d.changed or any(not nullable for _, nullable in d.absent):
        raise SchemaChangeError(
            version=version, detail=d.describe(), additive=False, mode_allows_additive=mode == "additive"
        )
    if d.unknown:
        # The table grew beyond what this job emits: additive, but only a restart can follow it.
        raise SchemaChangeError(
            version=version, detail=d.describe(), additive=True, mode_allows_additive=mode == "additive"
        )
    if mode != "additive":
        raise SchemaChangeError(
            version=version,
            detail=d.describe() + " (the version predates columns added later)",
            additive=True,
            mode_allows_additive=False,
        )
