"""The bounded run's "everything committed" instant, read from real Delta tables."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from benchmarks.workload import last_commit_epoch_s


def _newest(table: Path) -> float:
    return float(DeltaTable(str(table)).history(1)[0]["timestamp"]) / 1000


def test_last_commit_is_the_newest_commit_over_all_tables(tmp_path: Path) -> None:
    data = pa.table({"x": [1, 2]})
    for name in ("bronze/t", "silver/t"):
        write_deltalake(str(tmp_path / name), data)
    time.sleep(0.05)
    write_deltalake(str(tmp_path / "bronze/t"), data, mode="append")  # bronze now holds the newest
    both = last_commit_epoch_s(tmp_path, ["bronze/t", "silver/t"])
    assert both == _newest(tmp_path / "bronze/t") > _newest(tmp_path / "silver/t")
    assert last_commit_epoch_s(tmp_path, ["silver/t"]) == _newest(tmp_path / "silver/t")
    assert last_commit_epoch_s(tmp_path, []) is None
