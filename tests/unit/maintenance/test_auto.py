"""``plan_round``: what a scheduled round does to a table, from its file statistics and checkpoint."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lakestream.config import Config, ConfigError, MaintenanceConfig, load_config
from maintenance.auto import Maintainer, PartitionFiles, TableState, plan_round, small_files_by_partition

DAY_MS = 86_400_000


def settings(**kw: object) -> MaintenanceConfig:
    return MaintenanceConfig(**{"min_small_files": 4, "checkpoint_every": 10, **kw})  # type: ignore[arg-type]


def state(
    partitions: tuple[PartitionFiles, ...] = (), version: int = 5, last_checkpoint: int | None = 0
) -> TableState:
    return TableState("bronze/e", version, last_checkpoint, partitions)


def kinds(actions: list) -> list[str]:  # type: ignore[type-arg]
    return [a.kind for a in actions]


def test_a_partition_with_enough_small_files_is_compacted_alone() -> None:
    parts = (
        PartitionFiles((("source", "a"),), small_files=4, small_bytes=4000),
        PartitionFiles((("source", "b"),), small_files=3, small_bytes=3000),
    )
    actions = plan_round(state(parts), settings(vacuum=False, cleanup_logs=False), now_ms=0, last_vacuum_ms=0)
    assert kinds(actions) == ["compact"]
    assert actions[0].partition == (("source", "a"),) and "4 files below 8 MB" in actions[0].reason


def test_zorder_tables_are_z_ordered_instead() -> None:
    parts = (PartitionFiles((), small_files=20, small_bytes=1),)
    cfg = settings(zorder={"bronze/e": "order_id, event_time"}, vacuum=False, cleanup_logs=False)
    [action] = plan_round(state(parts), cfg, now_ms=0, last_vacuum_ms=0)
    assert action.kind == "zorder" and action.zorder == ("order_id", "event_time")


def test_checkpoint_after_checkpoint_every_commits() -> None:
    quiet = settings(vacuum=False, cleanup_logs=False)
    assert kinds(plan_round(state(version=9, last_checkpoint=0), quiet, now_ms=0, last_vacuum_ms=0)) == []
    assert kinds(plan_round(state(version=10, last_checkpoint=0), quiet, now_ms=0, last_vacuum_ms=0)) == [
        "checkpoint"
    ]
    assert kinds(plan_round(state(version=9, last_checkpoint=None), quiet, now_ms=0, last_vacuum_ms=0)) == [
        "checkpoint"
    ]


def test_vacuum_and_cleanup_run_every_vacuum_every() -> None:
    cfg = settings(vacuum_every=timedelta(days=1))
    assert kinds(plan_round(state(), cfg, now_ms=DAY_MS, last_vacuum_ms=None)) == ["vacuum", "cleanup"]
    assert kinds(plan_round(state(), cfg, now_ms=DAY_MS - 1, last_vacuum_ms=0)) == []
    assert kinds(plan_round(state(), cfg, now_ms=DAY_MS, last_vacuum_ms=0)) == ["vacuum", "cleanup"]
    assert kinds(plan_round(state(), settings(vacuum=False), now_ms=DAY_MS, last_vacuum_ms=None)) == [
        "cleanup"
    ]


def test_small_files_are_counted_per_partition(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    for i in range(3):
        write_deltalake(uri, pa.table({"s": ["a", "b"], "v": [i, i]}), mode="append", partition_by=["s"])
    adds = pa.table(DeltaTable(uri).get_add_actions(flatten=True))
    parts = small_files_by_partition(adds, ["s"], small_bytes=1 << 20)
    assert [(p.values, p.small_files) for p in parts] == [((("s", "a"),), 3), ((("s", "b"),), 3)]
    assert small_files_by_partition(adds, ["s"], small_bytes=1)[0].small_files == 0


def test_a_round_compacts_and_checkpoints_a_real_table(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    uri = str(root / "bronze" / "e")
    for i in range(6):
        write_deltalake(uri, pa.table({"s": ["a"], "v": [i]}), mode="append", partition_by=["s"])
    cfg = (
        Config()
        .replace("lakehouse", root=str(root))
        .replace("maintenance", min_small_files=4, checkpoint_every=5, vacuum=False, cleanup_logs=False)
    )
    lines = Maintainer(cfg, report=lambda _line: None).run_round()
    assert lines[0].startswith("bronze/e: compact (6 files below 8 MB") and "6 files -> 1" in lines[0]
    assert lines[1].startswith("bronze/e: checkpoint at version 6")
    assert (Path(uri) / "_delta_log" / "00000000000000000006.checkpoint.parquet").exists()
    assert sorted(DeltaTable(uri).to_pyarrow_table()["v"].to_pylist()) == list(range(6))
    assert Maintainer(cfg, report=lambda _line: None).run_round() == ["bronze/e: nothing to do (version 6)"]


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"LAKESTREAM__MAINTENANCE__MIN_SMALL_FILES": "1"}, "maintenance.min_small_files"),
        ({"LAKESTREAM__MAINTENANCE__CHECKPOINT_EVERY": "0"}, "maintenance.checkpoint_every"),
        ({"LAKESTREAM__MAINTENANCE__REWRITE_TASKS": "0"}, "maintenance.rewrite_tasks"),
        ({"LAKESTREAM__MAINTENANCE__INTERVAL": '"0s"'}, "maintenance.interval"),
        ({"LAKESTREAM__MAINTENANCE__ZORDER__SILVER/ORDERS": '" , "'}, "maintenance.zorder"),
        ({"LAKESTREAM__MAINTENANCE__VACUUM_EVERY": '"often"'}, "maintenance.vacuum_every"),
    ],
)
def test_bad_maintenance_settings_fail_with_the_key(env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        load_config(environ=env)


def test_run_stops_when_asked_between_operations(tmp_path: Path) -> None:
    import threading

    from maintenance.auto import run

    for name in ("a/t", "b/t"):
        write_deltalake(str(tmp_path / name), pa.table({"v": [1]}))
    cfg = Config().replace("lakehouse", root=str(tmp_path)).replace("maintenance", interval="1h")
    stop = threading.Event()
    lines: list[str] = []

    def report(line: str) -> None:
        lines.append(line)
        stop.set()  # as Ctrl-C does: the running operation finishes, nothing after it starts

    assert run(cfg, stop=stop, report=report) == 1
    assert len(lines) == 1 and lines[0].startswith("a/t: vacuum")
    assert run(cfg, once=True, report=lines.append) == 1  # --once: one round over both tables
    assert any(x.startswith("b/t: log cleanup") for x in lines)


def test_a_table_left_uncompacted_is_still_checkpointed() -> None:
    parts = (PartitionFiles((), small_files=40, small_bytes=40_000),)
    actions = plan_round(
        state(parts, version=20),
        settings(vacuum=False, cleanup_logs=False),
        now_ms=0,
        last_vacuum_ms=0,
        compact=False,
    )
    assert kinds(actions) == ["checkpoint"]
