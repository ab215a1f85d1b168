"""Reading Parquet data files in the calling thread only: every Parquet read of a table's files goes here.

On object storage the files are read through delta-rs' Python file system handler
(``storage.delta_log.open_filesystem``). Arrow's pre-buffering, its dataset scanner and its threaded column
decoding call that handler from Arrow's own thread pools; a process that did so aborted now and then at
interpreter exit ("terminate called without an active exception", exit 134 or -6) after its work was
done. Reads here never leave the caller's thread: no pre-buffering, no threads, no datasets. SQL over a
whole table goes through DataFusion (``storage.sql_query``), which reads in Rust.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.fs as pafs
from pyarrow.parquet import ParquetFile

__all__ = ["ParquetFile", "parquet_file", "read_columns", "read_parquet"]


def parquet_file(source: str | pa.NativeFile, fs: pafs.FileSystem | None = None) -> ParquetFile:
    """``source`` (a path in ``fs``, or an open file) for reads in the calling thread."""
    return ParquetFile(source, filesystem=fs, pre_buffer=False, coerce_int96_timestamp_unit="us")


def read_columns(
    pf: ParquetFile, columns: Sequence[str] | None = None, row_groups: Sequence[int] | None = None
) -> pa.Table:
    """``columns`` (all when None) of ``row_groups`` (all when None) of ``pf``, in the calling thread."""
    cols = None if columns is None else list(columns)
    if row_groups is None:
        return pf.read(columns=cols, use_threads=False)
    return pf.read_row_groups(list(row_groups), columns=cols, use_threads=False)


def read_parquet(
    source: str | pa.NativeFile, fs: pafs.FileSystem | None = None, columns: Sequence[str] | None = None
) -> pa.Table:
    """``columns`` (all when None) of one Parquet file, in the calling thread."""
    return read_columns(parquet_file(source, fs), columns)
