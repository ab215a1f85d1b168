"""A temporary folder of the local JVM's own, removed when the process that started the JVM exits.

Why: the local MiniCluster's working folder (``minicluster_*``: RocksDB's working copies, the job's
blobs), its extracted RPC jar and its I/O folders would otherwise stay behind in the system's temporary
folder after every local run, until periodic runs and test suites fill the disk. The JVM gets
``-Djava.io.tmpdir`` (Flink's ``io.tmp.dirs`` default) pointing here instead. A folder whose process
died without cleaning up (kill -9) is removed by the next local run.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

#: Name of a scratch folder: the owning process's id, then ``tempfile``'s random part.
PREFIX = "lakestream-jvm-"
_NAME = re.compile(re.escape(PREFIX) + r"(\d+)-")


def create(parent: Path | None = None) -> Path | None:
    """A new scratch folder for a JVM started by this process, after removing orphaned ones; None when
    the temporary folder's path has white space (PyFlink's launcher splits ``JVM_ARGS`` at it)."""
    base = Path(parent or tempfile.gettempdir())
    if any(c.isspace() for c in str(base)):
        return None
    prune(base)
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base))


def owner(folder: Path) -> int | None:
    """The id of the process that created ``folder`` (a scratch folder), else None."""
    match = _NAME.match(folder.name)
    return int(match.group(1)) if match else None


def alive(pid: int) -> bool:
    """Whether a process with id ``pid`` exists (one of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def prune(base: Path) -> list[Path]:
    """Remove the scratch folders under ``base`` whose process no longer runs; return them."""
    removed: list[Path] = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for folder in entries:
        pid = owner(folder)
        if pid is None or pid == os.getpid() or alive(pid) or not folder.is_dir():
            continue
        remove(folder)
        removed.append(folder)
    return removed


def remove(folder: Path) -> None:
    """Delete ``folder`` and what it holds; files another process deletes meanwhile are no error."""
    shutil.rmtree(folder, ignore_errors=True)
