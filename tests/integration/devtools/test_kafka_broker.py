"""The local KRaft broker against a real JVM: round trip, restart, detached control, clear errors."""

from __future__ import annotations

import socket
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from devtools.kafka_broker import (
    BrokerAlreadyRunningError,
    DataDirInUseError,
    LocalKafka,
    PortInUseError,
    create_topic,
    start_detached,
    status_detached,
    stop_detached,
)
from devtools.processes import alive, port_in_use

pytestmark = pytest.mark.integration


def _produce(bootstrap: str, topic: str, count: int) -> dict[bytes, bytes]:
    sent = {f"key-{i}".encode(): f"value-{i}".encode() for i in range(count)}
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        futures = [producer.send(topic, key=key, value=value) for key, value in sent.items()]
        producer.flush(timeout=30)
        for future in futures:
            future.get(timeout=30)
    finally:
        producer.close(timeout=10)
    return sent


def _consume_all(
    bootstrap: str, topic: str, partitions: int, expected: int
) -> list[tuple[int, int, bytes, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        assigned = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        records: list[tuple[int, int, bytes, bytes]] = []
        deadline = time.monotonic() + 30
        while len(records) < expected and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend((r.partition, r.offset, r.key, r.value) for r in batch)
        # One more poll: anything beyond `expected` would be a duplicate and must show up here.
        for batch in consumer.poll(timeout_ms=500).values():
            records.extend((r.partition, r.offset, r.key, r.value) for r in batch)
        return records
    finally:
        consumer.close()


@pytest.fixture
def occupied_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


def test_round_trip_exactly_then_clean_stop_and_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "kafka"
    with LocalKafka.start(data_dir=data_dir) as kafka:
        assert kafka.bootstrap_servers == f"127.0.0.1:{kafka.port}"
        status = kafka.status()
        assert status.running and status.responding and status.pid == kafka.pid
        create_topic(kafka.bootstrap_servers, "events", partitions=3)
        sent = _produce(kafka.bootstrap_servers, "events", 100)
        records = _consume_all(kafka.bootstrap_servers, "events", 3, expected=100)

        assert len(records) == 100
        assert {key: value for _, _, key, value in records} == sent
        offsets: dict[int, list[int]] = defaultdict(list)
        for partition, offset, _, _ in records:
            offsets[partition].append(offset)
        assert set(offsets) == {0, 1, 2}, "keys should spread over all three partitions"
        assert all(sorted(seen) == list(range(len(seen))) for seen in offsets.values())

        # A second broker on the same data folder is refused up front, naming the folder.
        with pytest.raises(DataDirInUseError, match=str(data_dir)):
            LocalKafka.start(data_dir=data_dir, timeout=10)

        pid, port = kafka.pid, kafka.port
        assert kafka.stop() is not None
    assert not alive(pid)
    assert not port_in_use(port)
    assert not kafka.status().running
    assert (data_dir / "kraft" / ".kafka_cleanshutdown").exists(), "SIGTERM should shut down cleanly"
    assert (data_dir / "broker.log").stat().st_size > 0

    # Same folder again (new ports, no re-format): the topic and its 100 records survived.
    with LocalKafka.start(data_dir=data_dir) as again:
        assert len(_consume_all(again.bootstrap_servers, "events", 3, expected=100)) == 100
    assert not alive(again.pid)


def test_detached_start_status_stop_round_trip(tmp_path: Path) -> None:
    state_file = tmp_path / "state" / "kafka.json"
    data_dir = tmp_path / "kafka"
    assert not status_detached(state_file=state_file).running

    started = start_detached(data_dir=data_dir, state_file=state_file)
    try:
        assert started.running and started.pid is not None and started.bootstrap_servers
        assert state_file.exists()
        status = status_detached(state_file=state_file)
        assert status.running and status.responding
        assert (status.pid, status.bootstrap_servers, status.data_dir) == (
            started.pid,
            started.bootstrap_servers,
            data_dir.resolve(),
        )
        assert str(started.pid) in status.describe()
        # Starting again with the same settings is a no-op; other settings are refused.
        assert start_detached(data_dir=data_dir, state_file=state_file).pid == started.pid
        with pytest.raises(BrokerAlreadyRunningError, match="lakestream kafka stop"):
            start_detached(data_dir=tmp_path / "other", state_file=state_file)
        create_topic(started.bootstrap_servers, "detached", partitions=1)
    finally:
        stopped = stop_detached(state_file=state_file)

    assert stopped.pid == started.pid
    assert not alive(started.pid)
    assert not state_file.exists()
    assert not status_detached(state_file=state_file).running
    assert not stop_detached(state_file=state_file).running, "stopping twice is harmless"


def test_requested_port_in_use_is_a_clear_error(tmp_path: Path, occupied_port: int) -> None:
    with pytest.raises(PortInUseError, match=f"port {occupied_port} .*already in use") as caught:
        LocalKafka.start(data_dir=tmp_path / "kafka", port=occupied_port, timeout=10)
    assert caught.value.port == occupied_port
    assert "omit port" in str(caught.value)
