"""The source's position in a Delta table, kept in Flink state: the whole of its exactly-once story.

The offset names the next unit to emit (a version or the initial snapshot, and a position in its ordered
file list) and the table it belongs to; it is a small JSON string in a Flink ``ValueState[str]``. What it
means and why restores are exact: DESIGN.md section 6.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from sources.errors import OffsetMismatchError

OFFSET_FORMAT = 1


@dataclass(frozen=True, slots=True)
class SourceOffset:
    """Position of the next unit to emit (DESIGN.md section 6)."""

    version: int
    index: int = 0
    in_snapshot: bool = False
    #: Delta ``metaData.id`` of the table the offset belongs to ("" until known).
    table_id: str = ""
    #: Event-time column the initial snapshot is ordered by ("" = modification time, path).
    snapshot_order: str = ""

    def __post_init__(self) -> None:
        if self.version < 0 or self.index < 0:
            raise ValueError(f"offset version and index must be >= 0, got {self.version}/{self.index}")

    @property
    def last_complete_version(self) -> int:
        """Newest version whose emission is complete (-1: none; the snapshot counts as version v)."""
        if self.in_snapshot:
            return -1
        return self.version - 1

    def advance_to(self, version: int, index: int = 0, *, in_snapshot: bool = False) -> SourceOffset:
        """A later offset of the same table."""
        return replace(self, version=version, index=index, in_snapshot=in_snapshot)

    def to_json(self) -> str:
        """Compact JSON for Flink state."""
        return json.dumps(
            {
                "format": OFFSET_FORMAT,
                "version": self.version,
                "index": self.index,
                "in_snapshot": self.in_snapshot,
                "table_id": self.table_id,
                "snapshot_order": self.snapshot_order,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> SourceOffset:
        """Parse what :meth:`to_json` wrote."""
        data = json.loads(text)
        if data.get("format") != OFFSET_FORMAT:
            raise ValueError(f"unknown Delta source offset format {data.get('format')!r} in state: {text!r}")
        return cls(
            version=int(data["version"]),
            index=int(data["index"]),
            in_snapshot=bool(data["in_snapshot"]),
            table_id=str(data.get("table_id", "")),
            snapshot_order=str(data.get("snapshot_order", "")),
        )

    def check_table(self, table_id: str, table_uri: str) -> None:
        """Fail when the offset was taken on another table than the one at ``table_uri`` now."""
        if self.table_id and table_id and self.table_id != table_id:
            raise OffsetMismatchError(
                f"the restored stream offset belongs to Delta table id {self.table_id}, but {table_uri} "
                f"now holds table id {table_id} (the table was dropped and re-created, or the checkpoint "
                f"belongs to another job): start from a fresh checkpoint"
            )
