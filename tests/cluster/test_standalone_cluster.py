"""The landing job on a real standalone Flink cluster started from the pyflink wheel's own bin/ scripts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable
from kafka import KafkaProducer

from devtools.flink_cluster import StandaloneCluster
from devtools.kafka_broker import create_topic

pytestmark = pytest.mark.cluster

ENTRY = str(Path(__file__).resolve().parents[2] / "cli" / "__main__.py")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(tmp_path_factory.mktemp("flink"), taskmanagers=1, slots_per_taskmanager=2) as c:
        yield c


def test_rest_api_answers(cluster: StandaloneCluster) -> None:
    overview = cluster.rest("/overview")
    assert overview["taskmanagers"] == 1
    assert overview["slots-total"] == 2


def test_flink_run_py_lands_exactly_once(
    cluster: StandaloneCluster, kafka: str, lakehouse: Path, tmp_path: Path
) -> None:
    topic = "cluster.events"
    create_topic(kafka, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    sent = {json.dumps({"n": i}).encode() for i in range(500)}
    for value in sorted(sent):
        producer.send(topic, value=value)
    producer.flush()
    producer.close()

    env = {
        "LAKESTREAM__KAFKA__BOOTSTRAP_SERVERS": kafka,
        "LAKESTREAM__LAKEHOUSE__ROOT": str(lakehouse),
        "LAKESTREAM__FLINK__CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "LAKESTREAM__FLINK__CHECKPOINT_INTERVAL": '"1s"',
    }
    args = ["land", "--topic", topic, "--table", "raw/cluster", "--bounded", "--starting-offsets", "earliest"]
    result = cluster.run_python(ENTRY, args, env=env, timeout=400)
    assert result.returncode == 0, f"flink run failed\n{result.stdout[-4000:]}\n{result.stderr[-6000:]}"

    jobs = cluster.jobs()
    assert [j["state"] for j in jobs] == ["FINISHED"]
    got = DeltaTable(str(lakehouse / "raw" / "cluster")).to_pyarrow_table()
    assert sorted(got["value"].to_pylist()) == sorted(sent)
    # The cluster's and the client's JVMs kept their temporary files in the cluster's folder.
    assert any(cluster.tmp_dir.iterdir()), cluster.tmp_dir
