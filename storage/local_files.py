"""Small files lakestream keeps beside a local table: safe folder names, atomic and durable replacement,
and the start check that a folder a setting names can be written at all.

The sinks' manifests and the Delta source's reader records live in ``<table>/_lakestream/...``; both
name folders or files after ids users choose and are read while they are being replaced.
"""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from pathlib import Path
from urllib.parse import quote

from lakestream.config import env_variable
from lakestream.errors import LakestreamError


def path_segment(name: str) -> str:
    """Injective, path-safe file or folder name for any id (no ``/``, no ``.``/``..``)."""
    return quote(name, safe="").replace(".", "%2E")


def fsync_dir(path: Path) -> None:
    """Make a rename or a new entry in ``path`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str, *, sync_folder: bool = True) -> None:
    """Replace ``path`` with ``text`` (UTF-8); see :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"), sync_folder=sync_folder)


def atomic_write_bytes(path: Path, data: bytes, *, sync_folder: bool = True) -> None:
    """Replace ``path`` with ``data`` so a reader sees the old or the new content, never a torn file.

    Temp file, fsync, rename; then, with ``sync_folder``, an fsync of the folder so the rename itself
    survives a crash (without it a crash may bring the old content back).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    if sync_folder:
        fsync_dir(path.parent)


class UnwritableFolderError(LakestreamError, RuntimeError):
    """A local folder a setting names cannot be created or written; the message names the setting, its
    environment variable, the folder, the operating system's reason and the fix (exit code 2)."""


#: Name prefix of the file :func:`check_writable_folder` writes and removes again.
PROBE_PREFIX = ".lakestream-write-probe-"


def check_writable_folder(folder: Path, *, setting: str) -> None:
    """Fail with :class:`UnwritableFolderError` unless ``folder`` can be created and written.

    Creates the folders missing on the way, writes and removes a small file in ``folder``, then removes
    the folders it created, so the check leaves the disk as it found it whatever the outcome. Run at the
    start of a command that writes there: an unwritable lakehouse root or checkpoint folder then stops it
    before Kafka or Flink is involved, instead of failing a running job's tasks again and again.
    ``setting``: the key that names the folder (``lakehouse.root``), for the message.
    """
    folder = folder.absolute()
    created: list[Path] = []
    try:
        missing: list[Path] = []
        at = folder
        while not at.exists() and at != at.parent:
            missing.append(at)
            at = at.parent
        for path in reversed(missing):
            path.mkdir()
            created.append(path)
        probe = folder / f"{PROBE_PREFIX}{uuid.uuid4().hex}"
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"probe")
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
            probe.unlink()
    except OSError as exc:
        raise _unwritable(folder, setting, exc) from None
    finally:
        for path in reversed(created):
            with contextlib.suppress(OSError):
                path.rmdir()


def _unwritable(folder: Path, setting: str, exc: OSError) -> UnwritableFolderError:
    """The error for ``exc``, met writing ``folder``: the reason as the system gives it, and what is in
    the way when a file stands where a folder should be."""
    blocker = _nearest_existing(folder)
    reason = exc.strerror or type(exc).__name__
    if not os.path.isdir(blocker):
        reason += f" ({blocker} is a file, not a folder)"
        way = f"remove or move the file {blocker}"
    elif exc.errno == errno.EROFS:
        way = f"mount the file system of {blocker} read-write"
    else:
        way = f"make {blocker} writable for this user"
    return UnwritableFolderError(
        f"{setting} ({env_variable(setting)}): cannot write to {folder}: {reason}",
        fix=f"set {setting} to a folder this user can create and write, or {way}",
    )


def _nearest_existing(path: Path) -> Path:
    """``path`` or the nearest path above it that exists (a file standing in the way included)."""
    at = path
    while at != at.parent and not os.path.lexists(at):
        at = at.parent
    return at
