"""A class-data archive for the local JVM (CDS): Flink's classes mapped from one file, not loaded one by one.

Every local job starts a JVM that would otherwise load and verify Flink's classes jar by jar. The first
run writes the archive when its JVM exits (``-XX:ArchiveClassesAtExit``), later runs map it
(``-XX:SharedArchiveFile``). An archive holds only for the ``java`` and class path it was written with,
so its name is a digest of both (and of the kind of job); it is renamed to that name only after its JVM
ended by itself, so no JVM maps a half-written file. A run without one is slower, not wrong.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

#: The JVM's messages about archives (classes it skips while writing one, an archive it cannot use).
QUIET = "-Xlog:cds=off,cds+dynamic=off,class+path=off"
SUFFIX = ".jsa"
#: Suffix of a run's archive until it is published.
PART = ".part"
#: Archives kept (of other JDKs or Flinks too); older ones are deleted when a new one is published.
KEEP = 8
#: A run's unpublished file older than this belongs to a run that died while writing it.
STALE_S = 3600.0


@dataclass(frozen=True)
class ArchivePlan:
    """The JVM options of one launch, and the file to publish once its JVM exited (None: nothing)."""

    options: tuple[str, ...]
    final: Path
    pending: Path | None = None


def archive_key(java: Path, jars: Iterable[Path], *, extra: str = "") -> str:
    """A digest of the ``java`` binary, the class path's jars (path, size, modification time) and
    ``extra`` (more of the class path, as text)."""
    digest = hashlib.sha256(extra.encode())
    for path in [java.resolve(), *jars]:
        st = _stat(path)
        if st is not None:
            digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:20]


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except OSError:  # gone meanwhile (another run published or pruned it)
        return None


def plan(folder: Path, key: str, *, pid: int | None = None) -> ArchivePlan:
    """Map the archive of ``key`` when ``folder`` has it, else write one under a name of this run."""
    final = folder / f"{key}{SUFFIX}"
    if final.is_file():
        return ArchivePlan((f"-XX:SharedArchiveFile={final}", QUIET), final)
    folder.mkdir(parents=True, exist_ok=True)
    pending = folder / f"{key}.{pid or os.getpid()}{PART}"
    return ArchivePlan((f"-XX:ArchiveClassesAtExit={pending}", QUIET), final, pending)


def publish(archive: ArchivePlan, returncode: int | None) -> bool:
    """After the JVM exited with ``returncode``: rename its archive to the final name if the JVM ended
    by itself (any exit status: PyFlink's gateway exits with 1) and wrote one, else delete what it
    wrote (a JVM killed by a signal may have written part of it); then prune the folder. Whether it
    published."""
    if archive.pending is None:
        return False
    st = _stat(archive.pending)
    done = returncode is not None and returncode >= 0 and st is not None and st.st_size > 0
    if done:
        os.replace(archive.pending, archive.final)
    else:
        archive.pending.unlink(missing_ok=True)
    prune(archive.final.parent)
    return done


def prune(folder: Path, *, keep: int = KEEP, now: float | None = None) -> None:
    """Delete all but the ``keep`` newest archives, and unpublished files older than ``STALE_S``."""
    now = time.time() if now is None else now
    times = {p: st.st_mtime for p in folder.iterdir() if (st := _stat(p)) is not None}
    archives = sorted((p for p in times if p.name.endswith(SUFFIX)), key=times.__getitem__, reverse=True)
    stale = [p for p, t in times.items() if p.name.endswith(PART) and now - t > STALE_S]
    for path in [*archives[keep:], *stale]:
        path.unlink(missing_ok=True)
