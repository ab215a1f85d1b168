"""The files lakestream keeps in and beside a Delta table, on a local disk or an object store alike.

Sinks stage data files and manifests, maintenance takes its lock and readers record their positions
under the table root; each of them needs the same few operations, which mean the same on both back
ends: a whole-object replace that readers never see torn, a create that fails when the object exists,
read, delete, list, and writing a new file. On a local disk that is temp file + fsync + rename and
``O_EXCL``; on an object store a ``PUT`` is atomic and ``If-None-Match: *`` makes the create exclusive,
so no store needs a rename. Paths are relative to the table root, ``/``-separated.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

import obstore
import pyarrow as pa
from obstore.store import ObjectStore

from storage.delta_log import is_local_uri, local_path
from storage.local_files import atomic_write_bytes, fsync_dir
from storage.object_store import check_conditional_writes, open_store


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One file under the table root."""

    #: Relative to the table root, ``/``-separated.
    path: str
    size: int
    modified_ms: int


class TableFiles(Protocol):
    """Files under one table root (see the module docstring)."""

    #: The table root as given (a local path or an object-store URI).
    uri: str

    def write_atomic(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data``; a reader sees the old or the new content, durably."""

    def create(self, path: str, data: bytes) -> bool:
        """Write ``path`` only if it does not exist; False (nothing written) when it does."""

    def read(self, path: str) -> bytes | None:
        """The content of ``path``, None when it does not exist."""

    def delete(self, path: str) -> None:
        """Remove ``path``; nothing when it is gone already."""

    def info(self, path: str) -> FileInfo | None:
        """Size and modification time of ``path``, None when it does not exist."""

    def list(self, prefix: str, *, recursive: bool = True) -> list[FileInfo]:
        """Every file under folder ``prefix`` ("" for the root), sorted by path; none when it is empty.

        ``recursive=False``: the files directly in ``prefix`` only.
        """

    def list_folders(self, prefix: str) -> tuple[str, ...]:
        """Names of the folders directly in folder ``prefix`` ("" for the root), sorted; a store knows
        only folders that hold files."""

    def output(self, path: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        """A new file at ``path``, durable once the ``with`` block ends without an error."""

    def open_input(self, path: str) -> pa.NativeFile:
        """``path`` for reading by pyarrow (Parquet, Arrow IPC)."""

    def remove_empty_folders(self, prefix: str, keep: str) -> None:
        """Tidy empty folders under ``prefix`` except ``keep``; stores have no folders to tidy."""

    def check_conditional_writes(self) -> None:
        """Refuse a store whose exclusive create is not exclusive (see ``object_store``); reach it once."""

    def delete_all(self) -> None:
        """Remove the table root and everything under it (a throw-away table)."""


def table_files(uri: str, options: Mapping[str, str] | None = None) -> TableFiles:
    """The files of the table at ``uri``: a local folder or an object store (``options``: delta-rs')."""
    if is_local_uri(uri):
        return LocalTableFiles(Path(local_path(uri)))
    return StoreTableFiles(uri, options)


def root_uri(uri: str) -> str:
    """``uri`` as :attr:`TableFiles.uri` spells it, so two spellings of one table compare equal."""
    return local_path(uri) if is_local_uri(uri) else uri.rstrip("/")


class LocalTableFiles:
    """Files of a table in a local folder: POSIX rename, ``O_EXCL`` and fsync."""

    def __init__(self, root: Path) -> None:
        self.root = root.absolute()
        self.uri = str(self.root)

    def _path(self, path: str) -> Path:
        return self.root / path

    def write_atomic(self, path: str, data: bytes) -> None:
        """See :class:`TableFiles`."""
        atomic_write_bytes(self._path(path), data)

    def create(self, path: str, data: bytes) -> bool:
        """See :class:`TableFiles`."""
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        fsync_dir(target.parent)
        return True

    def read(self, path: str) -> bytes | None:
        """See :class:`TableFiles`."""
        try:
            return self._path(path).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def delete(self, path: str) -> None:
        """See :class:`TableFiles`."""
        target = self._path(path)
        with contextlib.suppress(FileNotFoundError):
            target.unlink()
        fsync_dir(target.parent)

    def info(self, path: str) -> FileInfo | None:
        """See :class:`TableFiles`."""
        try:
            st = self._path(path).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return FileInfo(path, st.st_size, int(st.st_mtime * 1000))

    def list(self, prefix: str, *, recursive: bool = True) -> list[FileInfo]:
        """See :class:`TableFiles`."""
        folder = self._path(prefix)
        if not folder.is_dir():
            return []
        out = []
        for p in folder.rglob("*") if recursive else folder.iterdir():
            if p.is_file():
                with contextlib.suppress(FileNotFoundError):
                    st = p.stat()
                    rel = p.relative_to(self.root).as_posix()
                    out.append(FileInfo(rel, st.st_size, int(st.st_mtime * 1000)))
        return sorted(out, key=lambda f: f.path)

    def list_folders(self, prefix: str) -> tuple[str, ...]:
        """See :class:`TableFiles`: symbolic links to folders are not followed (as ``Path.rglob``)."""
        try:
            with os.scandir(self._path(prefix)) as entries:
                return tuple(sorted(e.name for e in entries if e.is_dir(follow_symlinks=False)))
        except (FileNotFoundError, NotADirectoryError):
            return ()

    @contextlib.contextmanager
    def output(self, path: str) -> Iterator[IO[bytes]]:
        """See :class:`TableFiles`."""
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        fsync_dir(target.parent)

    def open_input(self, path: str) -> pa.NativeFile:
        """See :class:`TableFiles`."""
        return pa.OSFile(str(self._path(path)), "rb")

    def remove_empty_folders(self, prefix: str, keep: str) -> None:
        """See :class:`TableFiles`: each run folder and its subtask folders, when empty."""
        root = self._path(prefix)
        if not root.is_dir():
            return
        for run_dir in root.iterdir():
            if not run_dir.is_dir() or run_dir.name == keep:
                continue
            for sub_dir in run_dir.iterdir():
                with contextlib.suppress(OSError):
                    sub_dir.rmdir()
            with contextlib.suppress(OSError):
                run_dir.rmdir()

    def check_conditional_writes(self) -> None:
        """See :class:`TableFiles`: ``O_EXCL`` is exclusive on every local file system."""

    def delete_all(self) -> None:
        """See :class:`TableFiles`."""
        shutil.rmtree(self.root, ignore_errors=True)


class StoreTableFiles:
    """Files of a table on an object store, through obstore (the client delta-rs itself is built on)."""

    def __init__(self, uri: str, options: Mapping[str, str] | None = None) -> None:
        self.uri = root_uri(uri)
        self.store: ObjectStore = open_store(self.uri, options)

    def write_atomic(self, path: str, data: bytes) -> None:
        """See :class:`TableFiles`: one PUT replaces an object whole."""
        obstore.put(self.store, path, data)

    def create(self, path: str, data: bytes) -> bool:
        """See :class:`TableFiles`: ``PUT If-None-Match: *``."""
        try:
            obstore.put(self.store, path, data, mode="create")
        except obstore.exceptions.AlreadyExistsError:
            return False
        return True

    def read(self, path: str) -> bytes | None:
        """See :class:`TableFiles`."""
        try:
            return bytes(obstore.get(self.store, path).bytes())
        except FileNotFoundError:
            return None

    def delete(self, path: str) -> None:
        """See :class:`TableFiles`: S3 answers a delete of a missing key with success."""
        with contextlib.suppress(FileNotFoundError):
            obstore.delete(self.store, path)

    def info(self, path: str) -> FileInfo | None:
        """See :class:`TableFiles`."""
        try:
            meta = obstore.head(self.store, path)
        except FileNotFoundError:
            return None
        return FileInfo(path, int(meta["size"]), int(meta["last_modified"].timestamp() * 1000))

    def list(self, prefix: str, *, recursive: bool = True) -> list[FileInfo]:
        """See :class:`TableFiles`; ``prefix`` matches whole path segments (``a`` is not ``ab``)."""
        folder = prefix.strip("/")
        folder = "" if folder == "." else folder
        if recursive:
            found = [m for batch in obstore.list(self.store, folder or None) for m in batch]
        else:
            found = list(obstore.list_with_delimiter(self.store, folder or None)["objects"])
        out = [FileInfo(m["path"], int(m["size"]), int(m["last_modified"].timestamp() * 1000)) for m in found]
        return sorted(out, key=lambda f: f.path)

    def list_folders(self, prefix: str) -> tuple[str, ...]:
        """See :class:`TableFiles`: the common prefixes of a listing with delimiter ``/``."""
        folder = prefix.strip("/")
        folder = "" if folder == "." else folder
        found = obstore.list_with_delimiter(self.store, folder or None)["common_prefixes"]
        return tuple(sorted(p.rstrip("/").rpartition("/")[2] for p in found))

    @contextlib.contextmanager
    def output(self, path: str) -> Iterator[IO[bytes]]:
        """See :class:`TableFiles`: written to memory, then one PUT (multipart when large)."""
        buffer = io.BytesIO()
        yield buffer
        obstore.put(self.store, path, buffer.getbuffer())

    def open_input(self, path: str) -> pa.NativeFile:
        """See :class:`TableFiles`."""
        data = self.read(path)
        if data is None:
            raise FileNotFoundError(f"{self.uri}/{path}")
        return pa.BufferReader(data)

    def remove_empty_folders(self, prefix: str, keep: str) -> None:
        """See :class:`TableFiles`: an object store has no empty folders."""

    def check_conditional_writes(self) -> None:
        """See :class:`TableFiles`."""
        check_conditional_writes(self.store, self.uri)

    def delete_all(self) -> None:
        """See :class:`TableFiles`: every object under the root, in batches."""
        paths = [f.path for f in self.list("")]
        for start in range(0, len(paths), 1000):
            obstore.delete(self.store, paths[start : start + 1000])
