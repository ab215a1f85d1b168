"""The shared workload: one local broker, the four source topics, the seeded messy events, produced once.

Every measurement of a run reads these same topics (or the same rows), so ratios compare like with like.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools.sample_events import SampleSettings, SourceEvent, generate
from lakestream.config import Config

PARTITIONS = 2


@dataclass(frozen=True)
class Workload:
    """What was produced, and what the tables must contain afterwards."""

    events: int
    per_topic: dict[str, int]
    malformed: int
    orders_expected: int
    produce_s: float
    generate_s: float


def expected_orders(events: list[SourceEvent]) -> int:
    """Orders that some well-formed event sets a field of: the rows silver must end with."""
    return len(
        {
            e.order_id
            for e in events
            if not e.malformed
            and e.order_id is not None
            and e.event_time is not None
            and any(v is not None for v in e.sets.values())
        }
    )


def make_events(
    n: int, *, seed: int = 7, order_ids: str = "sequential", update_share: float = 0.0
) -> list[SourceEvent]:
    """About ``n`` seeded messy events (the generator makes ~6 per order plus duplicates/malformed).

    ``order_ids="random"`` gives 32-hex-char ids instead of sequential ones, and ``update_share`` makes
    that share of the events updates of earlier orders chosen uniformly (a production shape:
    every checkpoint's keys spread over the whole silver table); the defaults keep the old stream.
    """

    def shaped(orders: int) -> SampleSettings:
        return SampleSettings(orders=orders, seed=seed, order_ids=order_ids, update_share=update_share)

    per_order = len(generate(shaped(200))) / 200
    events = generate(shaped(max(1, int(n / per_order))))
    return events[:n] if len(events) > n else events


def create_topics(bootstrap: str, cfg: Config) -> None:
    """The four source topics with ``PARTITIONS`` partitions each (as the demo does)."""
    from devtools.kafka_broker import create_topic

    for topic in cfg.kafka.topics.values():
        create_topic(bootstrap, topic, partitions=PARTITIONS)


def produce_fast(bootstrap: str, topics: dict[str, str], events: list[SourceEvent]) -> dict[str, int]:
    """Bulk-produce the events to their sources' topics; counts per source."""
    counts = produce_messages(bootstrap, ((topics[ev.source], ev.key, ev.value) for ev in events))
    by_topic = {t: s for s, t in topics.items()}
    return {by_topic[t]: n for t, n in counts.items()}


def produce_messages(bootstrap: str, messages: Iterable[tuple[str, bytes | None, bytes]]) -> dict[str, int]:
    """Bulk-produce ``(topic, key, value)`` with librdkafka (acks=all, idempotent, order per key kept);
    counts per topic. kafka-python is several times slower at this."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "none",
        }
    )
    counts: dict[str, int] = {}
    errors: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for topic, key, value in messages:
        while True:
            try:
                p.produce(topic, key=key, value=value, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        counts[topic] = counts.get(topic, 0) + 1
        p.poll(0)
    p.flush(120)
    if errors:
        raise RuntimeError(f"{len(errors)} produce errors, first: {errors[0]}")
    return counts


def prepare(bootstrap: str, cfg: Config, n: int) -> tuple[Workload, list[SourceEvent]]:
    """Generate ``n`` events, create the topics, produce them; time both steps."""
    t0 = time.monotonic()
    events = make_events(n)
    gen_s = time.monotonic() - t0
    create_topics(bootstrap, cfg)
    t1 = time.monotonic()
    counts = produce_fast(bootstrap, dict(cfg.kafka.topics), events)
    produce_s = time.monotonic() - t1
    wl = Workload(
        events=len(events),
        per_topic={cfg.kafka.topics[s]: c for s, c in counts.items()},
        malformed=sum(1 for e in events if e.malformed),
        orders_expected=expected_orders(events),
        produce_s=round(produce_s, 2),
        generate_s=round(gen_s, 2),
    )
    return wl, events


def table_rows(root: Path, table: str) -> int:
    """Committed rows of a Delta table (0 when it does not exist)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return int(DeltaTable(str(root / table)).to_pyarrow_dataset().count_rows())
    except TableNotFoundError:
        return 0


def distinct_count(root: Path, table: str, columns: list[str]) -> int:
    """Distinct key count of a Delta table (to prove no row was committed twice)."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    t = DeltaTable(str(root / table)).to_pyarrow_table(columns=columns)
    if len(columns) == 1:
        return int(len(pc.unique(t.column(columns[0]))))
    return int(t.group_by(columns).aggregate([]).num_rows)


def last_commit_epoch_s(root: Path, tables: Sequence[str]) -> float | None:
    """Wall clock (epoch s) of the newest commit over ``tables``: when everything was committed.

    Delta's commit timestamps; a bounded ingest's last one is its end-of-input commit (the silver
    MERGE), after which Flink only tears the job down. ``None`` if no table has a commit.
    """
    from deltalake import DeltaTable

    stamps = [
        entry["timestamp"] / 1000
        for table in tables
        for entry in DeltaTable(str(root / table)).history(1)
        if "timestamp" in entry
    ]
    return max(stamps) if stamps else None


def first_ingest_epoch_s(root: Path, table: str = "bronze/order_events") -> float | None:
    """Wall clock (epoch s) of the earliest ``ingest_time`` in a table: when the first batch was read.

    The standardise operator stamps ``ingest_time`` as it processes each batch, so this is "first read"
    as the data saw it, without instrumenting the job (deploy and Python worker start come before it).
    """
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    t = DeltaTable(str(root / table)).to_pyarrow_table(columns=["ingest_time"])
    first = pc.min(t.column("ingest_time")).as_py()
    return None if first is None else float(first.timestamp())


def ingest_time_quantiles(
    root: Path, qs: Sequence[float], table: str = "bronze/order_events"
) -> list[float] | None:
    """Wall clock (epoch s) by which the standardise operator had stamped each quantile of the rows.

    ``ingest_time`` is stamped per batch as standardise processes it, so these are the run's progress
    as the data saw it (the busy-ratio window of ``benchmarks.busy``); None for an empty table.
    """
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    col = DeltaTable(str(root / table)).to_pyarrow_table(columns=["ingest_time"]).column("ingest_time")
    if len(col) == 0:
        return None
    micros = pc.cast(col, "int64")  # timestamps are microseconds since the epoch, UTC
    return [float(x.as_py()) / 1e6 for x in pc.quantile(micros, q=list(qs), interpolation="lower")]
