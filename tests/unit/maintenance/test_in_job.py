"""A job's own maintenance rounds (``maintenance.in_job``): on its tables only, on a schedule, never
stopping for a failed round."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lakestream.config import Config
from maintenance.auto import Maintainer
from maintenance.in_job import BackgroundMaintenance, JobMaintenance


def small_appends(uri: str, n: int) -> None:
    for i in range(n):
        write_deltalake(uri, pa.table({"v": [i]}), mode="append")


def maintenance_ops(uri: str) -> list[str]:
    return [
        str(e["lakestream.maintenance"]) for e in DeltaTable(uri).history() if "lakestream.maintenance" in e
    ]


def wait_until(done: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline, "not done in time"
        time.sleep(0.05)


def test_rounds_compact_the_jobs_tables_only_and_leave_the_uncompacted_ones(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    bronze, snapshot, other = (str(root / t) for t in ("bronze/e", "silver/s", "other/t"))
    for uri in (bronze, snapshot, other):
        small_appends(uri, 4)
    cfg = (
        Config()
        .replace("lakehouse", root=str(root))
        .replace("maintenance", interval="1s", min_small_files=2, checkpoint_every=2, vacuum=False)
    )
    task = JobMaintenance(cfg, ("bronze/e", "silver/s", "gold/missing"), frozenset({"silver/s"}))
    background = BackgroundMaintenance(task).start()
    try:
        wait_until(lambda: background.rounds >= 1 and "optimize" in maintenance_ops(bronze))
    finally:
        background.stop()
    assert background.failures == 0 and background.last_round_s > 0
    assert len(DeltaTable(bronze).file_uris()) == 1
    assert maintenance_ops(snapshot) == [] and (Path(snapshot) / "_delta_log" / "_last_checkpoint").is_file()
    assert maintenance_ops(other) == [] and not (Path(other) / "_delta_log" / "_last_checkpoint").exists()
    assert sorted(DeltaTable(bronze).to_pyarrow_table()["v"].to_pylist()) == [0, 1, 2, 3]


def test_a_failed_round_is_counted_and_the_next_one_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def failing_round(self: Maintainer, stop: object = None) -> list[str]:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("the store went away")
        return []

    monkeypatch.setattr(Maintainer, "run_round", failing_round)
    cfg = Config().replace("lakehouse", root=str(tmp_path)).replace("maintenance", interval="1s")
    background = BackgroundMaintenance(JobMaintenance(cfg, ("bronze/e",))).start()
    try:
        wait_until(lambda: background.rounds >= 2)
    finally:
        background.stop()
    assert background.failures == 1 and len(calls) >= 2


def test_stop_ends_the_thread_before_its_first_round() -> None:
    cfg = Config().replace("maintenance", interval="1h")
    background = BackgroundMaintenance(JobMaintenance(cfg, ("bronze/e",))).start()
    started = time.monotonic()
    background.stop()
    assert time.monotonic() - started < 5 and background.rounds == 0
