"""The pure parts of the freshness benchmark: commits read as checkpoints and offsets, per-event
visibility from the commits seen, the workload's records."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from benchmarks.freshness import (
    SeenCommit,
    Sent,
    by_minute,
    caught_up,
    checkpoint_phases,
    markdown,
    per_minute_p99,
    quantiles,
    records,
    seen_commit,
    subtask_phases,
    visibility,
)
from benchmarks.silver_scale import order_ids

TOPIC = "fresh1.orders_db"


def test_a_commit_is_read_as_its_checkpoint_and_its_topic_progress() -> None:
    txn = {
        "lakestream-ingest/bronze/order_events:0": 7,
        "lakestream-ingest/bronze/order_events:progress:kafka/fresh1.orders_db/1": 120,
        "lakestream-ingest/bronze/order_events:progress:kafka/other.topic/0": 99,
        "lakestream-ingest/bronze/order_events:progress:watermark/fresh1.orders_db/1": 1_700_000_000_000,
    }
    c = seen_commit(3, 12.5, txn, TOPIC)
    assert (c.version, c.seen_s, c.checkpoint, c.offsets) == (3, 12.5, 7, {1: 120})
    assert seen_commit(4, 1.0, {}, TOPIC).checkpoint is None


def test_visibility_is_the_first_commit_passing_each_offset_then_silvers_checkpoint() -> None:
    # partition 0: events sent at 0, 1, 2 (offsets 0..2); partition 1: at 0.5, 1.5 (offsets 0..1)
    sent = [0.0, 0.5, 1.0, 1.5, 2.0]
    parts = [0, 1, 0, 1, 0]
    bronze = [
        SeenCommit(10, 3.0, 1, {0: 2}),  # offsets 0, 1 of partition 0
        SeenCommit(11, 3.2, 1, {1: 1}),  # offset 0 of partition 1
        SeenCommit(12, 4.0, None, {}),  # not a sink commit (compaction)
        SeenCommit(13, 6.0, 2, {0: 3, 1: 2}),
    ]
    silver = [SeenCommit(5, 3.5, 1), SeenCommit(6, 9.0, 2)]
    in_bronze, in_silver = visibility(sent, parts, bronze, silver)
    assert in_bronze.tolist() == [3.0, 2.7, 2.0, 4.5, 4.0]
    assert in_silver.tolist() == [3.5, 3.0, 2.5, 7.5, 7.0]
    assert caught_up(parts, in_silver)


def test_events_past_the_last_commit_are_not_seen() -> None:
    sent, parts = [0.0, 1.0, 2.0], [0, 0, 1]
    in_bronze, in_silver = visibility(sent, parts, [SeenCommit(1, 2.0, 4, {0: 1})], [])
    assert in_bronze[0] == 2.0 and math.isnan(in_bronze[1]) and math.isnan(in_bronze[2])
    assert np.isnan(in_silver).all()
    assert not caught_up(parts, in_silver)
    q = quantiles(in_bronze)
    assert (q["events"], q["missing"], q["p99_s"]) == (3, 2, 2.0)


def test_a_minute_with_an_unseen_event_has_no_p99() -> None:
    sent = [0.0, 30.0, 61.0, 130.0]
    values = np.array([1.0, 2.0, np.nan, 0.5])
    assert per_minute_p99(sent, values) == [pytest.approx(1.99), None, 0.5]


def test_records_update_the_seeded_orders_and_create_new_ones() -> None:
    orders, sample = 1000, {3, 500, 999}
    sent = Sent()
    batch = list(itertools.islice(records(TOPIC, orders, 0.5, 7, sample, sent), 20_000))
    seeded = set(order_ids(np.arange(orders, dtype=np.int64)).to_pylist())
    payloads = [json.loads(value) for _, _, value, _ in batch]
    updates = [p for p in payloads if p["op"] == "u"]
    creates = [p for p in payloads if p["op"] == "c"]
    assert 0.45 < len(updates) / len(batch) < 0.55
    assert all(p["order_id"] in seeded for p in updates)
    created = [p["order_id"] for p in creates]
    assert len(set(created)) == len(created) and not seeded & set(created)
    assert sent.partitions == [partition for *_, partition in batch]
    assert [key for _, key, _, _ in batch] == [p["order_id"].encode() for p in payloads]
    for index in sample:
        oid = order_ids(np.array([index], dtype=np.int64))[0].as_py()
        last = [p for p in updates if p["order_id"] == oid][-1]
        assert sent.last[index] == (last["status"], last["address"])


def test_checkpoint_phases_split_a_commit_interval_into_the_checkpoint_and_the_commit_after_it() -> None:
    completed = {1: (10_000, 10_400), 2: (11_000, 11_600), 3: (12_000, 12_500)}
    # the poller saw bronze's commits of checkpoints 1 and 2 at epoch 10.5 s and 11.9 s (monotonic + 10)
    bronze = [SeenCommit(4, 0.5, 1, {0: 5}), SeenCommit(5, 0.6, 1, {1: 3}), SeenCommit(6, 1.9, 2, {0: 9})]
    phases = checkpoint_phases(completed, bronze, 10.0)
    assert phases["duration"] == {"p50_s": 0.5, "p99_s": pytest.approx(0.598), "n": 3}
    assert phases["commit_after"]["n"] == 2
    assert phases["commit_after"]["p50_s"] == pytest.approx(0.2)
    assert phases["trigger_gap"]["p50_s"] == 1.0


def test_a_vertexs_phases_are_its_slowest_completed_subtasks() -> None:
    subtasks = [
        {
            "status": "completed",
            "start_delay": 800,
            "alignment": {"duration": 20},
            "checkpoint": {"sync": 5, "async": 40},
            "end_to_end_duration": 900,
        },
        {
            "status": "completed",
            "start_delay": 300,
            "alignment": {"duration": 150},
            "checkpoint": {"sync": 1200, "async": 10},
            "end_to_end_duration": 1700,
        },
        {"status": "pending_or_failed", "start_delay": 9000},
    ]
    assert subtask_phases(subtasks) == {"delay": 0.8, "align": 0.15, "sync": 1.2, "async": 0.04, "ack": 1.7}
    assert subtask_phases([]) == {"delay": 0.0, "align": 0.0, "sync": 0.0, "async": 0.0, "ack": 0.0}


def test_each_minute_gets_its_checkpoints_slowest_phase_machine_share_and_cores() -> None:
    t0 = 1000.0
    sent = [0.0, 30.0, 61.0, 90.0]  # send clock (monotonic s): two events in each minute
    in_silver = np.array([1.0, 2.0, 3.0, 5.0])
    fast = {"v": {"delay": 0.1, "align": 0.0, "sync": 0.1, "async": 0.0, "ack": 0.3}}
    slow = {
        "a": {"delay": 0.2, "align": 0.0, "sync": 0.0, "async": 0.0, "ack": 0.4},
        "b": {"delay": 0.1, "align": 0.1, "sync": 2.5, "async": 0.0, "ack": 2.9},
    }
    checkpoints = [
        {"trigger": t0 + 10, "took_s": 0.3, "phases": fast},
        {"trigger": t0 + 70, "took_s": 0.3, "phases": fast},
        {"trigger": t0 + 80, "took_s": 2.9, "phases": slow},
    ]
    machine = [(t0, 0.0, 0.0), (t0 + 55, 44.0, 110.0), (t0 + 65, 50.0, 130.0), (t0 + 115, 130.0, 230.0)]
    cpu = [(t0, {"jvm": 0.0}), (t0 + 60, {"jvm": 30.0}), (t0 + 120, {"jvm": 90.0})]
    rows = by_minute(t0, sent, in_silver, checkpoints, machine, cpu)
    assert [r["minute"] for r in rows] == [0, 1]
    assert rows[0]["checkpoints"] == 1 and rows[1]["checkpoints"] == 2
    assert rows[1]["slowest"] == {
        "took_s": 2.9,
        "vertex": "b",
        "delay": 0.1,
        "align": 0.1,
        "sync": 2.5,
        "async": 0.0,
        "ack": 2.9,
    }
    assert rows[0]["machine_busy"] == 0.4 and rows[1]["machine_busy"] == 0.8
    assert rows[0]["cores"] == {"jvm": 0.5} and rows[1]["cores"] == {"jvm": 1.0}


#: One run as ``run_one`` reports it (the fields the report reads).
REPORTED_RUN: dict[str, Any] = {
    "orders": 1_000_000,
    "layout": "mor",
    "interval": "1s",
    "sent_per_s": 9996.1,
    "bronze": {"p50_s": 1.3, "p99_s": 2.6},
    "silver": {"p50_s": 1.4, "p99_s": 2.9},
    "silver_p99_by_minute": [2.8, None],
    "checkpoints": {"duration": {"p50_s": 0.46, "p99_s": 1.25}, "commit_after": {"p50_s": 0.2, "p99_s": 0.4}},
    "open_s_start": {"silver": 0.004},
    "open_s_end": {"silver": 0.005},
    "source_poll_s_start": {"bronze": 0.03},
    "source_poll_s_end": {"bronze": 0.04},
    "disk": {"max_disk_over_live": 1.5},
    "check": {"exactly_once_ok": True},
}


def test_the_report_has_a_row_per_run_and_marks_a_failed_run() -> None:
    failed = {"orders": 10, "layout": "cow", "interval": "5s", "error": "job died"}
    rows = markdown([REPORTED_RUN, failed]).splitlines()
    assert len(rows) == 4 and all(r.count("|") == rows[0].count("|") for r in rows)
    assert "| 1.4 / 2.9 | unseen | 0.46 / 1.25 | 0.2 / 0.4 |" in rows[2]
    assert "| 0.004 -> 0.005 | 0.03 -> 0.04 | True |" in rows[2]
    assert "| 5s | failed |" in rows[3]


def test_configuration_overrides_are_checked_and_named_by_their_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from benchmarks.freshness import parse
    from benchmarks.unbounded import env_overrides

    assert env_overrides(['LAKESTREAM__TABLES__SILVER_FOLD_EVERY="1h"'], "--env") == {
        "LAKESTREAM__TABLES__SILVER_FOLD_EVERY": '"1h"'
    }
    with pytest.raises(ValueError, match="--memory-env 'FLINK__X=1'"):
        env_overrides(["FLINK__X=1"], "--memory-env")
    with pytest.raises(SystemExit):
        parse(["--env", "LAKESTREAM__TABLES__SILVER_FOLD_EVERY"])
    assert "--env 'LAKESTREAM__TABLES__SILVER_FOLD_EVERY': expected" in capsys.readouterr().err
    settings = parse(["--orders", "1000,2000", "--intervals", "1s, 5s", "--env", "LAKESTREAM__A__B=1"])
    assert (settings.orders, settings.intervals, settings.env) == (
        [1000, 2000],
        ["1s", "5s"],
        {"LAKESTREAM__A__B": "1"},
    )


def test_a_source_poll_reads_the_newest_commit_of_a_table(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    from benchmarks.freshness import source_poll_seconds

    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"x": [1]}))
    assert source_poll_seconds(table) is None  # one commit: nothing to poll after it
    write_deltalake(str(table), pa.table({"x": [2, 3]}), mode="append")
    seconds = source_poll_seconds(table, repeat=1)
    assert seconds is not None and 0 < seconds < 60
