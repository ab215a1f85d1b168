"""The columnar interpreter of ``MergeSpec``: pre-reduce a MERGE source to one row per key.

Delta refuses a MERGE whose source has several rows for one target row, and a checkpoint holds many per
key. Folding them first with the spec's guard (in arrival order) gives the row that applying them one by
one would (``MergeSpec.fold_rows``, the reference it is property-tested against), so one MERGE per
checkpoint is exact. Per guarded group the winner among rows whose value is not null is the one with
the greatest (time is not null, time, arrival order): what the pairwise guard yields folded left to right.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from lakestream.merge_spec import MergeSpec

_SEQ = "__lakestream_seq"


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
    """Merge reduction: fold each key's rows with the guard of ``spec`` (see module docstring).

    Each key's rows are brought next to each other once (a hash of the key, then a stable sort of
    small integers); each column group's guard order becomes one int64 score per row, and the winner
    per key is found with two linear passes (highest score, then latest arrival among equals). It runs
    on the checkpoint barrier's path; benchmarks/RESULTS.md has what it replaced and why.
    """
    n = table.num_rows
    if n == 0:
        return table
    keys = list(spec.keys)
    by_key, new_key = _key_runs(table.select(keys))
    starts = np.flatnonzero(new_key)
    ends = np.append(starts[1:], n) - 1
    # One output row per key, ordered by the key's last arrival (deterministic output order).
    out = np.argsort(by_key[ends], kind="stable")
    gid = np.cumsum(new_key) - 1
    pos = np.arange(n, dtype=np.int64)

    def winners(score: npt.NDArray[Any]) -> pa.Array:
        """Original index of each output key's best row: highest score, then latest arrival.

        ``score`` is per original row; ``_NONE`` marks rows that may not win (null value).
        """
        ranked = score[by_key]
        best = np.maximum.reduceat(ranked, starts)
        last = np.maximum.reduceat(np.where(ranked == best[gid], pos, -1), starts)[out]
        return pa.array(by_key[last], mask=best[out] == _NONE)

    columns: dict[str, pa.ChunkedArray] = {k: table.column(k).take(pa.array(by_key[ends[out]])) for k in keys}
    for grp in spec.groups():
        idx = winners(_guard_score(table.column(grp.value), table.column(grp.time)))
        for col in grp.moved:
            columns[col] = table.column(col).take(idx)
    for col in spec.unguarded(table.schema):
        valid = _bools(pc.is_valid(table.column(col)))
        columns[col] = table.column(col).take(winners(np.where(valid, _NO_TIME, _NONE)))
    return pa.table([columns[name] for name in table.schema.names], schema=table.schema)


def _key_runs(keys: pa.Table) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """A stable permutation putting equal keys next to each other, and where each key's run starts."""
    n = keys.num_rows
    if keys.num_columns == 1:
        # Hash the key once and sort small integers: far cheaper than sorting strings.
        codes = pc.dictionary_encode(keys.column(0).combine_chunks()).indices
        ids = np.asarray(pc.fill_null(codes, -1), dtype=np.int64)  # null keys: one group of their own
        by_key = np.argsort(ids, kind="stable")
        run_ids = ids[by_key]
        new_key = np.ones(n, dtype=bool)
        new_key[1:] = run_ids[1:] != run_ids[:-1]
        return by_key, new_key
    by_key = pc.sort_indices(keys, sort_keys=[(k, "ascending") for k in keys.column_names]).to_numpy()
    sorted_keys = keys.take(by_key)
    new_key = np.zeros(n, dtype=bool)
    new_key[0] = True
    for col in sorted_keys.columns:
        prev, cur = col.slice(0, n - 1), col.slice(1)
        # Null keys (the writer refuses them; stay exact anyway) form one group, as in group_by.
        both_null = pc.and_(pc.is_null(prev), pc.is_null(cur))
        new_key[1:] |= _bools(pc.and_not(pc.fill_null(pc.not_equal(cur, prev), True), both_null))
    return by_key, new_key


#: Scores of rows that cannot win (null value) and of valued rows without a time; real times rank above.
_NONE = np.iinfo(np.int64).min
_NO_TIME = _NONE + 1


def _guard_score(value: pa.ChunkedArray, time: pa.ChunkedArray) -> npt.NDArray[Any]:
    """One int64 per row ordering rows as the guard does: null value < null time < time order."""
    if pa.types.is_timestamp(time.type) or pa.types.is_signed_integer(time.type):
        t = pc.fill_null(time.cast(pa.int64()), 0).to_numpy()
        t = np.maximum(t, _NO_TIME + 1)  # only the two sentinels may sit that low
    else:  # strings, floats, ...: their order, as dense ranks
        t = np.asarray(pc.rank(time, sort_keys="ascending", tiebreaker="dense"), dtype=np.int64)
    t = np.where(_bools(pc.is_valid(time)), t, _NO_TIME)
    return np.where(_bools(pc.is_valid(value)), t, _NONE)


def _bools(values: pa.ChunkedArray | pa.Array) -> npt.NDArray[Any]:
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=bool)
