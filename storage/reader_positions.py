"""Where each Delta-source reader of a table stands, recorded beside the table for its maintenance.

A reader that is behind, or restores an older checkpoint, still needs the files and commits of every
version from the one its offset state names, which VACUUM and log cleanup would delete. PyFlink gives
the source no checkpoint hook, so it records that version with the time whenever it changes and every
``RECORD_EVERY_MS``, keeping ``HISTORY_MS`` of entries, in
``<table>/_lakestream/readers/<reader id, percent-encoded>.json`` (``storage.table_files``: a local
folder or an object store); ``lakestream maintain`` reads them to know how far back each reader may
still go (DESIGN.md section 10).
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass

from storage.local_files import path_segment
from storage.table_files import TableFiles

log = logging.getLogger(__name__)

READERS_DIR = "_lakestream/readers"
RECORD_FORMAT = 1
#: A reader whose version stays the same rewrites its record this often (its time moves on).
RECORD_EVERY_MS = 10_000
#: How much position history a record keeps: the longest a restore may go back behind the reader's
#: newest entry (checkpoint interval plus checkpoint timeout) must fit into it.
HISTORY_MS = 6 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class ReaderRecord:
    """One reader's recent positions: ``(recorded_ms, version its offset state held)``, oldest first."""

    reader: str
    table_id: str
    updated_ms: int
    positions: tuple[tuple[int, int], ...]

    def needed_version(self, horizon_ms: int) -> int:
        """The oldest version a restore of this reader may go back to.

        A restore goes back to a checkpoint taken at most ``horizon_ms`` before the newest entry; the
        offset state then held is at or after the entry recorded last before that time (offsets only
        move forward within one run, and a restore records its lower offset again at its first poll).
        """
        cutoff = self.updated_ms - horizon_ms
        inside = [v for t, v in self.positions if t >= cutoff]
        before = [v for t, v in self.positions if t < cutoff]
        candidates = inside + before[-1:]
        return min(candidates) if candidates else 0

    def to_json(self) -> str:
        """Serialized form (versioned by ``format``)."""
        return json.dumps(
            {
                "format": RECORD_FORMAT,
                "reader": self.reader,
                "table_id": self.table_id,
                "updated_ms": self.updated_ms,
                "positions": [list(p) for p in self.positions],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> ReaderRecord:
        """Parse what :meth:`to_json` wrote; refuses formats this code does not know."""
        doc = json.loads(text)
        if doc.get("format") != RECORD_FORMAT:
            raise ValueError(f"unknown reader record format {doc.get('format')!r} (expected {RECORD_FORMAT})")
        return cls(
            reader=str(doc["reader"]),
            table_id=str(doc.get("table_id", "")),
            updated_ms=int(doc["updated_ms"]),
            positions=tuple((int(t), int(v)) for t, v in doc["positions"]),
        )


def with_position(
    record: ReaderRecord | None,
    *,
    reader: str,
    table_id: str,
    version: int,
    now_ms: int,
    history_ms: int = HISTORY_MS,
) -> ReaderRecord:
    """``record`` with the position ``version`` observed at ``now_ms`` added, history pruned.

    Entries older than ``history_ms`` go, except the newest of them: it is the state at the start of
    the kept window. Consecutive entries of one version collapse into the first (it says the most).
    """
    # An id not known yet ("") matches any: dropping the history then would lose the oldest position.
    same = record is not None and (record.table_id == table_id or not record.table_id or not table_id)
    old = record.positions if record is not None and same else ()
    table_id = table_id or (record.table_id if record is not None and same else "")
    positions = list(old)
    if not positions or positions[-1][1] != version:
        positions.append((now_ms, version))
    cutoff = now_ms - history_ms
    older = [p for p in positions if p[0] < cutoff]
    kept = older[-1:] + [p for p in positions if p[0] >= cutoff]
    return ReaderRecord(reader=reader, table_id=table_id, updated_ms=now_ms, positions=tuple(kept))


def record_path(reader: str) -> str:
    """Where the record of ``reader`` lives, relative to the table root (any reader id is a safe name)."""
    return f"{READERS_DIR}/{path_segment(reader)}.json"


def read_records(files: TableFiles) -> list[ReaderRecord]:
    """Every reader record of the table, sorted by reader id (unreadable ones are logged and skipped)."""
    out = []
    for info in files.list(READERS_DIR, recursive=False):
        if not info.path.endswith(".json"):
            continue  # a local write's temp file
        data = files.read(info.path)
        if data is None:
            continue  # forgotten meanwhile
        try:
            out.append(ReaderRecord.from_json(data.decode("utf-8")))
        except (ValueError, KeyError) as exc:
            log.warning("skipping unreadable reader record %s/%s: %s", files.uri, info.path, exc)
    return sorted(out, key=lambda r: r.reader)


def forget(files: TableFiles, reader: str) -> bool:
    """Delete the record of a reader that is gone for good; False when there was none."""
    path = record_path(reader)
    if files.info(path) is None:
        return False
    files.delete(path)
    return True


def write_record(files: TableFiles, record: ReaderRecord) -> None:
    """Replace the record whole (``TableFiles.write_atomic``): a reader of it sees old or new, never torn."""
    files.write_atomic(record_path(record.reader), record.to_json().encode("utf-8"))


class PositionRecorder:
    """The Flink source's side: observe the offset state's version on each poll, write when it changed
    (or went back) and when ``every_ms`` passed since the last write.

    A failure to write is logged once and never fails the stream: the record only informs maintenance.
    """

    def __init__(self, files: TableFiles, reader: str, *, every_ms: int = RECORD_EVERY_MS) -> None:
        self.files = files
        self.reader = reader
        self.every_ms = every_ms
        self._record: ReaderRecord | None = None
        self._written_ms: int | None = None
        self._written_version: int | None = None
        self._warned = False
        # Best effort: without the earlier record the history starts anew, which only loses old entries.
        with contextlib.suppress(Exception):
            data = files.read(record_path(reader))
            self._record = ReaderRecord.from_json(data.decode("utf-8")) if data is not None else None

    def flush(self) -> bool:
        """Write what was observed since the last write (at the end of a task); True when written."""
        if self._record is None or self._written_ms == self._record.updated_ms:
            return False
        return self._write()

    def observe(self, *, version: int, table_id: str, now_ms: int) -> bool:
        """Note the offset state's version; True when the record was written."""
        self._record = with_position(
            self._record, reader=self.reader, table_id=table_id, version=version, now_ms=now_ms
        )
        # Another version than the one on disk (a restore's lower one included) is written at once.
        moved = version != self._written_version
        due = moved or self._written_ms is None or now_ms - self._written_ms >= self.every_ms
        if not due:
            return False
        return self._write()

    def _write(self) -> bool:
        assert self._record is not None
        try:
            write_record(self.files, self._record)
        except Exception as exc:  # noqa: BLE001 - any failure of the disk or the store: logged, never fatal
            if not self._warned:
                log.warning(
                    "cannot record the position of reader %s in %s: %s", self.reader, self.files.uri, exc
                )
                self._warned = True
            return False
        self._written_ms = self._record.updated_ms
        self._written_version = self._record.positions[-1][1]
        return True
