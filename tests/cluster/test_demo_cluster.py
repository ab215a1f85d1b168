"""``lakestream demo`` with ``flink.jobmanager`` set: the job submitted with ``flink run`` to a real
standalone cluster, watched through the tables, and cancelled there when the demo is interrupted."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from devtools.flink_cluster import StandaloneCluster
from devtools.processes import kill_group, pids_with_env
from tests.integration.test_demo import _check_tables as check_demo_tables

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
MARK = "LAKESTREAM_DEMO_TEST"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    # Ingest runs every stage at parallelism 2 (five slots' worth of tasks share two slots' groups).
    with StandaloneCluster(tmp_path_factory.mktemp("flink"), taskmanagers=1, slots_per_taskmanager=4) as c:
        yield c


@pytest.fixture
def mark() -> Iterator[str]:
    value = uuid.uuid4().hex
    yield value
    for pid in pids_with_env(MARK, value):
        os.kill(pid, signal.SIGKILL)


def _start(cluster: StandaloneCluster, tmp_path: Path, mark: str, *args: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "LAKESTREAM__FLINK__JOBMANAGER": cluster.address,
        "LAKESTREAM_STATE_DIR": str(tmp_path / "state"),
        "LAKESTREAM__FLINK__CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        MARK: mark,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "cli", "demo", "--lakehouse", str(tmp_path / "lake"), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_demo_on_a_cluster_shows_progress_and_finishes(
    cluster: StandaloneCluster, tmp_path: Path, mark: str
) -> None:
    proc = _start(cluster, tmp_path, mark, "--events", "600", "--produce-seconds", "15")
    try:
        out, err = proc.communicate(timeout=500)
    finally:
        kill_group(proc)
    assert proc.returncode == 0, f"{out[-4000:]}\n{err[-4000:]}"
    assert f"on the cluster at {cluster.address}" in out
    lines = re.findall(r"^\[\s*\d+s\] (\S.*?) \| produced (\d+)/(\d+) \| rows: bronze (\d+) ", out, re.M)
    assert any(int(b) > 0 and int(p) < int(t) for _, p, t, b in lines), out  # rows while producing
    assert lines[-1][0] == "done"
    root = tmp_path / "lake" / "demo"

    def read(name: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = DeltaTable(str(root / name)).to_pyarrow_table().to_pylist()
        return rows

    # Exactly the sample: every record in bronze or quarantine at its coordinates, late and silver as
    # computed from the partitions' contents (as `make demo`'s own test checks them).
    counts = check_demo_tables(read, 600)
    assert counts["bronze/order_events"] + counts["quarantine/order_events"] == int(lines[-1][2])
    assert (root / "report.html").is_file()
    assert [j["state"] for j in cluster.jobs() if j["name"] == "lakestream-demo-ingest"][-1] == "FINISHED"
    assert pids_with_env(MARK, mark) == []


def test_ctrl_c_cancels_the_job_on_the_cluster(cluster: StandaloneCluster, tmp_path: Path, mark: str) -> None:
    before = {j["jid"] for j in cluster.jobs()}
    proc = _start(cluster, tmp_path, mark, "--events", "600", "--produce-seconds", "120")
    first_data = tmp_path / "lake" / "demo" / "bronze/order_events" / "_delta_log" / f"{1:020d}.json"
    try:
        deadline = time.monotonic() + 300
        while not first_data.exists():
            assert proc.poll() is None, f"demo ended early: {proc.communicate()}"
            assert time.monotonic() < deadline, "the demo's job committed nothing within 300 s"
            time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=90)
    finally:
        kill_group(proc)
    assert proc.returncode == 130, f"{out[-3000:]}\n{err[-3000:]}"
    assert re.search(r"stopping: job [0-9a-f]{32} cancelled on ", out), out
    assert err.strip().splitlines()[-1].startswith("lakestream demo: interrupted (SIGINT)")
    [job] = [j for j in cluster.jobs() if j["jid"] not in before]
    state = cluster.wait_for_job(job["jid"], states=("CANCELED",), timeout=60)
    assert state == "CANCELED"
    assert pids_with_env(MARK, mark) == []
