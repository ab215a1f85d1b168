"""The README's cluster commands as written, on the wheel's own default cluster (one TaskManager, one
slot), and the slot check that stops jobs the cluster cannot run.

The cluster is the wheel's ``conf/`` copied to a folder of the test, with only its ports moved to free
ones (the README's ``localhost:8081`` becomes that port) and logs and pid files kept in the test's
folder; everything else, the one slot included, is the wheel's default. Kafka and the lakehouse are set
by environment overrides (the README starts its own broker with ``lakestream kafka start``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from kafka import KafkaProducer

from devtools import processes
from devtools.kafka_broker import create_topic
from runtime.flink_env import flink_home

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
README_PORT = "localhost:8081"
#: "Within seconds": the flink CLI's JVM, the Python client and the graph build, on a loaded 2-core box.
FAST_FAIL_S = 60


def readme_cluster_block() -> str:
    """The README's bash block that starts the wheel's cluster and runs ``flink run``."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    found = [b for b in blocks if "start-cluster.sh" in b and "flink run" in b and "s3 start" not in b]
    assert len(found) == 1, "the README has one bash block with start-cluster.sh and flink run"
    return found[0]


def readme_commands() -> dict[str, str]:
    """Its commands by what they do (continuation lines joined, comments dropped)."""
    joined = readme_cluster_block().replace("\\\n", " ")
    lines = [re.sub(r"\s+#.*$", "", line).strip() for line in joined.splitlines()]
    lines = [line for line in lines if line]
    commands: dict[str, str] = {}
    for line in lines:
        key = next(k for k in ("FLINK_HOME=", "start-cluster", "flink run", "stop-cluster") if k in line)
        commands[key] = line
    assert set(commands) == {"FLINK_HOME=", "start-cluster", "flink run", "stop-cluster"}, lines
    return commands


@dataclass
class WheelCluster:
    work: Path
    rest_port: int

    @property
    def conf_dir(self) -> Path:
        return self.work / "conf"

    @property
    def address(self) -> str:
        return f"localhost:{self.rest_port}"

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "FLINK_CONF_DIR": str(self.conf_dir),
            "FLINK_LOG_DIR": str(self.work / "log"),
            "FLINK_PID_DIR": str(self.work / "pid"),
            **extra,
        }

    def bash(self, script: str, *, timeout: float, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", script],
            cwd=ROOT,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def rest(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.rest_port}{path}", timeout=5) as resp:
            return json.loads(resp.read())

    def wait_for_free_slots(self, timeout: float = 60.0) -> None:
        """A finished job's slot returns to the pool a moment after the job ends: the next test needs it."""
        deadline = time.monotonic() + timeout
        while (overview := self.rest("/overview"))["slots-available"] < overview["slots-total"]:
            assert time.monotonic() < deadline, f"slots still taken after {timeout}s: {overview}"
            time.sleep(0.5)


def readme(commands: dict[str, str], *keys: str, address: str, drop_env: bool = False) -> str:
    """The README's commands ``keys``, its cluster address swapped for the test cluster's."""
    lines = [commands["FLINK_HOME="]]
    for key in keys:
        line = commands[key].replace(README_PORT, address)
        if drop_env:
            line = re.sub(r"^(\w+=\S+\s+)+(?=\$FLINK_HOME)", "", line)
        lines.append(line)
    return "set -e\n" + "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def commands() -> dict[str, str]:
    return readme_commands()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, commands: dict[str, str]) -> Iterator[WheelCluster]:
    work = tmp_path_factory.mktemp("wheel-cluster")
    shutil.copytree(flink_home() / "conf", work / "conf")
    (work / "log").mkdir()  # the wheel has its own log/ folder; Flink's scripts do not create one
    c = WheelCluster(work, rest_port=processes.free_port())
    rpc = processes.free_port(exclude=[c.rest_port])
    with (c.conf_dir / "config.yaml").open("a", encoding="utf-8") as f:
        f.write(f"rest.port: {c.rest_port}\njobmanager.rpc.port: {rpc}\n")
    started = c.bash(readme(commands, "start-cluster", address=c.address), timeout=120)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        deadline = time.monotonic() + 120
        while True:
            try:
                if c.rest("/overview").get("slots-total", 0) >= 1:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"the wheel's cluster did not come up; logs in {work / 'log'}"
            time.sleep(0.5)
        yield c
    finally:
        c.bash(readme(commands, "stop-cluster", address=c.address), timeout=120)
        leftovers = lambda: processes.pids_with_env("FLINK_CONF_DIR", str(c.conf_dir))  # noqa: E731
        processes.kill_until_gone(leftovers, timeout=30)


def job_env(kafka: str, lakehouse: Path, tmp_path: Path) -> dict[str, str]:
    return {
        "LAKESTREAM__KAFKA__BOOTSTRAP_SERVERS": kafka,
        "LAKESTREAM__LAKEHOUSE__ROOT": str(lakehouse),
        "LAKESTREAM__FLINK__CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "LAKESTREAM__FLINK__CHECKPOINT_INTERVAL": '"1s"',
    }


def test_the_wheels_cluster_has_one_slot(cluster: WheelCluster) -> None:
    overview = cluster.rest("/overview")
    assert (overview["taskmanagers"], overview["slots-total"]) == (1, 1)


def test_a_job_needing_more_slots_fails_in_seconds_with_the_cause_and_the_fix(
    cluster: WheelCluster, commands: dict[str, str], kafka: str, lakehouse: Path, tmp_path: Path
) -> None:
    create_topic(kafka, "my.topic", partitions=2)
    # The README's flink run without its parallelism setting: the default flink.parallelism = 2.
    script = readme(commands, "flink run", address=cluster.address, drop_env=True)
    assert "PARALLELISM" not in script
    started = time.monotonic()
    run = cluster.bash(script, timeout=300, **job_env(kafka, lakehouse, tmp_path))
    elapsed = time.monotonic() - started
    out = run.stdout + run.stderr
    assert run.returncode == 31, out[-4000:]  # flink run's code for a failed program
    expected = (
        f"lakestream: job needs 2 slots (flink.parallelism = 2), the cluster at {cluster.address} has "
        "1 free of 1; start more TaskManagers / raise taskmanager.numberOfTaskSlots, "
        "or set LAKESTREAM__FLINK__PARALLELISM=1"
    )
    assert expected in run.stdout, out[-4000:]
    assert elapsed < FAST_FAIL_S, f"took {elapsed:.1f} s"
    assert cluster.rest("/jobs/overview")["jobs"] == [], "nothing was submitted"


def test_the_changefeed_job_needs_one_slot_whatever_the_parallelism(
    cluster: WheelCluster, commands: dict[str, str], lakehouse: Path, tmp_path: Path
) -> None:
    write_deltalake(
        str(lakehouse / "silver" / "orders"),
        pa.table({"id": pa.array([1, 2], pa.int64())}),
        configuration={"delta.enableChangeDataFeed": "true"},
    )
    flink_run = commands["flink run"].replace(README_PORT, cluster.address)
    flink_run = re.sub(r"^(\w+=\S+\s+)+", "LAKESTREAM__FLINK__PARALLELISM=3 ", flink_run)
    changefeed = " changefeed --table silver/orders --to delta:audit/orders --polls 2"
    flink_run = flink_run.split(" land ")[0] + changefeed
    run = cluster.bash(
        "\n".join([commands["FLINK_HOME="], flink_run]),
        timeout=300,
        LAKESTREAM__LAKEHOUSE__ROOT=str(lakehouse),
        LAKESTREAM__FLINK__CHECKPOINT_DIR=str(tmp_path / "ckpt"),
    )
    # The slot check counted the graph's one slot (not flink.parallelism's 3) and let it run.
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    assert "slots" not in run.stdout + run.stderr
    audit = DeltaTable(str(lakehouse / "audit" / "orders")).to_pyarrow_table()
    assert sorted(audit.column("id").to_pylist()) == [1, 2]
    cluster.wait_for_free_slots()


def test_the_demos_cluster_submission_fails_in_seconds_before_any_work(
    cluster: WheelCluster, lakehouse: Path, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "LAKESTREAM__FLINK__JOBMANAGER": cluster.address,
        "LAKESTREAM__LAKEHOUSE__ROOT": str(lakehouse),
        "LAKESTREAM_STATE_DIR": str(tmp_path / "state"),
    }
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "cli", "demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.strip() == (
        f"lakestream: job needs 2 slots (flink.parallelism = 2), the cluster at {cluster.address} has "
        "1 free of 1; start more TaskManagers / raise taskmanager.numberOfTaskSlots, "
        "or set LAKESTREAM__FLINK__PARALLELISM=1"
    )
    assert "starting the embedded Kafka broker" not in run.stdout  # checked before anything started
    assert elapsed < 20, f"took {elapsed:.1f} s"


def test_the_readme_command_as_written_lands_on_the_wheels_cluster(
    cluster: WheelCluster, commands: dict[str, str], kafka: str, lakehouse: Path, tmp_path: Path
) -> None:
    topic = "my.topic"
    create_topic(kafka, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    sent = {json.dumps({"n": i}).encode() for i in range(300)}
    for value in sorted(sent):
        producer.send(topic, value=value)
    producer.flush()
    producer.close()
    run = cluster.bash(
        readme(commands, "flink run", address=cluster.address),
        timeout=400,
        **job_env(kafka, lakehouse, tmp_path),
    )
    assert run.returncode == 0, (run.stdout[-4000:], run.stderr[-4000:])
    # Every job this cluster ran (the change feed's test ran one too) ended by itself.
    jobs = cluster.rest("/jobs/overview")["jobs"]
    landing = [j["state"] for j in jobs if j["name"].startswith("lakestream-land")]
    assert landing == ["FINISHED"] and {j["state"] for j in jobs} == {"FINISHED"}, jobs
    got = DeltaTable(str(lakehouse / "raw" / "my_topic")).to_pyarrow_table()
    assert sorted(got["value"].to_pylist()) == sorted(sent)
