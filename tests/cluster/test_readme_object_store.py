"""The README's production commands as written: the local S3 server, its AWS variables, Flink's S3 plugin
installed into the wheel's cluster, a job landing a topic with its table and checkpoints on the store.

The block runs on a copy of the wheel's Flink (its ``bin/``, ``conf/`` and ``plugins/`` copied, the rest
linked) so that installing the plugin and appending to ``config.yaml`` leave the installed wheel as it
is; only its ports (the README's ``localhost:8081``), the topic and the server's state folder are the
test's own.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable
from kafka import KafkaProducer

from devtools import processes
from devtools.kafka_broker import create_topic
from devtools.s3_server import status_detached
from runtime.flink_env import flink_home

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
README_PORT = "localhost:8081"
README_TOPIC = "my.topic"


def readme_block() -> str:
    """The README's bash block that starts the local S3 server and runs a job on the cluster."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.S)
    found = [b for b in blocks if "s3 start" in b and "flink run" in b]
    assert len(found) == 1, "the README has one bash block with lakestream s3 start and flink run"
    return str(found[0])


@pytest.fixture
def flink_copy(tmp_path: Path) -> Iterator[Path]:
    """A Flink home of the test's own: the wheel's scripts, configuration and plugins copied, the rest
    linked; free ports; stopped (and every process it started gone) at the end."""
    wheel = flink_home()
    home = tmp_path / "flink"
    home.mkdir()
    for entry in wheel.iterdir():
        if entry.name in ("bin", "conf", "plugins"):
            shutil.copytree(entry, home / entry.name, symlinks=True)
        elif entry.name in ("lib", "opt"):  # the scripts `find` jars there: a folder of links to them
            (home / entry.name).mkdir()
            for jar in entry.iterdir():
                (home / entry.name / jar.name).symlink_to(jar)
        elif entry.name != "log":
            (home / entry.name).symlink_to(entry)
    (home / "log").mkdir()
    rest = processes.free_port()
    rpc = processes.free_port(exclude=[rest])
    with (home / "conf" / "config.yaml").open("a", encoding="utf-8") as f:
        f.write(f"rest.port: {rest}\njobmanager.rpc.port: {rpc}\n")
    try:
        yield home
    finally:
        subprocess.run(["bash", str(home / "bin" / "stop-cluster.sh")], capture_output=True, timeout=120)
        processes.kill_until_gone(
            lambda: processes.pids_with_env("FLINK_CONF_DIR", str(home / "conf")), timeout=30
        )


def test_the_readme_production_commands_land_a_topic_on_the_object_store(
    flink_copy: Path, kafka: str, tmp_path: Path
) -> None:
    topic = f"prod.{tmp_path.name[-12:]}"
    create_topic(kafka, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    sent = {json.dumps({"n": i}).encode() for i in range(500)}
    for value in sorted(sent):
        producer.send(topic, value=value)
    producer.flush()
    producer.close()

    rest_port = re.search(r"rest\.port: (\d+)", (flink_copy / "conf" / "config.yaml").read_text())
    assert rest_port is not None
    script = (
        readme_block()
        .replace(README_PORT, f"localhost:{rest_port.group(1)}")
        .replace(f"--topic {README_TOPIC} ", f"--topic {topic} ")
    )
    home_line = next(line for line in script.splitlines() if line.startswith("FLINK_HOME="))
    script = script.replace(home_line, f"FLINK_HOME={flink_copy}")
    state = tmp_path / "state"
    env = {
        **os.environ,
        "LAKESTREAM_STATE_DIR": str(state),
        "LAKESTREAM__KAFKA__BOOTSTRAP_SERVERS": kafka,
        "FLINK_CONF_DIR": str(flink_copy / "conf"),
        "FLINK_LOG_DIR": str(flink_copy / "log"),
        "FLINK_PID_DIR": str(tmp_path / "pid"),
    }
    # Only what the README's lines export: a user's shell has no AWS variables yet, and no Flink folders
    # (pyflink sets FLINK_HOME, FLINK_LIB_DIR, FLINK_PLUGINS_DIR in a process that looked for its home,
    # and the wheel's scripts would take the wheel's plugins from there).
    for key in [
        k
        for k in env
        if k.startswith("AWS_") or k in ("FLINK_HOME", "FLINK_LIB_DIR", "FLINK_OPT_DIR", "FLINK_PLUGINS_DIR")
    ]:
        del env[key]
    try:
        run = subprocess.run(
            ["bash", "-c", "set -e\n" + script],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        status = status_detached(state_file=state / "s3.json")
        assert status.running and status.endpoint is not None, run.stdout + run.stderr
        secret = status.endpoint.secret_key
        assert run.returncode == 0, (run.stdout[-4000:], run.stderr[-4000:])

        # The table is on the store, exactly what was sent, and `lakestream tables` (run there) lists it.
        options = status.storage_options()
        got = DeltaTable("s3://lakehouse/prod/raw/my_topic", storage_options=options)
        assert set(got.to_pyarrow_table().column("value").to_pylist()) == sent
        assert got.to_pyarrow_dataset().count_rows() == len(sent)
        assert re.search(rf"raw/my_topic\s+{len(sent)} rows", run.stdout), run.stdout
        # The cluster used the plugin (its file systems know s3), and no log or output holds the secret.
        logs = "".join(p.read_text(errors="replace") for p in (flink_copy / "log").iterdir() if p.is_file())
        assert "s3-fs-presto" in logs or "S3FileSystemFactory" in logs, logs[-3000:]
        assert secret not in run.stdout + run.stderr + logs
    finally:
        subprocess.run(
            [str(ROOT / ".venv" / "bin" / "lakestream"), "s3", "stop"],
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
