"""The key ranges of a table's files, grouped into disjoint cells (pure).

A cell is a maximal group of files whose [min, max] key ranges overlap one another (transitively);
cells are disjoint and ordered. A sorted run's files are each their own cell; merging runs
(``merge_on_read.fold_changes.merge_into``) goes through the key space cell by cell of the largest
run, so it holds about one file per run in memory.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa


@dataclass(frozen=True, slots=True)
class KeyFile:
    """A data file: its path as in the log, size, rows and key range (from its statistics)."""

    path: str
    size: int
    rows: int
    lo: Any
    hi: Any


@dataclass(frozen=True, slots=True)
class Cell:
    """Files whose key ranges overlap one another, and the range they span."""

    files: tuple[KeyFile, ...]
    lo: Any
    hi: Any

    @property
    def rows(self) -> int:
        """Rows of the cell's files."""
        return sum(f.rows for f in self.files)


def key_files(actions: pa.Table, key: str) -> list[KeyFile] | str:
    """The files of ``actions`` (``DeltaTable.get_add_actions(flatten=True)``) with their ranges of
    ``key``, or why they cannot be had (no statistics)."""
    lo_name, hi_name = f"min.{key}", f"max.{key}"
    if actions.num_rows == 0:
        return []
    if lo_name not in actions.column_names or hi_name not in actions.column_names:
        return f"the files have no statistics of {key!r}"
    if actions[lo_name].null_count or actions[hi_name].null_count:
        return f"some files have no statistics of {key!r}"
    return [
        KeyFile(path, size, n, lo, hi)
        for path, size, n, lo, hi in zip(
            actions["path"].to_pylist(),
            actions["size_bytes"].to_pylist(),
            actions["num_records"].to_pylist(),
            actions[lo_name].to_pylist(),
            actions[hi_name].to_pylist(),
            strict=True,
        )
    ]


def cells(files: Iterable[KeyFile]) -> list[Cell]:
    """The files grouped into disjoint cells, ordered by key."""
    out: list[Cell] = []
    group: list[KeyFile] = []
    lo: Any = None
    hi: Any = None
    for f in sorted(files, key=lambda f: (f.lo, f.hi)):
        if group and f.lo > hi:
            out.append(Cell(tuple(group), lo, hi))
            group = []
        if not group:
            lo, hi = f.lo, f.hi
        group.append(f)
        hi = max(hi, f.hi)
    if group:
        out.append(Cell(tuple(group), lo, hi))
    return out


def disjoint(files: Iterable[KeyFile]) -> bool:
    """Whether no two of the files have overlapping key ranges (each file its own cell)."""
    ranges = sorted((f.lo, f.hi) for f in files)
    return all(a[1] < b[0] for a, b in zip(ranges, ranges[1:], strict=False))
