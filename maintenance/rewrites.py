"""One rewrite of a table at a time, and a check that a rewrite did not duplicate rows.

delta-rs 1.6 does not detect two OPTIMIZE commits planned on one snapshot: both remove the same files
with ``dataChange = false`` and both land, so the rewritten rows are in the table twice. lakestream's
own rewrites therefore take an exclusive lock per table (``storage.table_lock``, beside the table, on a
local disk or an object store), and after each one ``duplicated_by`` checks the commits between its
read version and its own for removes of the same files, which is how a rewrite by another engine
racing it shows (DESIGN.md section 10).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from maintenance.facts import TableRef
from maintenance.maintenance_errors import MaintenanceError
from storage.delta_log import Commit, DeltaLog, commit_file
from storage.table_lock import LockHeldError, TableLock

#: The lock every lakestream rewrite of a table takes (``<table>/_lakestream/locks/maintenance/``).
LOCK_NAME = "maintenance"


class TableBusyError(MaintenanceError):
    """Another lakestream maintenance rewrite holds the table's lock."""


class DuplicatedRowsError(MaintenanceError):
    """A rewrite raced another rewrite of the same files: their rows are in the table twice."""


@contextlib.contextmanager
def rewrite_lock(ref: TableRef, operation: str, *, wait_s: float = 60.0) -> Iterator[None]:
    """Hold the table's maintenance lock for ``operation``; wait up to ``wait_s`` for another holder.

    ``TableBusyError`` names the holder, and when it lets go at the latest.
    """
    lock = TableLock(ref.files(), LOCK_NAME)
    try:
        held = lock.acquire(operation, wait_s=wait_s)
    except LockHeldError as exc:
        raise TableBusyError(
            f"{operation} of {ref.name}: another maintenance rewrite holds {lock.where} for more than "
            f"{wait_s:.0f}s: {exc.state.describe(lock.lease_ms)}. Two rewrites of one table at once would "
            "duplicate rows (delta-rs does not detect it)",
            fix="wait for it to finish and run again, or stop it; a holder stopped without letting go keeps "
            "the lock until the time named, one on this host only while its process runs",
        ) from None
    try:
        yield
    finally:
        held.release()


def duplicated_by(ref: TableRef, version: int) -> list[tuple[int, str]]:
    """(other version, path) for every file that commit ``version`` removed after a commit between its
    read version and itself had removed it already: those rows were rewritten twice."""
    log = DeltaLog(ref.uri, details=True)
    mine = _commit(log, version)
    read = mine.info.get("readVersion")
    if not isinstance(read, int):
        return []
    removed = {r.path for r in mine.removes}
    clashes = []
    for other in range(read + 1, version):
        clashes += [(other, r.path) for r in _commit(log, other).removes if r.path in removed]
    return clashes


def find_commit(ref: TableRef, *, after: int, key: str, token: str) -> int | None:
    """The first version after ``after`` whose commit info has ``key = token`` (None: not there)."""
    log = DeltaLog(ref.uri, details=True)
    latest = log.table().version()
    for version in range(after + 1, latest + 1):
        if _commit(log, version).info.get(key) == token:
            return version
    return None


def _commit(log: DeltaLog, version: int) -> Commit:
    """The commit of ``version``, with its ``commitInfo``; these recent commits are never cleaned up."""
    commit = log.read_commit(version)
    if commit is None:
        raise FileNotFoundError(f"{log.table_uri}/{commit_file(version)}")
    return commit


def check_rewrite(ref: TableRef, version: int, operation: str) -> None:
    """Raise ``DuplicatedRowsError`` when the rewrite committed as ``version`` raced another one."""
    clashes = duplicated_by(ref, version)
    if not clashes:
        return
    others = sorted({v for v, _ in clashes})
    raise DuplicatedRowsError(
        f"{operation} of {ref.name} committed version {version}, but version(s) {others} had already "
        f"rewritten {len(clashes)} of the same files (e.g. {clashes[0][1]}): their rows are in the table "
        f"twice from version {version} on. Another engine or host optimized the table at the same time; "
        f"stop the jobs that write it and restore version {version - 1} "
        f"(`lakestream maintain restore {ref.name} --version {version - 1} --force`) if nothing was "
        "committed after it, else rewrite the table without the duplicates. Run one maintainer per table."
    )
