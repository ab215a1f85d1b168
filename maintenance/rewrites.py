"""One rewrite of a table at a time, and a check that a rewrite did not duplicate rows.

delta-rs 1.6 does not detect two OPTIMIZE commits planned on one snapshot: both remove the same files
with ``dataChange = false`` and both land, so the rewritten rows are in the table twice. lakestream's
own rewrites therefore take an exclusive lock per table (``<table>/_lakestream/maintenance.lock``,
``fcntl.flock``, local tables), and after each one ``duplicated_by`` checks the commits between its
read version and its own for removes of the same files, which is how a rewrite by another engine or
host racing it shows (DESIGN.md section 10).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

from maintenance.facts import TableRef, now_ms
from maintenance.maintenance_errors import MaintenanceError
from storage.delta_log import Commit, DeltaLog, commit_file

LOCK_FILE = Path("_lakestream") / "maintenance.lock"


class TableBusyError(MaintenanceError):
    """Another lakestream maintenance rewrite holds the table's lock."""


class DuplicatedRowsError(MaintenanceError):
    """A rewrite raced another rewrite of the same files: their rows are in the table twice."""


@contextlib.contextmanager
def rewrite_lock(ref: TableRef, operation: str, *, wait_s: float = 60.0) -> Iterator[None]:
    """Hold the table's maintenance lock for ``operation``; wait up to ``wait_s`` for another holder.

    Object-store tables have no lock (see the README's limitations).
    """
    root = ref.local_root
    if root is None:
        yield
        return
    path = root / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = path.read_text(encoding="utf-8", errors="replace").strip() or "unknown"
                    raise TableBusyError(
                        f"{operation} of {ref.name}: another maintenance rewrite holds {path} ({holder}) for "
                        f"more than {wait_s:.0f}s; two rewrites of one table at once would duplicate rows "
                        "(delta-rs does not detect it). Wait for it to finish, or stop it."
                    ) from None
                time.sleep(0.1)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "operation": operation, "since_ms": now_ms()}).encode())
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


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
