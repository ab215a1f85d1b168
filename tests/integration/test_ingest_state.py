"""De-dup state in Flink keyed state: it survives kill -9 and restores at another parallelism (real Kafka).

A re-delivery (the same bytes again, as a producer retry or a payment callback sent twice) whose first
copy was committed before the job was killed must still be recognised after the restore: counted once in
``events_duplicate`` (recorded in silver's commits, ``lakestream.counters``, so it survives the kill) and
applied once. The same across restores at parallelism 2 -> 1 -> 2, with every table exact, the gold
window's counts included (its aggregate state is rescaled by key group too), and with RocksDB's incremental
checkpoints on the S3 server (Flink's S3 plugin) instead of a local folder.
"""

from __future__ import annotations

import json
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from kafka import KafkaProducer

from devtools.processes import kill_group
from devtools.s3_server import LocalS3
from runtime.flink_env import latest_checkpoint
from storage.table_files import table_files
from tests.integration.test_ingest_end_to_end import read_silver, silver_commit_counters
from tests.support.gold_oracle import METRIC_NAMES, bronze_deliveries, expected_gold
from tests.support.ingest_job import (
    ROOT,
    old_tree,
    setup_topics,
    start_unbounded,
    table_rows,
    wait_for,
    wait_for_checkpoints,
)

pytestmark = pytest.mark.integration
PAID_AT = 1717214400000  # 2024-06-01T04:00:00Z
GOLD = "gold/order_metrics_5m"
#: The last commit whose jobs ran RocksDB without bloom filters and partitioned index/filters.
BEFORE_ROCKSDB_FILTERS = "940acce"


def payment(i: int) -> bytes:
    return json.dumps(
        {"payId": f"P{i}", "orderId": f"o{i}", "payMoney": 100 + i, "paidAt": PAID_AT + i}
    ).encode()


def behaviour(i: int) -> bytes:
    """A click of user ``u{i // 2}``: gold counts it (events, active users); silver does not."""
    return json.dumps({"uid": f"u{i // 2}", "event": "click", "ts": PAID_AT + i}).encode()


def send(kafka: str, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    for value in values:
        producer.send(topic, value=value).get(timeout=30)
    producer.close()


def counters(lakehouse: Path, name: str) -> int:
    """``name`` summed over the silver committer's commits: each checkpoint's count, committed once."""
    return silver_commit_counters(lakehouse)[name]


def run_until(
    env: dict[str, str],
    log: Path,
    lakehouse: Path,
    counts: dict[str, int],
    *,
    cwd: Path = ROOT,
    gold: dict[str, int] | None = None,
    checkpoints: Path | None = None,
) -> None:
    """Start the job, wait for ``counts`` (and the gold window's ``gold`` metrics) and two more completed
    checkpoints, kill -9 it. ``checkpoints``: where the checkpoints can be read as files (default: the
    local ``flink.checkpoint_dir`` of ``env``)."""
    folder = checkpoints or Path(env["LAKESTREAM__FLINK__CHECKPOINT_DIR"])
    proc = start_unbounded(env, log, cwd=cwd)
    try:
        wait_for(lakehouse, counts, proc, log)
        if gold is not None:
            wait_for_gold(lakehouse, gold, proc, log)
        # Two more completed checkpoints (nothing may be added twice); the kill lands anywhere after them.
        wait_for_checkpoints(folder, 2, proc, log)
    finally:
        kill_group(proc)  # kill -9 of the whole process group: no clean shutdown


def wait_for_gold(lakehouse: Path, metrics: dict[str, int], proc: Any, log: Path) -> None:
    """Until the one gold window has ``metrics`` committed (commits trail bronze's by a checkpoint)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            rows = DeltaTable(str(lakehouse / GOLD)).to_pyarrow_table().to_pylist()
        except TableNotFoundError:
            rows = []
        if len(rows) == 1 and {m: rows[0][m] for m in metrics} == metrics:
            return
        assert proc.poll() is None, f"job exited early:\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"gold {rows}, expected {metrics}\n{log.read_text()[-3000:]}"
        time.sleep(0.5)


def assert_silver(lakehouse: Path, orders: range) -> None:
    rows = read_silver(lakehouse)
    got = {r["order_id"]: (r["paid_amount"], r["status"], r["paid_amount__eid"]) for r in rows}
    assert got == {f"o{i}": (Decimal(100 + i) / 100, "paid", f"payments:P{i}") for i in orders}


def test_a_duplicate_across_kill_is_recognised(kafka: str, lakehouse: Path, tmp_path: Path) -> None:
    topics, env = setup_topics(kafka, tmp_path, lakehouse, partitions=2)
    log = tmp_path / "ingest.log"
    send(kafka, topics["payments"], [payment(i) for i in range(20)])
    run_until(env, log, lakehouse, {"silver/orders": 20, "bronze/order_events": 20})

    send(kafka, topics["payments"], [payment(3), payment(20)])  # P3 again: the same bytes
    run_until(env, log, lakehouse, {"silver/orders": 21, "bronze/order_events": 22})
    assert log.read_text().count("resuming from checkpoint") == 1

    assert counters(lakehouse, "events_duplicate") == 1
    assert counters(lakehouse, "silver_changes") == 21  # the re-delivery was applied once, not twice
    assert table_rows(lakehouse, "bronze/order_events") == 22  # bronze keeps both copies
    assert_silver(lakehouse, range(21))
    assert all(dedup_lookup_options(tmp_path / "checkpoints"))


def test_a_duplicate_across_kill_is_recognised_from_checkpoints_on_s3(
    kafka: str, lakehouse: Path, tmp_path: Path, s3: LocalS3
) -> None:
    """The test above with ``flink.checkpoint_dir`` on the S3 server (the lakehouse stays local) and the
    credentials in the AWS variables only: RocksDB's incremental checkpoints complete there, the job is
    killed with input in flight, and the next run restores the de-dup state from the newest one at
    another parallelism. The secret key is in no checkpoint object, no table file (commit metadata,
    manifests) and no output."""
    topics, env = setup_topics(kafka, tmp_path, lakehouse, partitions=2)
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(bucket)
    options = s3.storage_options()
    env |= {
        "LAKESTREAM__FLINK__CHECKPOINT_DIR": json.dumps(f"s3://{bucket}/checkpoints"),
        "LAKESTREAM__STORAGE__ENDPOINT": json.dumps(s3.url),
        "LAKESTREAM__STORAGE__PATH_STYLE": "true",
        "LAKESTREAM__STORAGE__ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": options["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": options["AWS_SECRET_ACCESS_KEY"],
    }
    store = table_files(f"s3://{bucket}", options)
    log = tmp_path / "ingest.log"
    send(kafka, topics["payments"], [payment(i) for i in range(20)])
    proc = start_unbounded(env, log)
    try:
        wait_for(lakehouse, {"silver/orders": 20, "bronze/order_events": 20}, proc, log)
        objects = [f.path for f in store.list("checkpoints/ingest")]
        # The commits ride on completed checkpoints: there is one on the store, with RocksDB's files.
        assert [n for n in objects if n.split("/")[-2].startswith("chk-") and n.endswith("/_metadata")]
        assert [n for n in objects if "/shared/" in n], objects
        send(kafka, topics["payments"], [payment(i) for i in range(20, 30)])  # in flight at the kill
    finally:
        kill_group(proc)

    send(kafka, topics["payments"], [payment(3), payment(30)])  # P3 again: the same bytes
    run_until(
        {**env, "LAKESTREAM__FLINK__PARALLELISM": "1"},
        log,
        lakehouse,
        {"silver/orders": 31, "bronze/order_events": 32},
        checkpoints=s3.buckets_dir / bucket / "checkpoints",  # the server's own folder of the prefix
    )
    assert f"resuming from checkpoint s3://{bucket}/checkpoints/ingest/" in log.read_text()
    assert counters(lakehouse, "events_duplicate") == 1
    assert counters(lakehouse, "silver_changes") == 31
    assert table_rows(lakehouse, "bronze/order_events") == 32
    assert_silver(lakehouse, range(31))
    written = s3.buckets_dir / bucket / "checkpoints"  # the server's own folder: one file per object
    assert all(dedup_lookup_options(written))
    secret = options["AWS_SECRET_ACCESS_KEY"].encode()
    assert not [f for f in written.rglob("*") if f.is_file() and secret in f.read_bytes()]
    # Nor in the tables: commit metadata, manifests, reader records.
    assert not [f for f in lakehouse.rglob("*") if f.is_file() and secret in f.read_bytes()]
    assert secret not in log.read_bytes()


def test_restores_at_another_parallelism_keep_the_dedup_state(
    kafka: str, lakehouse: Path, tmp_path: Path
) -> None:
    topics, env = setup_topics(kafka, tmp_path, lakehouse, partitions=2)
    log = tmp_path / "ingest.log"
    send(kafka, topics["payments"], [payment(i) for i in range(12)])
    send(kafka, topics["behaviour"], [behaviour(i) for i in range(6)])
    run_until(env, log, lakehouse, {"silver/orders": 12, "bronze/order_events": 18})

    send(kafka, topics["payments"], [payment(i) for i in (2, 7, 12)])  # two re-deliveries
    send(kafka, topics["behaviour"], [behaviour(i) for i in (3, 6, 7)])  # one re-delivery
    run_until(  # also one worker per Python operator: the checkpoint restores whatever the processes
        {**env, "LAKESTREAM__FLINK__PARALLELISM": "1", "LAKESTREAM__FLINK__PYTHON_WORKERS": "operator"},
        log,
        lakehouse,
        {"bronze/order_events": 24, "silver/orders": 13},
    )

    send(kafka, topics["payments"], [payment(i) for i in (5, 12, 13)])  # two more, one of them new above
    send(kafka, topics["behaviour"], [behaviour(i) for i in (0, 6, 8)])  # two more, one of them new
    gold = {"events": 14 + 9, "payments": 14, "active_users": 5, "orders_created": 0}
    run_until(env, log, lakehouse, {"bronze/order_events": 30, "silver/orders": 14}, gold=gold)

    assert log.read_text().count("resuming from checkpoint") == 2
    assert counters(lakehouse, "events_duplicate") == 4 + 3
    assert counters(lakehouse, "silver_changes") == 14
    assert_silver(lakehouse, range(14))
    bronze = DeltaTable(str(lakehouse / "bronze/order_events")).to_pyarrow_table()
    coords = list(
        zip(
            bronze["topic"].to_pylist(),
            bronze["partition"].to_pylist(),
            bronze["offset"].to_pylist(),
            strict=True,
        )
    )
    assert len(coords) == len(set(coords)) == 30
    # The gold window equals the recompute from bronze (each event id once) and the counts sent.
    [row] = DeltaTable(str(lakehouse / GOLD)).to_pyarrow_table().to_pylist()
    [expected] = expected_gold(bronze_deliveries(bronze.to_pylist()))
    assert {m: row[m] for m in METRIC_NAMES} == {m: expected[m] for m in METRIC_NAMES}
    assert {m: row[m] for m in gold} == gold
    assert row["gmv"] == sum(Decimal(100 + i) for i in range(14)) / 100


def dedup_lookup_options(checkpoints: Path) -> list[bool]:
    """Per RocksDB OPTIONS file of the de-dup state under ``checkpoints`` (part of every incremental
    checkpoint): did it run with bloom filters and partitioned index/filter blocks
    (``flink_runtime.ROCKSDB_LOOKUP_SETTINGS``)?"""
    header = b'[TableOptions/BlockBasedTable "lakestream-dedup-ids"]'
    sections = [
        text.split(header, 1)[1].split(b"\n[", 1)[0]
        for f in checkpoints.rglob("*")
        if f.is_file()
        for text in [f.read_bytes()]
        if header in text
    ]
    assert sections, f"no RocksDB OPTIONS of the de-dup state under {checkpoints}"
    return [
        b"filter_policy=bloomfilter:" in options
        and b"partition_filters=true" in options
        and b"index_type=kTwoLevelIndexSearch" in options
        for options in sections
    ]


def compaction_styles(checkpoints: Path) -> set[bytes]:
    """The compaction styles of the de-dup state's RocksDB OPTIONS files under ``checkpoints``."""
    header = b'[CFOptions "lakestream-dedup-ids"]'
    styles = set()
    for f in checkpoints.rglob("*"):
        text = f.read_bytes() if f.is_file() else b""
        if header in text:
            section = text.split(header, 1)[1].split(b"\n[", 1)[0]
            styles.update(
                line.split(b"=", 1)[1].strip()
                for line in section.splitlines()
                if line.strip().startswith(b"compaction_style=")
            )
    assert styles, f"no RocksDB OPTIONS of the de-dup state under {checkpoints}"
    return styles


def test_a_checkpoint_of_level_compaction_restores_under_universal(
    kafka: str, lakehouse: Path, tmp_path: Path
) -> None:
    """``flink.rocksdb_compaction`` is an option of how RocksDB merges its files, not of what they
    hold: de-dup state checkpointed with ``level`` compaction restores under ``universal`` (the
    default) and its ids are still recognised, and the state written since then is compacted the new
    way (DESIGN.md section 2: no upgrade step)."""
    topics, env = setup_topics(kafka, tmp_path, lakehouse, partitions=2)
    env = {**env, "LAKESTREAM__GOLD__ENABLED": "false"}
    log = tmp_path / "ingest.log"
    send(kafka, topics["payments"], [payment(i) for i in range(10)])
    run_until(
        {**env, "LAKESTREAM__FLINK__ROCKSDB_COMPACTION": '"level"'}, log, lakehouse, {"silver/orders": 10}
    )
    assert compaction_styles(tmp_path / "checkpoints") == {b"kCompactionStyleLevel"}

    send(kafka, topics["payments"], [payment(4), payment(10)])  # P4 again: its id is in the restored state
    run_until(env, log, lakehouse, {"silver/orders": 11, "bronze/order_events": 12})
    assert log.read_text().count("resuming from checkpoint") == 1
    assert counters(lakehouse, "events_duplicate") == 1
    assert_silver(lakehouse, range(11))
    newest = latest_checkpoint(tmp_path / "checkpoints")
    assert newest is not None
    assert compaction_styles(newest) == {b"kCompactionStyleUniversal"}


def test_a_checkpoint_without_the_rocksdb_filters_restores_with_them(
    kafka: str, lakehouse: Path, tmp_path: Path
) -> None:
    """The RocksDB options are table options: the de-dup state the version before them checkpointed
    restores, and its ids are still recognised (DESIGN.md section 2: no upgrade step). Without the
    speed layer: the old tree's gold aggregate (Flink SQL) has no place in this graph (section 11.6)."""
    old = old_tree(BEFORE_ROCKSDB_FILTERS, tmp_path / "old")
    topics, env = setup_topics(kafka, tmp_path, lakehouse, partitions=2)
    env = {**env, "LAKESTREAM__GOLD__ENABLED": "false"}
    log = tmp_path / "ingest.log"
    send(kafka, topics["payments"], [payment(i) for i in range(10)])
    # The old tree first on the path of the client and of the Python workers the JVM starts.
    run_until({**env, "PYTHONPATH": str(old)}, log, lakehouse, {"silver/orders": 10}, cwd=old)
    assert not any(dedup_lookup_options(tmp_path / "checkpoints"))

    send(kafka, topics["payments"], [payment(4), payment(10)])  # P4 again: its id is in the old state
    # In the layout the old tree wrote (its work may be staged at the kill; a switch is its own test).
    env = {**env, "LAKESTREAM__TABLES__SILVER_LAYOUT": "copy_on_write"}
    run_until(env, log, lakehouse, {"silver/orders": 11, "bronze/order_events": 12})
    assert log.read_text().count("resuming from checkpoint") == 1
    assert counters(lakehouse, "events_duplicate") == 1
    assert counters(lakehouse, "silver_changes") == 11
    assert_silver(lakehouse, range(11))
    # The newest completed one: the run may stop while a later checkpoint is still being written.
    newest = latest_checkpoint(tmp_path / "checkpoints")
    assert newest is not None
    assert all(dedup_lookup_options(newest))  # the state written since the restore has them
