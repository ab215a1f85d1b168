"""The CLI over both silver layouts: ``query silver``, ``maintain fold``, ``tables`` and the layout check.

Tables are written by the real sink writers (the ingest job's silver specs, driven marker by marker),
so the layouts are the job's own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

import cli.main as cli
from flink_jobs.ingest import check_silver_layout, silver_mor_table, table_specs
from lakestream.config import ConfigError, load_config
from lakestream.table_names import SILVER_TABLE
from merge_on_read.fold_changes import fold_once
from merge_on_read.fold_schedule import BackgroundFold
from tests.support.silver_rows import change as event
from tests.unit.sinks.test_merge_mode import batch

CHECKPOINTS = [
    [event("o1", "e1", 1, status="created", address="A"), event("o2", "e2", 2, status="created")],
    [event("o1", "e3", 3, status="paid"), event("o1", "e4", 0, address="old")],  # the older address loses
    [event("o3", "e5", 4, status="created"), event("o2", "e6", 5, address="B")],
]


def environ(root: Path, layout: str) -> dict[str, str]:
    return {"LAKESTREAM__LAKEHOUSE__ROOT": str(root), "LAKESTREAM__TABLES__SILVER_LAYOUT": layout}


def write_silver(
    root: Path, layout: str, checkpoints: list[list[dict[str, Any]]], run_id: str = "r1"
) -> None:
    """The ingest job's silver sink (global commit: stage, then the committer) over ``checkpoints``."""
    from sinks.committable import Committable

    cfg = load_config(None, environ=environ(root, layout))
    spec = table_specs(cfg)[SILVER_TABLE]
    writer = spec.new_writer()
    writer.open(restored_checkpoint_id=None, run_id=run_id, subtask=0, parallelism=1)
    committer = spec.new_global_committer()
    committer.open()
    if spec.fold is not None:
        BackgroundFold(spec.fold)  # as the job's committer opens it: creates the snapshot, folds nothing
    for n, rows in enumerate(checkpoints, start=1):
        writer.write(batch(rows))
        writer.prepare(n)
        for c in writer.take_committables():
            assert isinstance(c, Committable)
            committer.add(c)
        committer.commit(n)


def query_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> list[Any]:
    assert cli.main(["query", "silver", "--format", "json", *args]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.parametrize("layout", ["copy_on_write", "merge_on_read"])
def test_query_silver_gives_the_current_orders_in_either_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], layout: str
) -> None:
    for key, value in environ(tmp_path, layout).items():
        monkeypatch.setenv(key, value)
    write_silver(tmp_path, layout, CHECKPOINTS)
    rows = {r["order_id"]: r for r in query_json(monkeypatch, capsys)}
    assert {k: (r["status"], r["address"]) for k, r in rows.items()} == {
        "o1": ("paid", "A"),
        "o2": ("created", "B"),
        "o3": ("created", None),
    }
    assert rows["o1"]["last_event_time"] == "2024-05-01T12:00:03Z"
    only = query_json(monkeypatch, capsys, "--order-id", "o2", "--order-id", "nope")
    assert [r["order_id"] for r in only] == ["o2"]
    assert cli.main(["query", "silver"]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split()[:3] == ["order_id", "user_id", "status"]
    assert "3 order(s)" in table

    # The sink's commits record the table's freshness; `tables` shows it.
    sink = "silver/orders_changes" if layout == "merge_on_read" else SILVER_TABLE
    history = DeltaTable(str(tmp_path / sink)).history(limit=1)
    assert history[0]["lakestream.freshness"] == {
        "checkpoint": 3,
        "newest_event_time": "2024-05-01T12:00:05Z",
    }
    assert cli.main(["tables"]) == 0
    listing = capsys.readouterr().out
    assert "newest event 2024-05-01T12:00:05Z, checkpoint 3" in listing


def test_maintain_fold_folds_and_tables_shows_what_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key, value in environ(tmp_path, "merge_on_read").items():
        monkeypatch.setenv(key, value)
    write_silver(tmp_path, "merge_on_read", CHECKPOINTS[:2])
    assert cli.main(["tables"]) == 0
    assert "3 change rows in 2 file(s) of silver/orders_changes not folded" in capsys.readouterr().out
    assert cli.main(["maintain", "fold"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("fold: 3 change rows (2 orders) into ")
    assert "no runs merged; version 1, 1 run(s), 2 rows written" in out
    write_silver(tmp_path, "merge_on_read", CHECKPOINTS[2:], run_id="r2")  # a new run
    assert cli.main(["tables"]) == 0
    listing = capsys.readouterr().out
    line = next(x for x in listing.splitlines() if x.split()[0] == SILVER_TABLE)
    assert "changes folded through" in line and "2 change rows in 1 file(s)" in line
    before = query_json(monkeypatch, capsys)
    assert cli.main(["maintain", "fold"]) == 0
    # The new changes as a second sorted run, as large as the first: the two are merged.
    assert "2 runs merged (2 file(s)" in capsys.readouterr().out
    assert query_json(monkeypatch, capsys) == before
    assert cli.main(["maintain", "fold", "--full"]) == 0
    assert "held every change" in (out := capsys.readouterr().out) and "no runs merged" in out
    snapshot = DeltaTable(str(tmp_path / SILVER_TABLE)).to_pyarrow_table().to_pylist()
    assert sorted(r["order_id"] for r in snapshot) == ["o1", "o2", "o3"]  # one row per order

    assert cli.main(["query", "silver", "--sql"]) == 0
    sql = capsys.readouterr().out
    assert "register" in sql and "ROW_NUMBER() OVER" in sql


def test_maintain_fold_refuses_copy_on_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LAKESTREAM__LAKEHOUSE__ROOT", str(tmp_path))
    monkeypatch.setenv("LAKESTREAM__TABLES__SILVER_LAYOUT", "copy_on_write")
    assert cli.main(["maintain", "fold"]) == 2
    assert "silver is copy-on-write" in capsys.readouterr().err


def test_switching_layouts_is_checked(tmp_path: Path) -> None:
    cow = load_config(None, environ=environ(tmp_path, "copy_on_write"))
    mor = load_config(None, environ=environ(tmp_path, "merge_on_read"))
    write_silver(tmp_path, "copy_on_write", CHECKPOINTS[:1])
    check_silver_layout(mor)  # nothing staged: the switch is allowed
    spec = table_specs(cow)[SILVER_TABLE]
    writer = spec.new_writer()
    writer.open(restored_checkpoint_id=None, run_id="r2", subtask=0, parallelism=1)
    writer.write(batch(CHECKPOINTS[1]))
    writer.prepare(1)  # staged, never committed: a run killed before its checkpoint completed
    with pytest.raises(ConfigError, match="holds work staged by a copy_on_write run"):
        check_silver_layout(mor)
    writer.close()
    del writer
    for path in (tmp_path / SILVER_TABLE / "_lakestream").rglob("*"):
        if path.is_file() and "manifests" in path.parts:
            path.unlink()
    write_silver(tmp_path, "merge_on_read", CHECKPOINTS[1:2], run_id="r3")
    fold_once(silver_mor_table(mor))  # the copy-on-write table becomes the snapshot
    rows = {r["order_id"]: r for r in DeltaTable(str(tmp_path / SILVER_TABLE)).to_pyarrow_table().to_pylist()}
    assert (rows["o1"]["status"], rows["o1"]["address"], rows["o2"]["status"]) == ("paid", "A", "created")
    assert rows["o2"]["change_seq"] is None  # folded before sequences existed
    assert "change_seq" in DeltaTable(str(tmp_path / SILVER_TABLE)).schema().to_arrow().names
    with pytest.raises(ConfigError, match="switching back is not supported"):
        check_silver_layout(cow)


@pytest.mark.parametrize("layout", ["copy_on_write", "merge_on_read"])
def test_the_job_maintains_every_table_it_writes_and_compacts_no_merge_on_read_silver(layout: str) -> None:
    from flink_jobs.ingest import job_maintenance

    cfg = load_config(environ={"LAKESTREAM__TABLES__SILVER_LAYOUT": json.dumps(layout)})
    task = job_maintenance(cfg)
    written = {spec.table.table_uri for spec in table_specs(cfg).values()}
    assert {cfg.lakehouse.table_uri(t) for t in task.tables} >= written
    if layout == "merge_on_read":
        assert SILVER_TABLE in task.tables and task.not_compacted == {SILVER_TABLE, "silver/orders_changes"}
    else:
        assert task.not_compacted == frozenset()
    no_gold = job_maintenance(cfg.replace("gold", enabled=False))
    assert cfg.gold.table not in no_gold.tables
