"""Reading a merge-on-read table: its snapshot and changes tables as one current table.

``MergeOnReadTable`` names the two tables, their columns and their rule; ``read_current`` gives the
current row of every key (or of some values of the key) by the rule of
``lakestream.merge_on_read_rule``, reading the changes table before the snapshot so that the snapshot read
holds at least every change the changes read misses. ``view_sql`` is the same read as one SQL query
for engines that register the two Delta tables (delta-rs' DataFusion; Spark SQL with the ``spark``
dialect). The compaction
that folds the changes into the snapshot is ``merge_on_read.fold_changes``; DESIGN.md section 13.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, Field, QueryBuilder
from deltalake.exceptions import TableNotFoundError
from deltalake.schema import PrimitiveType

from lakestream.config import Config
from lakestream.merge_on_read_rule import check_sequenced, current_rows
from lakestream.merge_on_read_rule import view_sql as rule_view_sql
from lakestream.merge_spec import MergeSpec
from merge_on_read.sorted_runs import CompactionPolicy, run_rank
from sinks.table_bootstrap import open_table
from sinks.table_spec import DEFAULT_TARGET_FILE_SIZE, TableSpec
from storage.delta_log import open_filesystem
from storage.object_store import options_for
from storage.parquet_read import ParquetFile, parquet_file, read_columns

log = logging.getLogger(__name__)

#: Txn app id of the folds in the snapshot table; its version is the highest sequence folded.
FOLD_APP = "lakestream:fold-changes"


@dataclass(frozen=True)
class MergeOnReadTable:
    """A merge-on-read table: its snapshot and changes tables, their columns and their rule."""

    snapshot_uri: str
    changes_uri: str
    #: Columns of both tables, the sequence column included.
    schema: pa.Schema
    #: The rule, with ``seq`` a greatest column (``MergeSpec.sequenced``).
    spec: MergeSpec
    seq: str
    #: Column whose greatest value is the newest event a snapshot holds (freshness), if any.
    event_time: str | None = None
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    storage_options: Mapping[str, str] | None = None
    #: Columns the snapshot's files carry bloom filters of (``storage.parquet_encoding``).
    bloom_filter_columns: tuple[str, ...] = ()
    #: When folds merge the snapshot's sorted runs (``merge_on_read.sorted_runs``).
    compaction: CompactionPolicy = CompactionPolicy()

    def __post_init__(self) -> None:
        object.__setattr__(self, "storage_options", options_for(self.snapshot_uri, self.storage_options))
        check_sequenced(self.spec, self.seq)
        self.spec.validate(self.schema)
        if len(self.spec.keys) != 1:
            raise ValueError(
                f"merge-on-read needs one key column (its runs are sorted by it), got {self.spec.keys}"
            )
        kind = self.schema.field(self.spec.keys[0]).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_integer(kind)):
            raise ValueError(
                f"merge-on-read needs a key column of strings or integers (its runs are sorted by it), "
                f"{self.spec.keys[0]!r} is {kind}"
            )
        if self.event_time is not None and self.event_time not in self.schema.names:
            raise ValueError(f"event_time {self.event_time!r} is not a column of {self.schema.names}")

    def snapshot_spec(self) -> TableSpec:
        """The snapshot as a MERGE table (created with the sink's file size when missing)."""
        return TableSpec(
            table_uri=self.snapshot_uri,
            schema=self.schema,
            mode="merge",
            merge=self.spec,
            target_file_size=self.target_file_size,
            storage_options=dict(self.storage_options or {}),
            bloom_filter_columns=self.bloom_filter_columns,
        )

    def open_snapshot(self) -> DeltaTable:
        """The snapshot table, created empty when missing; a table with every column but the sequence
        (a copy-on-write table switched to this layout) gets the sequence column, null in its rows."""
        snapshot = open_snapshot_if_any(self)
        if snapshot is not None and self.seq not in snapshot.schema().to_arrow().names:
            snapshot.alter.add_columns([Field(self.seq, PrimitiveType("long"), nullable=True)])
            log.info("%s: added the sequence column %s (merge-on-read layout)", self.snapshot_uri, self.seq)
        return open_table(self.snapshot_spec(), log_name=f"{self.snapshot_uri} (fold)")

    def open_changes(self) -> DeltaTable | None:
        """The changes table, or None before its first commit."""
        try:
            return DeltaTable(self.changes_uri, storage_options=dict(self.storage_options or {}) or None)
        except TableNotFoundError:
            return None


def folded_through(snapshot: DeltaTable) -> int | None:
    """The highest sequence the snapshot holds (its fold point), None before the first fold."""
    version = snapshot.transaction_version(FOLD_APP)
    return None if version is None else int(version)


def query(tables: Mapping[str, DeltaTable], sql: str) -> pa.Table:
    """``sql`` over the tables registered by name, in delta-rs' DataFusion engine (strings come back as
    ``string_view``, which pyarrow 16 cannot cast: for showing results, not for the read path)."""
    builder = QueryBuilder()
    for name, dt in tables.items():
        builder = builder.register(name, dt)
    return pa.RecordBatchReader.from_stream(builder.execute(sql)).read_all()


def scan(
    dt: DeltaTable,
    schema: pa.Schema,
    *,
    storage_options: Mapping[str, str] | None = None,
    min_seq: tuple[str, int] | None = None,
    keys: tuple[str, list[str]] | None = None,
    paths: Collection[str] | None = None,
    by_run: bool = False,
) -> pa.Table:
    """The table's rows in ``schema``, reading only the files whose statistics allow a match.

    ``min_seq`` (column, value): rows with the column above the value, the files read in the order of
    their least value of the column (a changes table's files each hold one sequence, so its rows come
    in sequence order); ``keys`` (column, values): rows whose column holds one of the values;
    ``paths``: only the files of these paths (as in the log); ``by_run``: a merge-on-read snapshot's
    files run by run, oldest first (``sorted_runs``), so each key's rows come in sequence order. Each
    file's rows are filtered as it is read, so the peak is the result plus one file. Plain Parquet
    reads without threads: pyarrow's dataset scanner left CLI processes aborting at exit (see
    ``serving.gold_read.query``).
    Partition columns come from the log. Tables without deletion vectors, as lakestream writes them.
    """
    actions = pa.table(dt.get_add_actions(flatten=True))
    keep = np.ones(actions.num_rows, dtype=bool)
    above = np.zeros(actions.num_rows, dtype=bool)  # every row of the file is above min_seq
    if min_seq is not None and f"max.{min_seq[0]}" in actions.column_names:
        column, value = min_seq
        keep &= np.asarray(pc.fill_null(pc.greater(actions[f"max.{column}"], value), True), dtype=bool)
        if f"min.{column}" in actions.column_names and f"null_count.{column}" in actions.column_names:
            least = actions[f"min.{column}"]
            above = np.asarray(pc.fill_null(pc.greater(least, value), False), dtype=bool)
            above &= np.asarray(pc.fill_null(pc.equal(actions[f"null_count.{column}"], 0), False), dtype=bool)
            order = np.asarray(pc.sort_indices(least, null_placement="at_start"))
            actions, keep, above = actions.take(order), keep[order], above[order]
    if by_run and actions.num_rows:
        order = np.asarray(run_rank(actions["path"].to_pylist()), dtype=np.int64)
        actions, keep, above = actions.take(order), keep[order], above[order]
    if keys is not None:
        keep &= _may_hold(actions, *keys)
    if paths is not None:
        wanted_paths = pa.array(list(paths), pa.string())
        keep &= np.asarray(pc.is_in(actions["path"], value_set=wanted_paths), dtype=bool)
    fs = open_filesystem(dt.table_uri, storage_options)
    wanted = None if keys is None else pa.array(keys[1], pa.string())
    parts = []
    chosen = np.flatnonzero(keep)
    file_paths = actions["path"].to_pylist() if actions.num_rows else []
    partition_values = {
        f.name: actions[f"partition.{f.name}"].to_pylist()
        for f in schema
        if f"partition.{f.name}" in actions.column_names
    }
    for i in chosen:
        with fs.open_input_file(unquote(str(file_paths[i]))) as fh:
            pf = parquet_file(fh)
            present = [n for n in schema.names if n in pf.schema_arrow.names]
            groups = None if keys is None else _groups_holding(pf, keys[0], wanted)
            if groups == []:
                continue
            if groups is None:
                data = read_columns(pf, present)
            else:
                data = read_columns(pf, present, row_groups=groups)
        # A column added to the table later (the sequence column) is null in older files.
        columns = [
            data[f.name]
            if f.name in present
            else pa.array([partition_values[f.name][i]] * data.num_rows).cast(f.type)
            if f.name in partition_values
            else pa.nulls(data.num_rows, f.type)
            for f in schema
        ]
        rows = pa.table(columns, names=schema.names).cast(schema)
        del data, columns
        if min_seq is not None and not above[i]:
            rows = rows.filter(pc.greater(rows[min_seq[0]], pa.scalar(min_seq[1], pa.int64())))
        if keys is not None:
            rows = rows.filter(pc.is_in(rows[keys[0]], value_set=wanted))
        parts.append(rows)
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _groups_holding(pf: ParquetFile, column: str, wanted: Any) -> list[int]:
    """The row groups of ``pf`` whose ``column`` holds one of ``wanted``, from that column alone.

    Key lookups: with random-looking keys every file's range covers every key, so the statistics
    prune nothing, but reading one column first and the other columns only where a key is costs a
    fraction of reading every column of every file.
    """
    out = []
    for g in range(pf.metadata.num_row_groups):
        values = read_columns(pf, [column], row_groups=[g])[column]
        if pc.any(pc.is_in(values, value_set=wanted)).as_py():
            out.append(g)
    return out


def _may_hold(actions: pa.Table, column: str, values: list[str]) -> Any:
    """Per file, whether its min/max statistics of ``column`` allow one of ``values``."""
    lo_name, hi_name = f"min.{column}", f"max.{column}"
    n = actions.num_rows
    if lo_name not in actions.column_names or not values:
        return np.full(n, bool(values))
    lo: list[Any] = actions[lo_name].to_pylist()
    hi: list[Any] = actions[hi_name].to_pylist() if hi_name in actions.column_names else [None] * n
    out = np.zeros(n, dtype=bool)
    for i in range(n):
        out[i] = any((lo[i] is None or v >= lo[i]) and (hi[i] is None or v <= hi[i]) for v in values)
    return out


def changes_above(
    changes: DeltaTable | None,
    through: int | None,
    table: MergeOnReadTable,
    *,
    keys: list[str] | None = None,
) -> pa.Table:
    """The change rows with sequence above ``through`` (of the given key values), in ``table.schema``."""
    if changes is None:
        return table.schema.empty_table()
    return scan(
        changes,
        table.schema,
        storage_options=table.storage_options,
        min_seq=None if through is None else (table.seq, through),
        keys=None if keys is None else (table.spec.keys[0], keys),
    )


def open_snapshot_if_any(table: MergeOnReadTable) -> DeltaTable | None:
    """The snapshot table, or None before its first commit (reading never creates it)."""
    try:
        return DeltaTable(table.snapshot_uri, storage_options=dict(table.storage_options or {}) or None)
    except TableNotFoundError:
        return None


def read_current(table: MergeOnReadTable, *, keys: list[str] | None = None) -> pa.Table:
    """The current row of every key, or of the given values of the (single) key column."""
    if keys is not None and len(table.spec.keys) != 1:
        raise ValueError(f"selecting by key values needs one key column, the table has {table.spec.keys}")
    changes = table.open_changes()  # first: see the module docstring
    snapshot = open_snapshot_if_any(table)
    through = None if snapshot is None else folded_through(snapshot)
    pending = changes_above(changes, through, table, keys=keys)
    if snapshot is None:
        base = table.schema.empty_table()
    else:
        key_filter = None if keys is None else (table.spec.keys[0], keys)
        base = scan(
            snapshot, table.schema, storage_options=table.storage_options, keys=key_filter, by_run=True
        )
    return current_rows(base, pending, table.spec, table.seq, snapshot_in_order=True)


def view_sql(
    table: MergeOnReadTable, *, snapshot: str = "snapshot", changes: str = "changes", dialect: str = "ansi"
) -> str:
    """The current table as one SQL query over the relations ``snapshot`` and ``changes``."""
    return rule_view_sql(
        table.spec,
        list(table.schema.names),
        snapshot=snapshot,
        changes=changes,
        seq=table.seq,
        dialect=dialect,
    )


def silver_mor_table(cfg: Config) -> MergeOnReadTable:
    """The merge-on-read silver (``merge_on_read.table.MergeOnReadTable``): ``silver/orders`` as its
    snapshot, ``silver/orders_changes`` as its changes (``tables.silver_layout = "merge_on_read"``)."""
    from lakestream.silver import CHANGE_SEQ, LAST_EVENT_TIME, SILVER_MOR_MERGE, SILVER_MOR_SCHEMA
    from lakestream.table_names import SILVER_CHANGES_TABLE, SILVER_TABLE

    return MergeOnReadTable(
        snapshot_uri=cfg.lakehouse.table_uri(SILVER_TABLE),
        changes_uri=cfg.lakehouse.table_uri(SILVER_CHANGES_TABLE),
        schema=SILVER_MOR_SCHEMA,
        spec=SILVER_MOR_MERGE,
        seq=CHANGE_SEQ,
        event_time=LAST_EVENT_TIME,
        target_file_size=cfg.tables.merge_target_file_size_mb * 1024 * 1024,
        bloom_filter_columns=cfg.tables.bloom_filter_columns,
        compaction=CompactionPolicy(
            max_size_amplification_percent=cfg.tables.silver_max_size_amplification_percent,
            size_ratio_percent=cfg.tables.silver_run_size_ratio_percent,
            max_runs=cfg.tables.silver_max_runs,
        ),
    )
