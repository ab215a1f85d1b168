"""The ingest job end to end: real broker, MiniCluster (subprocess), five Delta tables equal to expectations.

The expectations are computed here from what the test produced (the generator's ground truth, the
payloads we hand-built and the Kafka coordinates the broker acknowledged), never by calling the job's
adapters, quality rules or resolution.

Lateness is exact by design (see ``flink_jobs.ingest``'s docstring): an event is judged against the
watermark of its own Kafka partition, which depends only on that partition's order, so the expected late
table (watermarks included) follows from the acknowledged coordinates. Besides the generator's own
out-of-order and moved-to-the-end events, the stream carries hand-made late events stamped hours before
everything on their partition and produced after it, and the seed scenario (12:00 Chaoyang, 12:05
Haidian, then a 10:00 Xicheng record on the same partition).
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from devtools.processes import kill_group
from devtools.sample_events import SampleSettings, SourceEvent, generate
from lakestream.config import load_config
from lakestream.explain_order import explain_order
from merge_on_read.table import read_current, silver_mor_table
from serving.explain_read import read_order
from tests.support.cli import run_cli
from tests.support.delta_tables import StoredTable
from tests.support.ingest_job import setup_topics, start_unbounded, wait_for, wait_for_checkpoints
from tests.support.silver_oracle import FIELDS as RESOLVED
from tests.support.silver_oracle import expected_silver

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
START = datetime(2024, 6, 1, 4, 0, tzinfo=UTC)  # 12:00 in Asia/Shanghai
BOUND = timedelta(minutes=30)  # event_time.max_out_of_orderness for this test
LONG_AGO = START - timedelta(hours=3)  # late events: far behind anything on their partition
SOURCES = ("orders_db", "payments", "logistics", "behaviour")


@dataclass
class Record:
    """One produced Kafka record and what the test knows about it."""

    ev: SourceEvent
    kind: str  # valid | suspicious | invalid | malformed
    topic: str = ""
    partition: int = -1
    offset: int = -1
    label: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def coords(self) -> tuple[str, int, int]:
        return (self.topic, self.partition, self.offset)

    @property
    def raw(self) -> bytes:
        return self.ev.value or b""


def _ms(ts: datetime) -> int:
    return int(ts.timestamp() * 1000)


def _local(ts: datetime) -> str:
    return (ts + timedelta(hours=8)).strftime("%Y-%m-%d %H:%M:%S")  # Asia/Shanghai has no DST


def db_event(
    oid: str,
    op: str,
    at: datetime,
    *,
    status: str,
    address: str | None,
    amount: str = "88.00",
    uid: str = "U1",
) -> SourceEvent:
    payload = {
        "op": op,
        "order_id": oid,
        "user_id": uid,
        "amount": amount,
        "status": status,
        "address": address,
        "updated_at": _local(at),
    }
    sets: dict[str, Any] = {"user_id": uid, "amount": Decimal(amount), "status": status, "deleted": op == "d"}
    if address is not None:
        sets["address"] = address
    if op == "c":
        sets["created_time"] = at
    return SourceEvent("orders_db", oid.encode(), json.dumps(payload).encode(), at, oid, sets)


def raw_event(
    source: str, key: bytes | None, value: Any, at: datetime | None = None, oid: str | None = None
) -> SourceEvent:
    data = value if isinstance(value, bytes) or value is None else json.dumps(value).encode()
    return SourceEvent(source, key, data, at, oid, malformed=at is None)  # type: ignore[arg-type]


def build_stream() -> tuple[list[Record], int]:
    """Generated orders + the seed scenario + bad records + late records, in production order.

    Also returns where the second half starts (see the restart test).
    """
    rng = random.Random(20240601)
    generated = generate(SampleSettings(orders=300, start=START, seed=11, duplicate_ratio=0.06))
    records = [Record(ev, "malformed" if ev.malformed else "valid", label="generated") for ev in generated]
    orders = sorted({r.ev.order_id for r in records if r.ev.order_id and r.ev.source == "orders_db"})
    with_payment = sorted({r.ev.order_id for r in records if r.kind == "valid" and r.ev.source == "payments"})
    uids = sorted({r.ev.key.decode() for r in records if r.ev.source == "behaviour" and r.ev.key})

    def insert(rec: Record, *, lo: int = 0) -> None:
        records.insert(rng.randrange(lo, len(records) + 1), rec)

    # The seed scenario: created 12:00 Chaoyang, updated 12:05 Haidian, then a 10:00 Xicheng record.
    records.insert(
        3,
        Record(
            db_event("1001", "c", START, status="created", address="Chaoyang"), "valid", label="seed-create"
        ),
    )
    records.insert(
        40,
        Record(
            db_event("1001", "u", START + timedelta(minutes=5), status="pending", address="Haidian"),
            "valid",
            label="seed-update",
        ),
    )

    # SUSPICIOUS: kept out of silver and out of the watermark (a 2099 clock would make all else late).
    oid = orders[5]
    suspicious = [
        db_event(oid, "u", START + timedelta(minutes=30), status="teleported", address="Mars"),
        raw_event(
            "payments",
            oid.encode(),
            {
                "payId": "PSUS1",
                "orderId": oid,
                "payMoney": 250_000_000,
                "paidAt": _ms(START + timedelta(minutes=20)),
            },
            START + timedelta(minutes=20),
            oid,
        ),
        raw_event(
            "logistics",
            orders[6].encode(),
            {
                "trackingNo": "TFUT",
                "order": orders[6],
                "state": "teleported",
                "ts": "2099-01-01T00:00:00+00:00",
            },
            datetime(2099, 1, 1, tzinfo=UTC),
            orders[6],
        ),
        # Epoch seconds where millis are expected: decodes to January 1970, implausibly old.
        raw_event(
            "behaviour",
            uids[0].encode(),
            {"uid": uids[0], "event": "view", "ts": 1717214400},
            EPOCH + timedelta(milliseconds=1717214400),
        ),
    ]
    for ev in suspicious:
        insert(Record(ev, "suspicious", label="suspicious"), lo=10)

    # INVALID (well-typed, but breaks a business rule): quarantined by the quality stage.
    invalid = [
        raw_event(
            "payments",
            b"x",
            {
                "payId": "PNEG",
                "orderId": orders[7],
                "payMoney": -500,
                "paidAt": _ms(START + timedelta(minutes=9)),
            },
            START + timedelta(minutes=9),
            orders[7],
        ),
        raw_event(
            "payments",
            b"x",
            {"payId": "PNOORDER", "payMoney": 500, "paidAt": _ms(START + timedelta(minutes=9))},
            START + timedelta(minutes=9),
            None,
        ),
        raw_event(
            "logistics",
            orders[8].encode(),
            {"trackingNo": "TNOSTATE", "order": orders[8], "ts": (START + timedelta(minutes=9)).isoformat()},
            START + timedelta(minutes=9),
            orders[8],
        ),
        raw_event("orders_db", b"y", {"op": "u", "status": "paid", "updated_at": _local(START)}, START),
    ]
    for ev in invalid:
        insert(Record(ev, "invalid", label="invalid"), lo=10)

    # Malformed payloads of every source: never crash the job, always quarantined with a reason.
    big = "x" * 200_000
    malformed: list[tuple[str, Any]] = [
        ("orders_db", b'{"op": "u", "order_id": "100003", "amount": "12'),  # truncated JSON
        ("orders_db", {"op": "u", "order_id": "100004", "amount": "abc", "updated_at": _local(START)}),
        ("orders_db", {"op": "u", "order_id": "100005", "amount": "1e30", "updated_at": _local(START)}),
        ("orders_db", {"op": "u", "order_id": "100006", "status": "paid"}),  # no updated_at
        ("orders_db", {"op": "x", "order_id": "100006", "updated_at": _local(START)}),
        ("payments", {"payId": "PBAD", "orderId": "100007", "payMoney": "lots", "paidAt": _ms(START)}),
        ("payments", {"orderId": "100007", "payMoney": 100, "paidAt": _ms(START)}),  # no payId
        ("payments", {"payId": "PHUGE", "orderId": "100007", "payMoney": 10**40, "paidAt": _ms(START)}),
        ("payments", b"\x00\x01\x02\xff\xfe binary \x80\x81"),
        ("logistics", {"trackingNo": "TBAD", "order": "100008", "state": "in_transit", "ts": 12345}),
        ("logistics", {"trackingNo": "TBAD", "order": "100008", "state": "x", "ts": "2024-06-01 12:00:00"}),
        ("logistics", {"trackingNo": ["T"], "order": "100008", "state": "x", "ts": START.isoformat()}),
        ("logistics", json.dumps({"trackingNo": "T" * 300}).encode()[:-1] + b" " * 10),  # truncated
        ("behaviour", {"uid": "U1", "ts": _ms(START)}),  # no event name
        ("behaviour", {"uid": "U1", "event": "view", "ts": "yesterday"}),
        ("behaviour", {"uid": "U1", "event": big, "ts": _ms(START)}),  # huge value
        ("behaviour", {"uid": "U1", "event": "view", "ts": _ms(START), "orderId": big}),
        ("behaviour", None),  # null Kafka value
        ("behaviour", b""),
        ("payments", b"[1, 2, 3]"),
    ]
    for source, value in malformed:
        key = None if value is not None else b"tombstone"  # Kafka needs a key or a value
        insert(Record(raw_event(source, key, value), "malformed", label="malformed"), lo=5)

    # Late: stamped hours before the window, produced after everything else on their partition.
    late = [
        db_event("1001", "u", START - timedelta(hours=2), status="shipped", address="Xicheng"),  # 10:00
        db_event(orders[10], "u", LONG_AGO, status="completed", address="Shunyi"),
        db_event(orders[11], "u", LONG_AGO, status="completed", address="Fengtai"),
        raw_event(
            "payments",
            with_payment[3].encode(),
            {"payId": "PLATE1", "orderId": with_payment[3], "payMoney": 777, "paidAt": _ms(LONG_AGO)},
            LONG_AGO,
            with_payment[3],
        ),
        raw_event(
            "logistics",
            orders[12].encode(),
            {"trackingNo": "TLATE", "order": orders[12], "state": "lost", "ts": LONG_AGO.isoformat()},
            LONG_AGO,
            orders[12],
        ),
        raw_event(
            "behaviour", uids[1].encode(), {"uid": uids[1], "event": "click", "ts": _ms(LONG_AGO)}, LONG_AGO
        ),
    ]
    late_sets: list[dict[str, Any]] = [
        {},
        {},
        {},
        {"paid_amount": Decimal("7.77"), "status": "paid"},
        {"logistics_state": "lost"},
        {},
    ]
    # The seed's 10:00 record opens the second half: in the restart test it is the first record of its
    # partition after the restore, so only the restored watermark state can tell that it is late.
    split = len(records) // 2
    records.insert(split, Record(late[0], "valid", label="late"))
    for ev, sets in zip(late[1:], late_sets[1:], strict=True):
        if sets:
            ev = SourceEvent(ev.source, ev.key, ev.value, ev.event_time, ev.order_id, sets)
        records.append(Record(ev, "valid", label="late"))
    records.append(Record(late[1], "valid", label="late-duplicate"))  # a re-delivered late record
    return records, split


def produce(bootstrap: str, topics: dict[str, str], records: list[Record]) -> None:
    """Send in list order (Kafka keeps it per partition); record the acknowledged coordinates."""
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=5,
        max_in_flight_requests_per_connection=1,
        max_request_size=4 << 20,
    )
    futures = [producer.send(topics[r.ev.source], key=r.ev.key, value=r.ev.value) for r in records]
    producer.flush()
    for rec, fut in zip(records, futures, strict=True):
        meta = fut.get(timeout=30)
        rec.topic, rec.partition, rec.offset = meta.topic, meta.partition, meta.offset
    producer.close()


def late_expectation(records: list[Record]) -> dict[tuple[str, int, int], int]:
    """Coordinates of the records that must be late -> the watermark (ms) they arrived behind.

    Written from the definition (``flink_jobs.ingest``): per Kafka partition, the watermark is the
    largest VALID event time read so far minus BOUND minus 1 ms; a VALID event at or below it is late.
    """
    bound = int(BOUND.total_seconds() * 1000)
    out: dict[tuple[str, int, int], int] = {}
    partition_max: dict[tuple[str, int], int] = {}
    for r in sorted((r for r in records if r.kind == "valid"), key=lambda r: r.coords):
        ts = _ms(r.ev.event_time)
        before = partition_max.get((r.topic, r.partition))
        if before is not None and ts <= before - bound - 1:
            out[r.coords] = before - bound - 1
        partition_max[(r.topic, r.partition)] = ts if before is None else max(ts, before)
    return out


def run_ingest(env: dict[str, str], timeout: float = 200) -> subprocess.CompletedProcess[str]:
    """``python -m cli ingest --bounded`` in its own process (own JVM), failing with its output."""
    return run_cli("ingest", "--bounded", env=env, timeout=timeout)


def read(lakehouse: Path, table: str) -> list[dict[str, Any]]:
    return DeltaTable(str(lakehouse / table)).to_pyarrow_table().to_pylist()


def by_coords(rows: list[dict[str, Any]]) -> dict[tuple[str, int, int], dict[str, Any]]:
    out = {(r["topic"], r["partition"], r["offset"]): r for r in rows}
    assert len(out) == len(rows), "a Kafka record was written twice"
    return out


def expected_counts(records: list[Record]) -> dict[str, int]:
    kinds = Counter(r.kind for r in records)
    return {
        "bronze/order_events": len(records) - kinds["malformed"],
        "quarantine/order_events": kinds["malformed"] + kinds["invalid"],
        "review/order_events": kinds["suspicious"],
        "late/order_events": len(late_expectation(records)),
    }


def assert_tables(lakehouse: Path, records: list[Record], runs: list[list[Record]] | None = None) -> None:
    """All five tables equal what the produced records imply.

    ``runs``: the records each of several separate bounded runs read, when the stream was ingested so.
    De-dup state is not carried from one such run to the next (DESIGN.md section 9), so a re-delivery
    of an event an earlier run read counts as unique (silver is the same: the fold is idempotent).
    """
    kinds = Counter(r.kind for r in records)
    assert kinds["malformed"] >= 20 and kinds["suspicious"] == 4 and kinds["invalid"] == 4

    # Bronze: every standardised event exactly once (duplicate deliveries included), with coordinates.
    bronze = by_coords(read(lakehouse, "bronze/order_events"))
    standardised = {r.coords: r for r in records if r.kind != "malformed"}
    assert set(bronze) == set(standardised)
    quality = {"valid": "VALID", "suspicious": "SUSPICIOUS", "invalid": "INVALID"}
    for coords, rec in standardised.items():
        row = bronze[coords]
        assert (row["source"], row["raw"], row["order_id"], row["event_time"], row["quality"]) == (
            rec.ev.source,
            rec.raw,
            rec.ev.order_id,
            rec.ev.event_time,
            quality[rec.kind],
        ), rec.label

    # Quarantine: adapter rejects (malformed) and INVALID events, byte-exact, each with a reason.
    quarantine = by_coords(read(lakehouse, "quarantine/order_events"))
    rejected = {r.coords: r for r in records if r.kind in ("malformed", "invalid")}
    assert set(quarantine) == set(rejected)
    for coords, rec in rejected.items():
        row = quarantine[coords]
        stage = "adapter" if rec.kind == "malformed" else "quality"
        assert (row["raw"], row["source"], row["stage"]) == (rec.raw, rec.ev.source, stage), rec.label
        assert re.match(r"^[\w/]+: \S", row["reason"]), row["reason"]

    # Review: the SUSPICIOUS events, and nothing else.
    review = by_coords(read(lakehouse, "review/order_events"))
    assert set(review) == {r.coords for r in records if r.kind == "suspicious"}
    assert all(row["quality"] == "SUSPICIOUS" and row["quality_reason"] for row in review.values())

    # Late: exactly the late arrivals (the re-delivery too), each with the watermark it arrived behind.
    expected_late = late_expectation(records)
    late = by_coords(read(lakehouse, "late/order_events"))
    labels = Counter(rec.label for rec in records if rec.coords in expected_late)
    assert labels["late"] == 6 and labels["late-duplicate"] == 1 and labels["generated"] >= 1, labels
    assert set(late) == set(expected_late)
    for coords, watermark in expected_late.items():
        assert _ms(late[coords]["watermark"]) == watermark, coords
        assert late[coords]["event_time"] == standardised[coords].ev.event_time
    seed_late = next(r for r in records if r.label == "late" and r.ev.order_id == "1001")
    assert late[seed_late.coords]["address"] == "Xicheng"

    # Silver: one row per order, equal to the generator's ground truth (VALID events, late ones included).
    silver_rows = read_silver(lakehouse)
    silver = {r["order_id"]: {f: r[f] for f in RESOLVED if r[f] is not None} for r in silver_rows}
    assert len(silver) == len(silver_rows)
    expected = expected_silver([r.ev for r in records if r.kind == "valid"])
    assert silver == expected
    assert silver["1001"]["address"] == "Haidian" and silver["1001"]["status"] == "pending"
    assert_explained(lakehouse, silver_rows, records)

    # The resolve counts in silver's commits: each VALID event is counted exactly once (replays after a
    # restore included): as a re-delivery of an id seen before, or fresh, then a silver change unless it
    # sets nothing (behaviour events, events without an order). De-dup state is checkpointed, so this
    # holds across restores too.
    counts = silver_commit_counters(lakehouse)
    assert counts["events_late"] == len(expected_late)
    duplicates, changes = 0, 0
    for run in runs or [records]:
        coords = {r.coords for r in run}
        valid = [row for c, row in bronze.items() if row["quality"] == "VALID" and c in coords]
        distinct = {row["event_id"] for row in valid}
        feeding = {r["event_id"] for r in valid if r["order_id"] is not None and r["source"] != "behaviour"}
        duplicates += len(valid) - len(distinct)
        changes += len(feeding)
    assert counts["events_duplicate"] == duplicates >= 1, counts
    assert counts["silver_changes"] == changes, counts


def assert_explained(lakehouse: Path, silver_rows: list[dict[str, Any]], records: list[Record]) -> None:
    """``explain order`` for every order of bronze: each bronze row once with one outcome, the outcome
    its record's kind implies, each field's winner the event silver names, the winners folding to the
    silver row; the seed order through the reader as the CLI reads it (late Xicheng older, not applied)."""
    bronze = DeltaTable(str(lakehouse / "bronze/order_events")).to_pyarrow_table()
    late = DeltaTable(str(lakehouse / "late/order_events")).to_pyarrow_table()
    silver = {r["order_id"]: r for r in silver_rows}
    kind = {r.coords: r.kind for r in records}
    expected_outcome = {"suspicious": "review", "invalid": "quarantined"}
    orders = {o for o in bronze["order_id"].to_pylist() if o is not None}
    assert set(silver) <= orders
    for order_id in sorted(orders):
        rows = bronze.filter(pc.equal(bronze["order_id"], order_id))
        out = explain_order(
            order_id, silver.get(order_id), rows, late=late.filter(pc.equal(late["order_id"], order_id))
        )
        assert out.problems == (), (order_id, out.problems)
        coords = Counter((e.event.topic, e.event.partition, e.event.offset) for e in out.timeline)
        assert coords == Counter(
            zip(
                rows["topic"].to_pylist(),
                rows["partition"].to_pylist(),
                rows["offset"].to_pylist(),
                strict=True,
            )
        )
        valid_ids = [e.event.event_id for e in out.timeline if e.event.quality == "VALID"]
        assert sum(e.outcome == "duplicate" for e in out.timeline) == len(valid_ids) - len(set(valid_ids))
        for e in out.timeline:
            c = (e.event.topic, e.event.partition, e.event.offset)
            if kind[c] in expected_outcome:
                assert e.outcome == expected_outcome[kind[c]], (c, e)
            assert (e.late is not None) == ("late" in e.tables)
        for f in out.fields:
            row = silver.get(order_id)
            if row is None or row[f.field] is None:
                assert f.winner is None
            else:
                assert f.winner is not None and f.winner.event_id == row[f.id_column], (order_id, f.field)
    if isinstance(lakehouse, StoredTable):
        return
    env = {"LAKESTREAM__LAKEHOUSE__ROOT": str(lakehouse)}
    if merge_on_read(lakehouse):
        env["LAKESTREAM__TABLES__SILVER_LAYOUT"] = "merge_on_read"
    cfg = load_config(None, environ=env)
    explained, read_at = read_order(cfg, "1001")
    # The silver version that applied each change holds it (the last change of a field in that version).
    assert explained.history and all(c.silver_version is not None for c in explained.history)
    last: dict[tuple[int, str], str] = {}
    for change in explained.history:
        assert change.silver_version is not None
        last.update(((change.silver_version, f), change.event.event_id) for f in change.values)
    if not merge_on_read(lakehouse):
        for (version, field_name), event_id in last.items():
            at_version = DeltaTable(str(lakehouse / "silver/orders"), version=version).to_pyarrow_table()
            row = at_version.filter(pc.equal(at_version["order_id"], "1001")).to_pylist()[0]
            assert row[f"{field_name}__eid"] == event_id, (version, field_name)
            before = DeltaTable(str(lakehouse / "silver/orders"), version=version - 1).to_pyarrow_table()
            earlier = before.filter(pc.equal(before["order_id"], "1001")).to_pylist()
            assert not earlier or earlier[0][f"{field_name}__eid"] != event_id, (version, field_name)
    # Where the payment callbacks of order 100007 went: three records the adapter could not read.
    lost, _ = read_order(cfg, "100007")
    assert [r.source for r in lost.rejects] == ["payments"] * 3 and lost.problems == ()
    assert all(r.reason for r in lost.rejects)
    # --as-of the version read, or a time after it, explains the same (the other tables as of then).
    for at in (read_at.point.version, datetime.now(UTC)):
        again, _ = read_order(cfg, "1001", at)
        assert (again.fields, again.timeline) == (explained.fields, explained.timeline)
    address = next(f for f in explained.fields if f.field == "address")
    assert address.value == "Haidian" and address.winner is not None
    assert address.winner.bronze_version is not None
    xicheng = next(o for o in address.others if o.value == "Xicheng")
    assert xicheng.outcome == "older"
    entry = next(e for e in explained.timeline if e.event is xicheng.event)
    assert entry.late is not None and "did not set a silver value" in entry.detail


def merge_on_read(lakehouse: Path) -> bool:
    """Whether the run kept silver merge-on-read (it has a changes table)."""
    return (lakehouse / "silver/orders_changes/_delta_log").is_dir()


def read_silver(lakehouse: Path) -> list[dict[str, Any]]:
    """The current silver rows: the table itself, or its snapshot and changes read as one."""
    if not merge_on_read(lakehouse):
        return read(lakehouse, "silver/orders")
    cfg = load_config(None, environ={"LAKESTREAM__LAKEHOUSE__ROOT": str(lakehouse)})
    return read_current(silver_mor_table(cfg)).to_pylist()


def silver_commit_counters(lakehouse: Path) -> Counter[str]:
    """``lakestream.counters`` of the silver sink's commits, summed over the whole history of silver's
    tables (a lakehouse switched to merge-on-read has copy-on-write commits in ``silver/orders``)."""
    total: Counter[str] = Counter()
    tables = ["silver/orders", "silver/orders_changes"] if merge_on_read(lakehouse) else ["silver/orders"]
    for table in tables:
        for entry in DeltaTable(str(lakehouse / table)).history():
            total.update(entry.get("lakestream.counters") or {})
    return total


def test_ingest_bounded_tables_equal_expectations(kafka: str, lakehouse: Path, tmp_path: Path) -> None:
    topics, env = setup_topics(kafka, tmp_path, lakehouse)
    records, _ = build_stream()
    produce(kafka, topics, records)

    started = time.monotonic()
    out = run_ingest(env)
    print(f"bounded ingest of {len(records)} records took {time.monotonic() - started:.1f}s")
    for table in (*expected_counts(records), "silver/orders"):
        assert table in out.stdout
    assert_tables(lakehouse, records)
    # Silver is rewritten by every MERGE, so its files are smaller ([tables] merge_target_file_size_mb).
    props = {
        t: DeltaTable(str(lakehouse / t)).metadata().configuration
        for t in ("silver/orders", "bronze/order_events")
    }
    assert props["silver/orders"].get("delta.targetFileSize") == str(16 * 1024 * 1024)
    assert "delta.targetFileSize" not in props["bronze/order_events"]

    # The run finished with its extent committed to the consumer group: a second run adds nothing.
    consumer = KafkaConsumer(bootstrap_servers=kafka, group_id=env["LAKESTREAM__KAFKA__GROUP_ID"])
    partitions = [TopicPartition(t, p) for t in topics.values() for p in range(3)]
    try:
        committed = {tp: consumer.committed(tp) for tp in partitions}
        assert committed == consumer.end_offsets(partitions)
    finally:
        consumer.close()


def test_ingest_killed_and_resumed_gives_the_same_tables(
    kafka: str, any_lakehouse: Path, tmp_path: Path
) -> None:
    """SIGKILL, restart: state (watermarks, orders, sinks) resumes; tables equal expectations.

    The first run is killed once the first half is committed everywhere, and the second half is produced
    only then, so the restored watermarks alone decide whether its first records are late. On both back
    ends: a local lakehouse and one on the S3 server.
    """
    lakehouse = any_lakehouse
    topics, env = setup_topics(kafka, tmp_path, lakehouse)
    records, half = build_stream()
    first_half = records[:half]
    produce(kafka, topics, first_half)
    log = tmp_path / "ingest.log"

    started = time.monotonic()
    first = start_unbounded(env, log)
    try:
        counts = expected_counts(first_half)
        counts["silver/orders"] = len(expected_silver([r.ev for r in first_half if r.kind == "valid"]))
        wait_for(lakehouse, counts, first, log)
        # Two more (empty) checkpoints; the kill lands anywhere after them.
        wait_for_checkpoints(tmp_path / "checkpoints", 2, first, log)
    finally:
        kill_group(first)  # no clean shutdown: staged files and uncommitted checkpoints stay behind
    produce(kafka, topics, records[half:])

    second = start_unbounded(env, log)
    try:
        wait_for(lakehouse, expected_counts(records), second, log)
        # Two more completed checkpoints (each commits whatever it holds): nothing may be added twice.
        wait_for_checkpoints(tmp_path / "checkpoints", 2, second, log)
    finally:
        kill_group(second)
    print(f"kill-and-resume ingest of {len(records)} records took {time.monotonic() - started:.1f}s")
    assert "resuming from checkpoint" in log.read_text()
    assert_tables(lakehouse, records)
    if isinstance(lakehouse, StoredTable):  # no object of the tables (commits, manifests) holds the secret
        secret = lakehouse.options["AWS_SECRET_ACCESS_KEY"].encode()
        assert not [f for f in lakehouse.rglob("*") if f.is_file() and secret in f.read_bytes()]
        assert secret not in log.read_bytes()


def wait_for_silver(lakehouse: Path, orders: int, proc: Any, log: Path, timeout: float = 150) -> None:
    """Until the current silver (merge-on-read: snapshot and changes) has ``orders`` rows."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if merge_on_read(lakehouse) and len(read_silver(lakehouse)) >= orders:
            return
        assert proc.poll() is None, f"job exited early:\n{log.read_text()[-4000:]}"
        time.sleep(0.5)
    raise AssertionError(f"silver has fewer than {orders} orders\n{log.read_text()[-4000:]}")


def test_merge_on_read_silver_killed_twice_then_bounded(kafka: str, lakehouse: Path, tmp_path: Path) -> None:
    """Merge-on-read silver across two SIGKILLs (folds running beside the commits, changes trimmed as
    soon as folded): the current silver is exact after each run, the bounded run's final fold leaves
    the snapshot alone exact, and the counters are in the changes table exactly once."""
    topics, env = setup_topics(kafka, tmp_path, lakehouse)
    env |= {
        "LAKESTREAM__TABLES__SILVER_LAYOUT": "merge_on_read",
        "LAKESTREAM__TABLES__SILVER_FOLD_EVERY": '"2s"',
        "LAKESTREAM__TABLES__SILVER_CHANGES_RETENTION": '"0s"',
    }
    records, half = build_stream()
    log = tmp_path / "ingest.log"
    produce(kafka, topics, records[:half])
    first = start_unbounded(env, log)
    try:
        wait_for(lakehouse, expected_counts(records[:half]), first, log)
        orders = len(expected_silver([r.ev for r in records[:half] if r.kind == "valid"]))
        wait_for_silver(lakehouse, orders, first, log)
        # Two more checkpoints (folds run beside them); the kill lands anywhere between commits and folds.
        wait_for_checkpoints(tmp_path / "checkpoints", 2, first, log)
    finally:
        kill_group(first)
    produce(kafka, topics, records[half:])
    second = start_unbounded(env, log)
    try:
        wait_for(lakehouse, expected_counts(records), second, log)
        wait_for_silver(
            lakehouse, len(expected_silver([r.ev for r in records if r.kind == "valid"])), second, log
        )
        # Two more completed checkpoints: nothing may be added twice.
        wait_for_checkpoints(tmp_path / "checkpoints", 2, second, log)
    finally:
        kill_group(second)
    assert "resuming from checkpoint" in log.read_text()
    assert_tables(lakehouse, records)
    snapshot = DeltaTable(str(lakehouse / "silver/orders"))
    assert any(h.get("lakestream.freshness") for h in snapshot.history()), "no fold ran beside the job"

    run_ingest(env)  # settles the killed run, reads nothing new, folds the rest at its end
    assert_tables(lakehouse, records)
    folded = {r["order_id"]: r for r in read(lakehouse, "silver/orders")}
    assert folded == {r["order_id"]: r for r in read_silver(lakehouse)}


def test_silver_exact_with_cold_state_across_runs(kafka: str, lakehouse: Path, tmp_path: Path) -> None:
    """Silver is exact across separate jobs: the table, not the job's memory, holds the order state.

    Two separate bounded runs (the second a fresh job: empty de-dup state, new run id) over the two
    halves of the stream. The second half carries older events for orders whose newer values the first
    run already committed, so only the Delta MERGE's event-time guard, against the stored rows, keeps
    silver right.
    """
    topics, env = setup_topics(kafka, tmp_path, lakehouse)
    records, half = build_stream()
    produce(kafka, topics, records[:half])
    run_ingest(env)
    produce(kafka, topics, records[half:])
    run_ingest(env)

    bronze = by_coords(read(lakehouse, "bronze/order_events"))
    assert set(bronze) == {r.coords for r in records if r.kind != "malformed"}
    silver_rows = read(lakehouse, "silver/orders")
    silver = {r["order_id"]: {f: r[f] for f in RESOLVED if r[f] is not None} for r in silver_rows}
    assert len(silver) == len(silver_rows)
    assert silver == expected_silver([r.ev for r in records if r.kind == "valid"])


def test_periodic_bounded_runs_continue_exactly(kafka: str, lakehouse: Path, tmp_path: Path) -> None:
    """``ingest --bounded`` run three times, more input before each (cron): one continuous stream's tables.

    Each run starts where bronze's commits recorded the previous one's end: every record once in
    bronze or quarantine, and lateness decided as in one run, since the event-time gate starts from the
    newest VALID event time per partition that bronze recorded (the late table is exact across runs).
    The third run opens with a late record that is the first of its partition in that run: only the
    recorded maxima can tell that it is late.
    """
    topics, env = setup_topics(kafka, tmp_path, lakehouse)
    records, split = build_stream()
    runs = [records[: split // 2], records[split // 2 : split], records[split:]]
    outputs = []
    for run in runs:
        produce(kafka, topics, run)
        outputs.append(run_ingest(env).stdout)
    assert "nothing recorded yet" in outputs[0]
    assert all("recorded with its rows" in out for out in outputs[1:]), outputs[1]
    assert_tables(lakehouse, records, runs=runs)
    assert not list((tmp_path / "checkpoints").rglob("chk-*/_metadata"))
