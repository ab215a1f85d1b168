"""Failures of reading a Delta table's log as a stream, which the Delta source's own errors build on.

The log reader (``storage.delta_log``) meets tables it cannot read correctly before the source does;
its errors share one base with the source's, so a poll tells every failure of reading on from a bug.
"""

from __future__ import annotations

from lakestream.errors import LakestreamError


class DeltaReadError(LakestreamError, RuntimeError):
    """Base class: the table cannot be read on as configured; the message says why and what to do."""


class UnsupportedTableError(DeltaReadError):
    """The table uses a feature this source cannot read correctly (deletion vectors, column mapping)."""
