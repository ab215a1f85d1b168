"""What an exactly-once sink writes into one Delta table, checked once and shared by its parts.

The stager, the committer and the table bootstrap all read the same few settings (schema, partition
columns, mode, merge keys, file size); a frozen, validated ``TableSpec`` keeps them in agreement. It is
the one place those settings are listed: the Flink sink's ``DeltaSinkSpec`` holds one, and the writer
and the global committer take one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa

from lakestream.merge_reduce import reduce_guarded, reduce_latest
from lakestream.merge_spec import MergeSpec
from storage.object_store import options_for

WriteMode = Literal["append", "merge", "upsert", "changes"]
WRITE_MODES: tuple[str, ...] = ("append", "merge", "upsert", "changes")
DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024


@dataclass(frozen=True)
class TableSpec:
    """One Delta table as a sink writes it: append Parquet files, MERGE / upsert by key, or append
    each commit's rows folded per key and stamped with a commit sequence (``changes``, the changes
    table of a merge-on-read layout, DESIGN.md section 13).

    ``schema`` is what the writers write and stage; the table has ``table_schema`` (``schema`` and, in
    changes mode, ``sequence_column``). Validated on construction: every mistake is a ``ValueError``
    that says what to change.
    """

    table_uri: str
    schema: pa.Schema
    mode: WriteMode = "append"
    #: Any sequence of column names; kept as a tuple.
    partition_by: Sequence[str] = ()
    merge: MergeSpec | None = None
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    #: Copied; None when empty. For an object-store table left None, the store's settings of the process
    #: that builds the spec (``storage.object_store.settings_from_environment``), so that the writers on
    #: a TaskManager reach the same store with only the credentials in their own environment.
    storage_options: dict[str, str] | None = None
    #: Changes mode: the int64 column each commit stamps on its rows (the table version it lands at).
    sequence_column: str | None = None
    #: Merge/changes mode: the event-time column whose greatest value each commit records as the table's
    #: freshness (``lakestream.freshness``), with its checkpoint.
    freshness_column: str | None = None
    #: Columns the files delta-rs writes for this table carry bloom filters of (where it has them).
    bloom_filter_columns: Sequence[str] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "partition_by", tuple(self.partition_by))
        object.__setattr__(self, "bloom_filter_columns", tuple(self.bloom_filter_columns))
        object.__setattr__(self, "storage_options", options_for(self.table_uri, self.storage_options))
        mode, schema, merge = self.mode, self.schema, self.merge
        if mode not in WRITE_MODES:
            raise ValueError(f"mode must be one of {', '.join(WRITE_MODES)}, got {mode!r}")
        if (mode == "changes") != (self.sequence_column is not None):
            raise ValueError(
                "sequence_column= names the commit sequence column of mode='changes' and is needed there "
                f"only; got mode={mode!r} with sequence_column={self.sequence_column!r}"
            )
        if mode == "changes" and self.partition_by:
            raise ValueError("mode='changes' writes one file per commit, unpartitioned: drop partition_by")
        if self.sequence_column is not None and self.sequence_column in schema.names:
            raise ValueError(
                f"sequence_column {self.sequence_column!r} is a column of the written rows: the commit "
                "stamps it, so leave it out of schema="
            )
        missing = [c for c in self.partition_by if c not in schema.names]
        if missing:
            raise ValueError(f"partition_by names columns the schema does not have: {', '.join(missing)}")
        if mode == "append" and merge is not None:
            raise ValueError(
                "merge= is only used by mode='merge', 'upsert' or 'changes'; drop it for mode='append'"
            )
        if mode in ("merge", "upsert", "changes"):
            if merge is None:
                raise ValueError(f"mode={mode!r} needs merge=MergeSpec(keys=...) to know the key columns")
            merge.validate(schema)
            if mode in ("merge", "changes") and merge.protected:
                raise ValueError("MergeSpec.protected is an upsert rule: use mode='upsert' for it")
            if mode == "upsert" and (merge.guarded or merge.greatest):
                raise ValueError(
                    "mode='upsert' replaces whole rows and ignores guards: use mode='merge' for a MergeSpec "
                    "with guarded/greatest columns, or MergeSpec(keys=...) alone for upsert"
                )
        if self.freshness_column is not None:
            if mode == "append":
                raise ValueError("freshness_column= is for mode='merge', 'upsert' or 'changes'")
            if self.freshness_column not in schema.names:
                raise ValueError(f"freshness_column {self.freshness_column!r} is not a column of the rows")
        if self.target_file_size < 1:
            raise ValueError(f"target_file_size must be positive bytes, got {self.target_file_size}")

    @property
    def table_schema(self) -> pa.Schema:
        """The table's columns: ``schema``, then the sequence column in changes mode."""
        if self.sequence_column is None:
            return self.schema
        return self.schema.append(pa.field(self.sequence_column, pa.int64()))

    def pre_reduce(self, rows: pa.Table) -> pa.Table:
        """One row per key, as the MERGE would fold ``rows`` in order (merge/upsert/changes mode)."""
        assert self.merge is not None
        if self.mode == "upsert":
            return reduce_latest(rows, self.merge.keys)
        return reduce_guarded(rows, self.merge)
