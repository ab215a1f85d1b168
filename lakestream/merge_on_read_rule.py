"""Merge-on-read semantics: a snapshot table, a changes table, and the one rule that reads them as one.

Both tables have the same columns; ``spec`` is the table's ``MergeSpec`` with the commit sequence
``seq`` as a greatest column (``MergeSpec.sequenced``). The current state of a key is, per column group,
the value of the row with the greatest (time, sequence) among the snapshot's and the changes' rows whose
value is not null: the fold of every change in commit order. ``current_rows`` (Arrow) and ``view_sql``
(SQL) are its two interpreters, held to ``MergeSpec.fold_rows``; the rule and why it holds: DESIGN.md
section 13.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakestream.merge_reduce import reduce_guarded
from lakestream.merge_spec import MergeSpec, quote_ident


def _backtick(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def check_sequenced(spec: MergeSpec, seq: str) -> None:
    """Refuse a spec that does not keep ``seq`` as a greatest column (the rule above needs it)."""
    if seq not in spec.greatest:
        raise ValueError(
            f"merge-on-read needs the sequence column {seq!r} as a greatest column of the rule: "
            f"use spec.sequenced({seq!r})"
        )


def in_arrival_order(
    snapshot: pa.Table, changes: pa.Table, seq: str, *, snapshot_in_order: bool = False
) -> pa.Table:
    """Snapshot rows and change rows as one table in which each key's rows are in sequence order, the
    snapshot row first on a tie (a null sequence, folded before sequences existed, first of all).

    A snapshot of several sorted runs holds several rows of a key: ``snapshot_in_order`` says its rows
    come run by run, oldest first (each key's rows in sequence order); otherwise they are sorted by
    sequence first unless they already are.

    When every change has a sequence above every snapshot row's (changes read above the fold point,
    as every caller reads them), only the changes are sorted, and the snapshot's rows (in a full read,
    the largest allocation) are not copied; changes read in sequence order (``scan`` reads
    the changes table's files so) are not copied either. Otherwise all rows are sorted by sequence.
    """
    changes = changes.select(snapshot.column_names).cast(snapshot.schema)
    if not snapshot_in_order and not _sequenced(snapshot[seq]):
        snapshot = snapshot.take(
            pc.sort_indices(snapshot, sort_keys=[(seq, "ascending")], null_placement="at_start")
        )
    if _all_above(snapshot[seq], changes[seq]):
        if not _ascending(changes[seq]):
            changes = changes.take(pc.sort_indices(changes, sort_keys=[(seq, "ascending")]))
        return pa.concat_tables([snapshot, changes])
    rows = pa.concat_tables([snapshot, changes])
    order = pc.sort_indices(rows, sort_keys=[(seq, "ascending")], null_placement="at_start")
    return rows.take(order)


def _all_above(snapshot_seq: pa.ChunkedArray, changes_seq: pa.ChunkedArray) -> bool:
    """Whether every change sequence is set and at least every snapshot sequence (nulls: lowest)."""
    if changes_seq.null_count or len(changes_seq) == 0:
        return False
    top = pc.max(snapshot_seq).as_py()
    return top is None or top <= pc.min(changes_seq).as_py()


def _sequenced(values: pa.ChunkedArray) -> bool:
    """Whether ``values`` are in sequence order: nulls first, then never decreasing."""
    if len(values) < 2:
        return True
    valid = np.asarray(pc.is_valid(values).to_numpy(zero_copy_only=False), dtype=bool)
    nulls = int(len(values) - valid.sum())
    if nulls and valid[:nulls].any():
        return False
    v = np.asarray(pc.drop_null(values).to_numpy())
    return bool(np.all(v[1:] >= v[:-1]))


def _ascending(values: pa.ChunkedArray) -> bool:
    """Whether ``values`` (no nulls) never decrease."""
    v = np.asarray(values.to_numpy())
    return bool(np.all(v[1:] >= v[:-1]))


def current_rows(
    snapshot: pa.Table, changes: pa.Table, spec: MergeSpec, seq: str, *, snapshot_in_order: bool = False
) -> pa.Table:
    """The current row of every key in ``snapshot`` (one row per key and run) or ``changes``: the
    module's rule, column-wise (``snapshot_in_order``: see ``in_arrival_order``)."""
    check_sequenced(spec, seq)
    rows = in_arrival_order(snapshot, changes, seq, snapshot_in_order=snapshot_in_order)
    return reduce_guarded(rows, spec) if rows.num_rows else rows


def above(changes: pa.Table, folded_through: int | None, seq: str) -> pa.Table:
    """The change rows the snapshot does not hold yet: sequence above its fold point."""
    if folded_through is None:
        return changes
    return changes.filter(pc.greater(changes[seq], pa.scalar(folded_through, pa.int64())))


#: SQL dialects of ``view_sql``: how identifiers are quoted.
DIALECTS = ("ansi", "spark")


def view_sql(
    spec: MergeSpec, columns: list[str], *, snapshot: str, changes: str, seq: str, dialect: str = "ansi"
) -> str:
    """A SQL query giving the current row of every key from the relations ``snapshot`` and ``changes``.

    Plain SQL (window functions, ``UNION ALL``, ``LEFT JOIN``): per column group, the row with the
    greatest (time, sequence) among those whose value is not null; ``columns`` is the column order of
    the result. ``ansi`` quotes identifiers with double quotes (DataFusion, as standard SQL does),
    ``spark`` with backticks (Spark SQL).
    """
    check_sequenced(spec, seq)
    if dialect not in DIALECTS:
        raise ValueError(f"dialect {dialect!r}: use one of {', '.join(DIALECTS)}")
    q = quote_ident if dialect == "ansi" else _backtick
    keys = ", ".join(q(k) for k in spec.keys)
    s = q(seq)
    parts: list[tuple[str, tuple[str, ...], str]] = []  # (value column, moved columns, ORDER BY)
    for grp in spec.groups():
        if grp.value == seq:
            continue
        parts.append((grp.value, grp.moved, f"{q(grp.time)} DESC NULLS LAST, {s} DESC NULLS LAST"))
    unguarded = [c for c in columns if c not in spec.keys and not any(c in p[1] for p in parts) and c != seq]
    for col in unguarded:
        parts.append((col, (col,), f"{s} DESC NULLS LAST"))
    ctes = [f"u AS (SELECT * FROM {snapshot} UNION ALL SELECT * FROM {changes})"]
    ctes.append(f"k AS (SELECT {keys}, MAX({s}) AS {s} FROM u GROUP BY {keys})")
    joins = []
    for i, (value, moved, order) in enumerate(parts):
        picked = ", ".join(q(c) for c in moved)
        ctes.append(
            f"g{i} AS (SELECT {keys}, {picked} FROM (SELECT {keys}, {picked}, ROW_NUMBER() OVER "
            f"(PARTITION BY {keys} ORDER BY {order}) AS rn FROM u WHERE {q(value)} IS NOT NULL) AS r{i} "
            "WHERE rn = 1)"
        )
        on = " AND ".join(f"g{i}.{q(k)} = k.{q(k)}" for k in spec.keys)
        joins.append(f"LEFT JOIN g{i} ON {on}")
    owner = {c: f"g{i}" for i, (_, moved, _) in enumerate(parts) for c in moved}
    select = []
    for c in columns:
        if c in spec.keys:
            select.append(f"k.{q(c)}")
        elif c == seq:
            select.append(f"k.{s}")
        else:
            select.append(f"{owner[c]}.{q(c)}")
    return "WITH " + ",\n".join(ctes) + "\nSELECT " + ", ".join(select) + "\nFROM k " + " ".join(joins)
