"""The source's position in a Delta table, kept in Flink state: the whole of its exactly-once story.

The offset names the next unit to emit (a version or the initial snapshot, and a position in its ordered
file list) and the table it belongs to; it is a small JSON string in a Flink ``ValueState[str]``. What it
means and why restores are exact: DESIGN.md section 6.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace

from sources.source_errors import OffsetMismatchError

OFFSET_FORMAT = 1

#: Progress keys (``lakestream.progress``) of an offset, as the change feed's sinks record it.
PROGRESS_VERSION = "delta/version"
PROGRESS_INDEX = "delta/index"
PROGRESS_SNAPSHOT = "delta/snapshot"
PROGRESS_TABLE = "delta/table"
PROGRESS_KEYS = (PROGRESS_VERSION, PROGRESS_INDEX, PROGRESS_SNAPSHOT, PROGRESS_TABLE)


def table_id_code(table_id: str) -> int:
    """A 60-bit code of a Delta table id, so a txn action (a number) can say which table it means."""
    return int(hashlib.sha256(table_id.encode("utf-8")).hexdigest()[:15], 16)


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

    def progress(self) -> dict[str, int]:
        """This offset as progress values (``lakestream.progress``), recorded with the rows before it.

        Only for offsets without an event-time snapshot order (the change feed never sets one).
        """
        if self.snapshot_order:
            raise ValueError("an offset of an event-time ordered snapshot cannot be recorded as progress")
        values = {
            PROGRESS_VERSION: self.version,
            PROGRESS_INDEX: self.index,
            PROGRESS_SNAPSHOT: int(self.in_snapshot),
        }
        if self.table_id:
            values[PROGRESS_TABLE] = table_id_code(self.table_id)
        return values

    @classmethod
    def from_progress(
        cls, values: Mapping[str, int], *, table_id: str, table_uri: str
    ) -> SourceOffset | None:
        """The offset recorded as ``values`` (None when none is), checked against the table now there."""
        if PROGRESS_VERSION not in values:
            return None
        recorded = values.get(PROGRESS_TABLE)
        if recorded is not None and table_id and recorded != table_id_code(table_id):
            raise OffsetMismatchError(
                f"the recorded position (version {values[PROGRESS_VERSION]}) belongs to another Delta "
                f"table than the one at {table_uri} now (table id {table_id}: the table was dropped and "
                "re-created); start over with --fresh"
            )
        return cls(
            version=int(values[PROGRESS_VERSION]),
            index=int(values.get(PROGRESS_INDEX, 0)),
            in_snapshot=bool(values.get(PROGRESS_SNAPSHOT, 0)),
            table_id=table_id,
        )

    def describe(self) -> str:
        """In words: ``version 7``, ``the initial snapshot of version 5 at file 3``."""
        where = f"version {self.version}"
        if self.in_snapshot:
            where = f"the initial snapshot of {where}"
        return where if self.index == 0 else f"{where} at file {self.index}"

    def check_table(self, table_id: str, table_uri: str) -> None:
        """Fail when the offset was taken on another table than the one at ``table_uri`` now."""
        if self.table_id and table_id and self.table_id != table_id:
            raise OffsetMismatchError(
                f"the restored stream offset belongs to Delta table id {self.table_id}, but {table_uri} "
                f"now holds table id {table_id} (the table was dropped and re-created, or the checkpoint "
                f"belongs to another job): start from a fresh checkpoint"
            )
