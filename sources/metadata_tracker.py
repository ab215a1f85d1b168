"""The table metadata in effect where a stream stands, and the checks every metadata must pass.

Each plan starts from the metadata before its offset's version and follows the metadata changes it
reads; each one is checked against the stream's read schema (``schema_changes``) and for features the
source cannot read (column mapping). The last one is kept, so consecutive polls read no metadata again.
"""

from __future__ import annotations

import pyarrow as pa

from sources.offsets import SourceOffset
from sources.options import SchemaChanges
from sources.schema_compat import check_version_schema
from sources.start_point import latest_version
from storage.delta_log import DeltaLog, TableMetadata
from storage.read_errors import UnsupportedTableError


class MetadataTracker:
    """The metadata in effect before a version of one table, cached for the offset the next plan starts at."""

    def __init__(self, log: DeltaLog, read_schema: pa.Schema, schema_changes: SchemaChanges) -> None:
        self.log = log
        self.read_schema = read_schema
        self.schema_changes = schema_changes
        #: (version v, metadata in effect before v) for the offset the next plan starts from.
        self._meta: tuple[int, TableMetadata] | None = None

    def remember(self, version: int, meta: TableMetadata) -> None:
        """``meta`` is in effect before ``version``: where the next plan starts."""
        self._meta = (version, meta)

    def before(self, offset: SourceOffset) -> TableMetadata:
        """Metadata in effect before ``offset.version`` (at the snapshot version for a snapshot offset)."""
        key = offset.version
        if self._meta is not None and self._meta[0] == key:
            return self._meta[1]
        from deltalake.exceptions import DeltaError

        candidates = [key] if offset.in_snapshot else [key - 1, key]
        meta: TableMetadata | None = None
        for v in candidates:
            if v < 0:
                continue
            try:
                meta = self.log.metadata_at(v)
                break
            except DeltaError:
                continue
        if meta is None:
            # Version 0 carries its own metaData; anything else unreadable is a log gap, found later.
            if key == 0 and not offset.in_snapshot:
                meta = TableMetadata("", "", (), {})
            else:
                meta = self.log.metadata_at(latest_version(self.log))
        else:
            self.check(meta, version=max(key - (0 if offset.in_snapshot else 1), 0))
        offset.check_table(meta.table_id, self.log.table_uri)
        self._meta = (key, meta)
        return meta

    def check(self, meta: TableMetadata, *, version: int) -> None:
        """Refuse metadata the stream cannot read on with (column mapping, an incompatible schema)."""
        if meta.column_mapping_mode not in ("", "none"):
            raise UnsupportedTableError(
                f"{self.log.table_uri} uses column mapping "
                f"(delta.columnMapping.mode={meta.column_mapping_mode!r}); the Delta source reads data files "
                "by physical column name and does not support it yet"
            )
        if meta.schema_string:
            check_version_schema(
                self.read_schema, meta.arrow_schema(), version=version, mode=self.schema_changes
            )
