"""The speed layer end to end: real broker, ``lakestream ingest`` on a MiniCluster, the gold Delta table.

Expectations come from what the test produced, never from the job's code: each record's Kafka
partition is chosen here, so the watermark of its partition at its arrival follows from the produced
order alone (largest VALID event time so far minus the out-of-orderness minus 1 ms), and so does the
allowed-lateness decision (window end + allowed lateness <= that watermark: beyond, left to the batch
layer). The metrics of the kept events come from ``tests/support/gold_oracle.py`` (windows and metrics
computed by hand, apart from ``lakestream.gold``), over the deliveries written down here per produced
record.
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from kafka import KafkaProducer

from devtools.processes import kill_group
from lakestream.gold import KIND_ORDER_CREATED, KIND_OTHER, KIND_PAYMENT
from tests.support.cli import run_cli
from tests.support.gold_oracle import (
    METRIC_NAMES,
    Delivery,
    bronze_deliveries,
    expected_gold,
    kind,
    window_start,
)
from tests.support.ingest_job import setup_topics, start_unbounded, table_rows, wait_for, wait_for_checkpoints

pytestmark = pytest.mark.integration

UTC = timezone.utc
START = datetime(2024, 6, 1, 4, 0, tzinfo=UTC)
BOUND = timedelta(minutes=2)  # event_time.max_out_of_orderness
WINDOW = timedelta(minutes=5)
LATENESS = timedelta(minutes=3)  # gold.allowed_lateness
GOLD = "gold/order_metrics_5m"
BRONZE = "bronze/order_events"
PARTITIONS = 2


@dataclass
class Event:
    """One produced record: where it goes, its bytes, and what it says (by construction).

    ``kind`` is its ``lakestream.gold`` kind code; expectations take ``delivery()`` instead, whose kind
    the gold oracle derives from the source and ``op``.
    """

    source: str
    partition: int
    value: bytes
    event_id: str
    at: datetime
    kind: int
    amount: Decimal | None
    order_id: str | None
    user_id: str | None
    op: str | None = None

    def delivery(self) -> Delivery:
        """This record as the gold oracle takes it (every produced record is VALID)."""
        return Delivery(
            self.event_id, self.at, kind(self.source, self.op), self.amount, self.order_id, self.user_id
        )


def _ms(t: datetime) -> int:
    return int((t - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(milliseconds=1))


def order_event(partition: int, oid: str, op: str, at: datetime, uid: str, amount: str) -> Event:
    local = (at + timedelta(hours=8)).strftime("%Y-%m-%d %H:%M:%S")
    payload = {
        "op": op,
        "order_id": oid,
        "user_id": uid,
        "amount": amount,
        "status": "created",
        "updated_at": local,
    }
    kind = KIND_ORDER_CREATED if op == "c" else KIND_OTHER
    value = json.dumps(payload).encode()  # the job's id is a hash of it: equal bytes, equal id
    return Event(
        "orders_db", partition, value, f"orders_db:{value.decode()}", at, kind, Decimal(amount), oid, uid, op
    )


def payment_event(partition: int, pay_id: str, oid: str, at: datetime, fen: int) -> Event:
    payload = {"payId": pay_id, "orderId": oid, "payMoney": fen, "paidAt": _ms(at)}
    return Event(
        "payments",
        partition,
        json.dumps(payload).encode(),
        f"payments:{pay_id}",
        at,
        KIND_PAYMENT,
        Decimal(fen) / 100,
        oid,
        None,
    )


def behaviour_event(partition: int, eid: str, at: datetime, uid: str | None) -> Event:
    payload: dict[str, Any] = {"eventId": eid, "event": "view", "ts": _ms(at)}
    if uid is not None:
        payload["uid"] = uid
    return Event(
        "behaviour",
        partition,
        json.dumps(payload).encode(),
        f"behaviour:{eid}",
        at,
        KIND_OTHER,
        None,
        None,
        uid,
    )


def scenario(seed: int, minutes: int = 60, late_ratio: float = 0.1, start: datetime = START) -> list[Event]:
    """Per partition, a timeline advancing over ``minutes`` with out-of-order jitter inside the bound,
    re-deliveries (same bytes, same partition, later), and late events: some within the allowed
    lateness of their window, some beyond it."""
    rng = random.Random(seed)
    events: list[Event] = []
    n = 0
    for source in ("orders_db", "payments", "behaviour"):
        for partition in range(PARTITIONS):
            timeline: list[Event] = []
            for step in range(minutes * 2):
                n += 1
                at = start + timedelta(seconds=30 * step + rng.randint(-80, 80))
                kind = rng.random()
                if kind < late_ratio:  # late: 4 to 14 minutes behind the newest so far
                    at = start + timedelta(seconds=30 * step - rng.randint(240, 840))
                if source == "orders_db":
                    oid = f"o{rng.randint(0, 40)}"
                    op = "c" if rng.random() < 0.6 else "u"
                    ev = order_event(
                        partition,
                        oid,
                        op,
                        at,
                        f"u{rng.randint(0, 15)}",
                        f"{rng.randint(1, 9999)}.{rng.randint(0, 99):02d}",
                    )
                elif source == "payments":
                    ev = payment_event(
                        partition, f"p{seed}-{n}", f"o{rng.randint(0, 40)}", at, rng.randint(1, 500000)
                    )
                else:
                    uid = None if rng.random() < 0.2 else f"u{rng.randint(0, 25)}"
                    ev = behaviour_event(partition, f"b{seed}-{n}", at, uid)
                timeline.append(ev)
                if rng.random() < 0.1 and timeline:  # a re-delivery of an earlier record
                    timeline.append(rng.choice(timeline[-6:]))
            events.extend(timeline)
    return events


def classify(events: list[Event]) -> tuple[list[Event], list[Event]]:
    """(counted, beyond): each event id's first delivery, split by the allowed-lateness rule.

    Per partition in produced order: watermark = max event time so far - BOUND - 1 ms; a first
    delivery whose window end + LATENESS is at or below it is beyond. Re-deliveries never count.
    """
    bound, w, late = (
        _ms(START + BOUND) - _ms(START),
        _ms(START + WINDOW) - _ms(START),
        _ms(START + LATENESS) - _ms(START),
    )
    newest: dict[tuple[str, int], int] = {}
    seen: set[str] = set()
    counted: list[Event] = []
    beyond: list[Event] = []
    for ev in events:  # production order is per-partition order
        t = _ms(ev.at)
        key = (ev.source, ev.partition)
        before = newest.get(key)
        if ev.event_id not in seen:
            seen.add(ev.event_id)
            end = (t // w) * w + w
            if before is not None and end + late <= before - bound - 1:
                beyond.append(ev)
            else:
                counted.append(ev)
        newest[key] = t if before is None else max(before, t)
    return counted, beyond


def produce(kafka: str, topics: dict[str, str], events: list[Event]) -> None:
    producer = KafkaProducer(
        bootstrap_servers=kafka, acks="all", linger_ms=5, max_in_flight_requests_per_connection=1
    )
    futures = [producer.send(topics[e.source], value=e.value, partition=e.partition) for e in events]
    producer.flush()
    for f in futures:
        f.get(timeout=30)
    producer.close()


def gold_env(kafka: str, tmp_path: Path, lakehouse: Path) -> tuple[dict[str, str], dict[str, str]]:
    topics, env = setup_topics(kafka, tmp_path, lakehouse, partitions=PARTITIONS)
    env.update(
        {
            "LAKESTREAM__EVENT_TIME__MAX_OUT_OF_ORDERNESS": '"2m"',
            "LAKESTREAM__GOLD__WINDOW": '"5m"',
            "LAKESTREAM__GOLD__ALLOWED_LATENESS": '"3m"',
            "LAKESTREAM__GOLD__ENABLED": "true",
            # A gate subtask without a partition with records holds the watermark until it is idle.
            "LAKESTREAM__EVENT_TIME__IDLENESS_TIMEOUT": '"3s"',
        }
    )
    return topics, env


def gold_rows(lakehouse: Path) -> dict[datetime, dict[str, Any]]:
    try:
        rows = DeltaTable(str(lakehouse / GOLD)).to_pyarrow_table().to_pylist()
    except TableNotFoundError:
        return {}
    by_window = {r["window_start"]: r for r in rows}
    assert len(by_window) == len(rows), "two gold rows for one window"
    return by_window


def metrics_of(rows: list[dict[str, Any]]) -> dict[datetime, dict[str, Any]]:
    return {r["window_start"]: {k: r[k] for k in ("window_end", *METRIC_NAMES)} for r in rows}


def test_bounded_gold_equals_the_oracle_but_for_events_beyond_the_lateness(
    kafka: str, lakehouse: Path, tmp_path: Path
) -> None:
    topics, env = gold_env(kafka, tmp_path, lakehouse)
    events = scenario(seed=16)
    produce(kafka, topics, events)
    run_cli("ingest", "--bounded", env=env, timeout=300)

    counted, beyond = classify(events)
    assert beyond and len(counted) > 500
    rows = gold_rows(lakehouse)
    got = metrics_of(list(rows.values()))
    expected = metrics_of(expected_gold(e.delivery() for e in counted))
    assert got == expected
    # Windows with events beyond the lateness differ from a recompute of all events exactly by them.
    everything = metrics_of(expected_gold(e.delivery() for e in events))
    affected = {w for w in everything if w not in got or everything[w] != got[w]}
    beyond_windows = {window_start(e.at) for e in beyond}
    assert affected and affected <= beyond_windows
    latest_end = max(r["window_end"] for r in rows.values())
    for row in rows.values():
        assert row["layer"] == "realtime" and row["source_version"] is None
        assert row["data_time"] <= latest_end and row["updated_at"] is not None
    # Rows written at the end of input: every window is complete, up to the latest window end.
    assert max(r["data_time"] for r in rows.values()) == latest_end
    # The final rows were committed at the end of input: the last window is there, complete.
    assert max(got) == max(expected)
    # The commits recorded the sink's txn version: one realtime writer app id.
    txns = DeltaTable(str(lakehouse / GOLD)).history()
    assert any("lakestream.appVersions" in h for h in txns)


def bronze_recompute(lakehouse: Path) -> dict[datetime, dict[str, Any]]:
    """The gold oracle's metrics of every delivery bronze holds."""
    rows = DeltaTable(str(lakehouse / BRONZE)).to_pyarrow_table().to_pylist()
    return metrics_of(expected_gold(bronze_deliveries(rows)))


def test_gold_exactly_once_across_kill_9_with_duplicates_on_both_sides(
    kafka: str, lakehouse: Path, tmp_path: Path
) -> None:
    """kill -9 while records are being produced (some produced after the last commit, asserted),
    restart from the checkpoint, re-deliveries of records from before the kill after it: gold equals
    the oracle, nothing counted twice, and every window no event missed by lateness equals the
    oracle's recompute of what bronze holds."""
    topics, env = gold_env(kafka, tmp_path, lakehouse)
    events = scenario(seed=99, minutes=40, late_ratio=0.02)
    half = len(events) // 2
    first, rest = events[:half], events[half:]
    # Re-deliveries across the restore: records from before the kill, sent again after it (same
    # partition, so their partition order, and so the lateness oracle, stays exact).
    again = first[::7]
    log, checkpoints = tmp_path / "ingest.log", tmp_path / "checkpoints"
    produce(kafka, topics, first)
    job = start_unbounded(env, log)
    # The rest goes out one record at a time while the job runs, each acknowledged before the next.
    sent = 0
    stop = threading.Event()

    def produce_paced() -> None:
        nonlocal sent
        producer = KafkaProducer(bootstrap_servers=kafka, acks="all", max_in_flight_requests_per_connection=1)
        try:
            while sent < len(rest) and not stop.is_set():
                e = rest[sent]
                producer.send(topics[e.source], value=e.value, partition=e.partition).get(timeout=30)
                sent += 1
                stop.wait(0.05)
        finally:
            producer.close()

    producing = threading.Thread(target=produce_paced)
    try:
        wait_for(lakehouse, {GOLD: 1}, job, log, timeout=200)
        producing.start()
        # Evidence that the job commits the live records: bronze holds some of them, and one more
        # checkpoint completed. Then a few more, acknowledged right before the kill: produced after any
        # commit the job can have made.
        wait_for(lakehouse, {BRONZE: half + 1}, job, log, timeout=120)
        wait_for_checkpoints(checkpoints, 1, job, log)
        stop.set()
        producing.join()
        produce(kafka, topics, rest[sent : sent + 5])
        sent = min(sent + 5, len(rest))
        produced_at_kill = half + sent
    finally:
        kill_group(job)
        stop.set()
        if producing.is_alive():
            producing.join()
    committed_at_kill = table_rows(lakehouse, BRONZE)
    assert half < committed_at_kill < produced_at_kill, (
        f"{committed_at_kill} of {produced_at_kill} produced records committed at the kill: not mid-stream"
    )
    produce(kafka, topics, rest[sent:] + again)
    all_events = first + rest + again  # production order
    job = start_unbounded(env, log)
    counted, beyond = classify(all_events)
    beyond_windows = {window_start(e.at) for e in beyond}
    expected = metrics_of(expected_gold(e.delivery() for e in counted))
    try:
        deadline = time.monotonic() + 240
        while (got := metrics_of(list(gold_rows(lakehouse).values()))) != expected:
            assert job.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, f"gold {got}\nexpected {expected}\n{log.read_text()[-3000:]}"
            time.sleep(1)
        # Two more completed checkpoints: nothing may be counted twice.
        wait_for_checkpoints(checkpoints, 2, job, log)
        got = metrics_of(list(gold_rows(lakehouse).values()))
    finally:
        kill_group(job)
    assert "resuming from checkpoint" in log.read_text()
    assert got == expected, f"gold {got}\nexpected {expected}"
    assert table_rows(lakehouse, BRONZE) == len(all_events)  # every delivery once
    # Rows written while the stream ran carry its event-time watermark (idle partitions did not hold it
    # back), never a processing-time one: at most the data's latest end.
    final = gold_rows(lakehouse).values()
    latest_end = max(r["window_end"] for r in final)
    assert any(r["data_time"] > datetime(2024, 1, 1, tzinfo=UTC) for r in final)
    assert all(r["data_time"] <= latest_end for r in final)
    recomputed = bronze_recompute(lakehouse)
    clean = [w for w in recomputed if w not in beyond_windows]
    assert len(clean) > 3
    for w in clean:
        assert got[w] == recomputed[w], w


def test_a_second_bounded_run_leaves_the_first_runs_windows_alone(
    kafka: str, lakehouse: Path, tmp_path: Path
) -> None:
    """Two bounded runs (two lineages): the second starts with empty aggregates, so it must not
    recompute the windows the first one wrote (a partial row over a complete one); the windows only
    it saw are exact, the window spanning both keeps the first run's row."""
    topics, env = gold_env(kafka, tmp_path, lakehouse)
    first = scenario(seed=21, minutes=12, late_ratio=0.0)
    # Starts inside the first run's last window, then goes on.
    second = scenario(seed=22, minutes=12, late_ratio=0.0, start=START + timedelta(minutes=12))
    produce(kafka, topics, first)
    run_cli("ingest", "--bounded", env=env, timeout=300)
    after_first = metrics_of(list(gold_rows(lakehouse).values()))
    produce(kafka, topics, second)
    run_cli("ingest", "--bounded", env=env, timeout=300)

    counted_first, _ = classify(first)
    assert after_first == metrics_of(expected_gold(e.delivery() for e in counted_first))
    newest_first = max(e.at for e in first)  # what bronze recorded as the first lineage's end
    got = metrics_of(list(gold_rows(lakehouse).values()))
    # The second lineage's own events, each partition continuing from the first run's watermark.
    counted_all, _ = classify(first + second)
    second_ids = {e.event_id for e in second}
    own = [e for e in counted_all if e.event_id in second_ids and e.at >= newest_first]
    expected_own = metrics_of(expected_gold(e.delivery() for e in own))
    cut_windows = [w for w in got if w <= newest_first]
    assert cut_windows, "the scenario must have a window spanning both runs"
    for w, row in got.items():
        if w in after_first and w <= newest_first:
            assert row == after_first[w], w  # left to the batch layer: the first run's row stays
        else:
            assert row == expected_own[w], w
    assert set(got) == set(after_first) | {w for w in expected_own if w > newest_first}
