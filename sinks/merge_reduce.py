"""Pre-reduce a MERGE source to one row per key with the very rule the MERGE applies.

Delta refuses a MERGE whose source has several rows for one target row, and a checkpoint's worth of
events has many per key. Folding them first with the guard of ``MergeSpec`` (in arrival order) gives the
row that applying them one by one would have produced, so one MERGE per checkpoint is exact.

The fold is computed column-group-wise instead of row by row: for a guarded group the winner among rows
whose value is not null is the one with the greatest (time is not null, time, arrival order); a null time
only wins when no row of the key has a time. That ranking is what the pairwise rule
``s.F is not null and (t.T is null or s.T >= t.T)`` yields when folded left to right.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sinks.merge_spec import MergeSpec

_SEQ = "__lakestream_seq"
_POS = "__lakestream_pos"
_TVALID = "__lakestream_tvalid"


def _with_seq(table: pa.Table) -> pa.Table:
    return table.append_column(_SEQ, pa.array(np.arange(table.num_rows, dtype=np.int64)))


def reduce_latest(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """Upsert reduction: the last row (arrival order) of each key, winners kept in arrival order."""
    if table.num_rows == 0:
        return table
    seq = _with_seq(table)
    last = seq.group_by(list(keys), use_threads=False).aggregate([(_SEQ, "max")])[f"{_SEQ}_max"]
    return table.take(last.take(pc.sort_indices(last)))


def reduce_guarded(table: pa.Table, spec: MergeSpec) -> pa.Table:
    """Merge reduction: fold each key's rows with the guard of ``spec`` (see module docstring)."""
    if table.num_rows == 0:
        return table
    keys = list(spec.keys)
    t = _with_seq(table)
    # One output row per key, ordered by the key's last arrival (deterministic output order).
    out = t.group_by(keys, use_threads=False).aggregate([(_SEQ, "max")])
    for grp in spec.groups():
        sub = t.select([*keys, *grp.moved, _SEQ]).filter(pc.is_valid(t[grp.value]))
        if sub.num_rows == 0:
            out = _add_nulls(out, table.schema, grp.moved)
            continue
        sub = sub.append_column(_TVALID, pc.is_valid(sub[grp.time]))
        order = pc.sort_indices(
            sub,
            sort_keys=[(_TVALID, "ascending"), (grp.time, "ascending"), (_SEQ, "ascending")],
            null_placement="at_start",
        )
        ranked = sub.take(order)
        ranked = ranked.append_column(_POS, pa.array(np.arange(ranked.num_rows, dtype=np.int64)))
        best = ranked.group_by(keys, use_threads=False).aggregate([(_POS, "max")])[f"{_POS}_max"]
        winners = ranked.take(best).select([*keys, *grp.moved])
        out = out.join(winners, keys=keys, join_type="left outer", use_threads=False)
    for col in spec.unguarded(table.schema):
        sub = t.select([*keys, col, _SEQ]).filter(pc.is_valid(t[col]))
        if sub.num_rows == 0:
            out = _add_nulls(out, table.schema, (col,))
            continue
        last = sub.group_by(keys, use_threads=False).aggregate([(_SEQ, "max")])[f"{_SEQ}_max"]
        # _SEQ is the row index of t, so the winners can be taken from t directly.
        winners = t.take(last).select([*keys, col])
        out = out.join(winners, keys=keys, join_type="left outer", use_threads=False)
    out = out.take(pc.sort_indices(out[f"{_SEQ}_max"]))
    return out.select(table.schema.names).cast(table.schema)


def _add_nulls(out: pa.Table, schema: pa.Schema, cols: Sequence[str]) -> pa.Table:
    for c in cols:
        out = out.append_column(schema.field(c), pa.nulls(out.num_rows, type=schema.field(c).type))
    return out
