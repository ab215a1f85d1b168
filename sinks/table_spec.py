"""What an exactly-once sink writes into one Delta table, checked once and shared by its parts.

The stager, the committer and the table bootstrap all read the same few settings (schema, partition
columns, mode, merge keys, file size); a frozen, validated ``TableSpec`` keeps them in agreement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa

from lakestream.merge_reduce import reduce_guarded, reduce_latest
from lakestream.merge_spec import MergeSpec

WriteMode = Literal["append", "merge", "upsert"]
DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024


@dataclass(frozen=True)
class TableSpec:
    """One Delta table as a sink writes it: append Parquet files, or MERGE / upsert by key.

    Validated on construction: every mistake is a ``ValueError`` that says what to change.
    """

    table_uri: str
    schema: pa.Schema
    mode: WriteMode = "append"
    partition_by: tuple[str, ...] = ()
    merge: MergeSpec | None = None
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    storage_options: dict[str, str] | None = None

    @classmethod
    def of(
        cls,
        *,
        table_uri: str,
        schema: pa.Schema,
        mode: WriteMode = "append",
        partition_by: Sequence[str] | None = None,
        merge: MergeSpec | None = None,
        target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
        storage_options: Mapping[str, str] | None = None,
    ) -> TableSpec:
        """The spec from the keyword options the writer and the global committer take."""
        return cls(
            table_uri=table_uri,
            schema=schema,
            mode=mode,
            partition_by=tuple(partition_by or ()),
            merge=merge,
            target_file_size=target_file_size,
            storage_options=dict(storage_options) if storage_options else None,
        )

    def __post_init__(self) -> None:
        mode, schema, merge = self.mode, self.schema, self.merge
        if mode not in ("append", "merge", "upsert"):
            raise ValueError(f"mode must be 'append', 'merge' or 'upsert', got {mode!r}")
        missing = [c for c in self.partition_by if c not in schema.names]
        if missing:
            raise ValueError(f"partition_by names columns the schema does not have: {', '.join(missing)}")
        if mode == "append" and merge is not None:
            raise ValueError("merge= is only used by mode='merge' or 'upsert'; drop it for mode='append'")
        if mode in ("merge", "upsert"):
            if merge is None:
                raise ValueError(f"mode={mode!r} needs merge=MergeSpec(keys=...) to know the key columns")
            merge.validate(schema)
            if mode == "merge" and merge.protected:
                raise ValueError("MergeSpec.protected is an upsert rule: use mode='upsert' for it")
            if mode == "upsert" and (merge.guarded or merge.greatest):
                raise ValueError(
                    "mode='upsert' replaces whole rows and ignores guards: use mode='merge' for a MergeSpec "
                    "with guarded/greatest columns, or MergeSpec(keys=...) alone for upsert"
                )
        if self.target_file_size < 1:
            raise ValueError(f"target_file_size must be positive bytes, got {self.target_file_size}")

    def pre_reduce(self, rows: pa.Table) -> pa.Table:
        """One row per key, as the MERGE would fold ``rows`` in order (merge/upsert mode only)."""
        assert self.merge is not None
        if self.mode == "upsert":
            return reduce_latest(rows, self.merge.keys)
        return reduce_guarded(rows, self.merge)
