"""Parquet reads stay in the calling thread, even through a Python file system (as on object storage)."""

from __future__ import annotations

import ast
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from storage.parquet_read import parquet_file, read_columns, read_parquet
from tests.unit.test_layers import PACKAGES

ROOT = Path(__file__).resolve().parents[3]


class _RecordingFile:
    """A file object recording which threads read it."""

    def __init__(self, path: str, threads: set[int]) -> None:
        self._fh = open(path, "rb")  # noqa: SIM115 - closed by PythonFile
        self._threads = threads
        self.closed = False
        self.mode = "rb"

    def read(self, n: int = -1) -> bytes:
        self._threads.add(threading.get_ident())
        return self._fh.read(n)

    def seek(self, offset: int, whence: int = 0) -> int:
        self._threads.add(threading.get_ident())
        return self._fh.seek(offset, whence)

    def tell(self) -> int:
        return self._fh.tell()

    def close(self) -> None:
        self._fh.close()
        self.closed = True

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True


class _RecordingHandler(pafs.FileSystemHandler):
    """The local file system, served through Python like delta-rs' handler on object storage."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.threads: set[int] = set()
        self._local = pafs.LocalFileSystem()

    def _p(self, path: str) -> str:
        return str(self.root / path)

    def get_type_name(self) -> str:
        return "recording"

    def normalize_path(self, path: str) -> str:
        return path

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        infos = self._local.get_file_info([self._p(p) for p in paths])
        return [pafs.FileInfo(p, i.type, size=i.size) for p, i in zip(paths, infos, strict=True)]

    def open_input_file(self, path: str) -> pa.NativeFile:
        return pa.PythonFile(_RecordingFile(self._p(path), self.threads), mode="r")

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.open_input_file(path)

    # The rest of the interface is not used by reads.
    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        raise NotImplementedError

    def create_dir(self, path: str, recursive: bool) -> None:
        raise NotImplementedError

    def delete_dir(self, path: str) -> None:
        raise NotImplementedError

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        raise NotImplementedError

    def delete_root_dir_contents(self) -> None:
        raise NotImplementedError

    def delete_file(self, path: str) -> None:
        raise NotImplementedError

    def move(self, src: str, dest: str) -> None:
        raise NotImplementedError

    def copy_file(self, src: str, dest: str) -> None:
        raise NotImplementedError

    def open_output_stream(self, path: str, metadata: Any = None) -> pa.NativeFile:
        raise NotImplementedError

    def open_append_stream(self, path: str, metadata: Any = None) -> pa.NativeFile:
        raise NotImplementedError


@pytest.fixture
def handler(tmp_path: Path) -> _RecordingHandler:
    n = 200_000
    table = pa.table({"order_id": [f"o{i}" for i in range(n)], "amount": list(range(n)), "note": ["x"] * n})
    pq.write_table(table, tmp_path / "part.parquet", row_group_size=20_000)
    return _RecordingHandler(tmp_path)


def test_reads_through_a_python_file_system_stay_in_the_calling_thread(handler: _RecordingHandler) -> None:
    fs = pafs.PyFileSystem(handler)
    table = read_parquet("part.parquet", fs, columns=["order_id", "amount"])
    assert table.num_rows == 200_000 and table.column_names == ["order_id", "amount"]
    with fs.open_input_file("part.parquet") as fh:
        pf = parquet_file(fh)
        assert read_columns(pf, ["amount"], row_groups=[1, 3])["amount"][0].as_py() == 20_000
    assert handler.threads == {threading.get_ident()}


def test_pyarrow_defaults_would_read_from_other_threads(handler: _RecordingHandler) -> None:
    # What the module guards against: the default read calls the Python file system from Arrow's threads.
    fs = pafs.PyFileSystem(handler)
    with fs.open_input_file("part.parquet") as fh:
        pq.read_table(fh, columns=["order_id", "amount"])
    assert handler.threads - {threading.get_ident()}


def test_only_the_module_reads_parquet_or_scans_datasets() -> None:
    # One place reads data files; a direct pyarrow read or dataset scan elsewhere would bring the abort back.
    allowed = {ROOT / "storage" / "parquet_read.py"}
    banned = {
        "read_table",
        "ParquetFile",
        "ParquetDataset",
        "to_pyarrow_dataset",
        "to_pyarrow_table",
        "dataset",
    }
    found = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if path in allowed:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [node.attr]
                    if isinstance(node, ast.Attribute)
                    else [a.name for a in node.names]
                    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pyarrow")
                    else []
                )
                found += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n in banned]
    assert not found, found
