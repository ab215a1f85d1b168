"""The demo's event feed: the seeded sample into Kafka over time, on partitions fixed in advance.

The demo's job runs bounded but starts before all events are there, so its progress can be watched:
a share of the sample is sent at once, the rest at a steady pace once the job runs. A bounded run
needs its end offsets when it starts; they are known in advance because every record's partition is
chosen here, deterministically (keyed records as Kafka's default partitioner would place them, by the
murmur2 hash of the key; keyless ones by the hash of their bytes instead of at random). So each
partition gets the same records in the same order whatever the pace, and the tables, which depend only
on the partitions' contents (DESIGN.md section 2), are the same in every run.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devtools.sample_events import SourceEvent
from sources.flink.kafka_input import EndOffsets


def partition_for(event: SourceEvent, partitions: int) -> int:
    """The partition of ``event`` on a topic with ``partitions`` partitions (Kafka's murmur2 placement)."""
    from kafka.partitioner.default import murmur2

    data = event.key if event.key is not None else event.value
    return int((murmur2(data) & 0x7FFFFFFF) % partitions)


@dataclass(frozen=True, slots=True)
class Planned:
    """One record to send: its source, topic, partition and bytes."""

    source: str
    topic: str
    partition: int
    key: bytes | None
    value: bytes


def plan(
    events: Sequence[SourceEvent], topics: Mapping[str, str], partitions: Mapping[str, int]
) -> list[Planned]:
    """Every event with its topic (``topics``: source -> topic) and partition (``partitions``: per topic)."""
    out = []
    for ev in events:
        topic = topics[ev.source]
        out.append(Planned(ev.source, topic, partition_for(ev, partitions[topic]), ev.key, ev.value))
    return out


def end_offsets(start: EndOffsets, records: Sequence[Planned]) -> EndOffsets:
    """Where each partition ends once ``records`` are appended to partitions that end at ``start``."""
    ends = dict(start)
    for r in records:
        ends[(r.topic, r.partition)] = ends.get((r.topic, r.partition), 0) + 1
    return ends


def write_offsets(path: Path, offsets: EndOffsets) -> None:
    """Store end offsets as JSON (``[[topic, partition, offset], ...]``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([[t, p, o] for (t, p), o in sorted(offsets.items())]) + "\n")


def read_offsets(path: Path) -> EndOffsets:
    """End offsets written by :func:`write_offsets`."""
    return {(str(t), int(p)): int(o) for t, p, o in json.loads(path.read_text())}


def due(elapsed_s: float, total: int, seconds: float) -> int:
    """How many of ``total`` records spread evenly over ``seconds`` are due ``elapsed_s`` after the start."""
    if total <= 0:
        return 0
    if seconds <= 0 or elapsed_s >= seconds:
        return total
    return min(total, int(total * max(0.0, elapsed_s) / seconds) + 1)


def per_source(records: Sequence[Planned]) -> dict[str, int]:
    """Record count per source."""
    counts: dict[str, int] = {}
    for r in records:
        counts[r.source] = counts.get(r.source, 0) + 1
    return counts


class Feed:
    """Sends planned records from a background thread: ``upfront`` of them at once, the rest paced.

    :meth:`start` sends the first ``upfront`` share; :meth:`release` starts sending the rest evenly over
    ``seconds``. Counts are of records the broker acknowledged (``acks=all``), per source.
    """

    def __init__(
        self, bootstrap_servers: str, records: Sequence[Planned], *, upfront: float, seconds: float
    ) -> None:
        self.records = list(records)
        self.planned = per_source(self.records)
        self._bootstrap = bootstrap_servers
        self._first = min(len(self.records), int(round(len(self.records) * max(0.0, min(1.0, upfront)))))
        self._seconds = seconds
        self._lock = threading.Lock()
        self._sent: dict[str, int] = dict.fromkeys(self.planned, 0)
        self._released = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-feed", daemon=True)
        self.error: BaseException | None = None

    @property
    def upfront_count(self) -> int:
        """Records sent at once, before :meth:`release`."""
        return self._first

    def start(self) -> Feed:
        """Connect and begin sending the up-front share; returns self."""
        self._thread.start()
        return self

    def release(self) -> None:
        """Start sending the rest at a steady pace (called once the job runs)."""
        self._released.set()

    def stop(self, timeout: float = 10) -> None:
        """Stop sending and close the producer."""
        self._stop.set()
        self._released.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def sent(self) -> dict[str, int]:
        """Acknowledged records per source so far."""
        with self._lock:
            return dict(self._sent)

    @property
    def total_sent(self) -> int:
        """Acknowledged records so far."""
        return sum(self.sent().values())

    @property
    def done(self) -> bool:
        """True once every record was acknowledged."""
        return self.total_sent == len(self.records)

    def _run(self) -> None:
        from kafka import KafkaProducer

        try:
            producer = KafkaProducer(
                bootstrap_servers=self._bootstrap,
                acks="all",
                linger_ms=5,
                max_in_flight_requests_per_connection=1,
            )
        except BaseException as exc:  # noqa: BLE001 - reported by the demo, which stops the job
            self.error = exc
            return
        try:
            self._send(producer, self.records[: self._first])
            rest = self.records[self._first :]
            self._released.wait()
            started = time.monotonic()
            done = 0
            while done < len(rest) and not self._stop.is_set():
                upto = due(time.monotonic() - started, len(rest), self._seconds)
                self._send(producer, rest[done:upto])
                done = upto
                self._stop.wait(0.05)
        except BaseException as exc:  # noqa: BLE001 - reported by the demo, which stops the job
            self.error = exc
        finally:
            producer.close(timeout=5)

    def _send(self, producer: Any, batch: Sequence[Planned]) -> None:
        if not batch or self._stop.is_set():
            return
        for r in batch:
            producer.send(r.topic, key=r.key, value=r.value, partition=r.partition)
        producer.flush()
        counts = per_source(batch)
        with self._lock:
            for source, n in counts.items():
                self._sent[source] += n
