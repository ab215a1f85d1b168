"""Small files lakestream keeps beside a local table: safe folder names, atomic and durable replacement.

The sinks' manifests and the Delta source's reader records live in ``<table>/_lakestream/...``; both
name folders or files after ids users choose and are read while they are being replaced.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from urllib.parse import quote


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
