"""Exactly once through a real failure: Kafka -> MiniCluster (fails once, restarts) -> Delta."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from kafka import KafkaProducer

from devtools.kafka_broker import create_topic

pytestmark = pytest.mark.integration

JOB = Path(__file__).resolve().parent / "jobs" / "failing_land.py"
ROOT = Path(__file__).resolve().parents[2]


class Poller(threading.Thread):
    """Reads the table as a user would, as fast as it can, and remembers every snapshot it saw."""

    def __init__(self, uri: str) -> None:
        super().__init__(daemon=True)
        self.uri = uri
        self.snapshots: list[tuple[int, list[tuple[int, int]]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                dt = DeltaTable(self.uri)
                t = dt.to_pyarrow_table(columns=["partition", "offset"])
                keys = list(zip(t["partition"].to_pylist(), t["offset"].to_pylist(), strict=True))
                if not self.snapshots or self.snapshots[-1][0] != dt.version():
                    self.snapshots.append((dt.version(), keys))
            except TableNotFoundError:
                pass
            time.sleep(0.05)


class Compactor(threading.Thread):
    """Another writer on the same table: OPTIMIZE compaction, committing while the sink commits."""

    def __init__(self, uri: str) -> None:
        super().__init__(daemon=True)
        self.uri = uri
        self.compactions = 0
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                metrics = DeltaTable(self.uri).optimize.compact()
                if metrics.get("numFilesRemoved", 0):
                    self.compactions += 1
            except TableNotFoundError:
                pass
            except Exception as exc:  # a conflict with the sink's commit is allowed to fail *this* side
                self.errors.append(f"{type(exc).__name__}: {exc}")
            time.sleep(0.4)


def test_failure_mid_stream_gives_exact_table(kafka, tmp_path):
    topic = "sink.eo"
    create_topic(kafka, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    sent = {}
    for i in range(3000):
        meta = producer.send(topic, value=f"record-{i}".encode()).get(timeout=30)
        sent[(meta.partition, meta.offset)] = f"record-{i}".encode()
    producer.close()

    uri = str(tmp_path / "raw")
    marker = tmp_path / "failed.marker"
    poller = Poller(uri)
    poller.start()
    compactor = Compactor(uri)
    compactor.start()
    proc = subprocess.run(
        [sys.executable, str(JOB), kafka, topic, uri, str(tmp_path / "ckpt"), "700", str(marker)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    poller.stop.set()
    compactor.stop.set()
    poller.join(timeout=10)
    compactor.join(timeout=30)
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert marker.exists(), "the injected failure never happened; the test proved nothing"

    dt = DeltaTable(uri)
    got = dt.to_pyarrow_table()
    keys = list(zip(got["partition"].to_pylist(), got["offset"].to_pylist(), strict=True))
    assert len(keys) == len(set(keys)), "duplicates in the final table"
    assert dict(zip(keys, got["value"].to_pylist(), strict=True)) == sent

    # Several commits happened, and none showed rows that a later restore took back or repeated.
    final = set(keys)
    assert len(poller.snapshots) >= 2
    previous: set[tuple[int, int]] = set()
    for version, snap in poller.snapshots:
        assert len(snap) == len(set(snap)), f"version {version} shows duplicate rows"
        assert set(snap) <= final, f"version {version} shows rows the final table does not have"
        assert previous <= set(snap), f"version {version} lost rows an earlier version showed"
        previous = set(snap)
    history = [h for h in dt.history() if h.get("operation") != "CREATE TABLE"]
    assert len(history) >= 2, "expected commits before and after the failure"
    assert compactor.compactions >= 1, (
        f"no compaction committed during the run; errors: {compactor.errors[:3]}"
    )
