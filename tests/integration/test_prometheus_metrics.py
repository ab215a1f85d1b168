"""Flink's Prometheus reporter on a local MiniCluster: a real changefeed job (Delta source -> Delta sink)
runs with ``flink.prometheus_port`` set and ``GET /metrics`` serves lakestream's source and sink metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from devtools.processes import free_port, kill_group
from tests.support.prometheus import Scraper

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
OPERATOR = "flink_taskmanager_job_task_operator_"
SPARK_SOURCE_METRICS = (
    "numInputRows",
    "inputRowsPerSecond",
    "processedRowsPerSecond",
    "numBytesOutstanding",
    "numFilesOutstanding",
)


def append_version(uri: Path, v: int, rows: int) -> None:
    ids = pa.array(range(v * rows, (v + 1) * rows), pa.int64())
    write_deltalake(
        str(uri),
        pa.table({"id": ids, "v": [f"r{i}" for i in ids.to_pylist()]}),
        mode="append",
        configuration={"delta.enableChangeDataFeed": "true"} if v == 0 else None,
    )


def _adds_of_versions(uri: Path, versions: range) -> list[dict[str, int]]:
    """The ``add`` actions (their ``size``) of the commits of ``versions``."""
    out = []
    for v in versions:
        for line in (uri / "_delta_log" / f"{v:020d}.json").read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                out.append({"size_bytes": int(action["add"]["size"])})
    return out


def wait_for(
    predicate: Callable[[], bool], *, proc: subprocess.Popen[bytes], log: Path, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, f"job ended early:\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"not seen in {timeout:.0f} s:\n{log.read_text()[-4000:]}"
        time.sleep(0.2)


def test_a_running_job_serves_lakestream_metrics_on_the_prometheus_port(
    tmp_path: Path, lakehouse: Path
) -> None:
    src = lakehouse / "silver" / "orders"
    src.parent.mkdir(parents=True)
    rows, burst = 50, 6
    append_version(src, 0, rows)
    port = free_port()
    env = {
        **os.environ,
        "LAKESTREAM__LAKEHOUSE__ROOT": str(lakehouse),
        "LAKESTREAM__FLINK__CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "LAKESTREAM__FLINK__CHECKPOINT_INTERVAL": '"500ms"',
        "LAKESTREAM__FLINK__PARALLELISM": "1",
        "LAKESTREAM__FLINK__PROMETHEUS_PORT": str(port),
    }
    cmd = [sys.executable, "-m", "cli", "changefeed", "--table", "silver/orders"]
    cmd += ["--to", "delta:audit/orders", "--from-version", "0", "--max-files-per-trigger", "1"]
    cmd += ["--poll-interval", "400ms", "--polls", "120"]
    log = tmp_path / "job.log"
    source = {"delta_source": "changefeed_source_silver_orders"}
    polls = f"{OPERATOR}delta_source_polls"
    with log.open("wb") as out, Scraper(f"http://127.0.0.1:{port}/metrics", interval=0.2) as scraper:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            # The Python worker reports its metrics once it runs; versions committed from then on are
            # read one per poll (max_files_per_trigger = 1), so each poll's progress is visible.
            wait_for(lambda: bool(scraper.values(polls, **source)), proc=proc, log=log, timeout=120)
            for v in range(1, burst + 1):
                append_version(src, v, rows)
            proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"job timed out:\n{log.read_text()[-4000:]}") from None
        finally:
            kill_group(proc)
        time.sleep(0.5)
    assert proc.returncode == 0, log.read_text()[-6000:]
    total = rows * (burst + 1)
    assert DeltaTable(str(lakehouse / "audit" / "orders")).to_pyarrow_dataset().count_rows() == total

    # Source: Spark's per-trigger progress and Delta's backlog, labelled with the source's uid.
    for name in SPARK_SOURCE_METRICS:
        assert scraper.values(f"{OPERATOR}delta_source_{name}", **source), f"no {name} scraped"
    assert max(scraper.values(f"{OPERATOR}delta_source_numInputRows", **source)) == rows
    # The backlog: at most the burst's files (one per version; read one per poll), and their bytes; at
    # least one file was waiting at some scrape (the burst lands faster than one version per poll).
    burst_sizes = [a["size_bytes"] for a in _adds_of_versions(src, range(1, burst + 1))]
    files_out = scraper.values(f"{OPERATOR}delta_source_numFilesOutstanding", **source)
    bytes_out = scraper.values(f"{OPERATOR}delta_source_numBytesOutstanding", **source)
    assert 1 <= max(files_out) <= burst and min(files_out) >= 0
    assert min(burst_sizes) <= max(bytes_out) <= sum(burst_sizes)
    # Rates are per trigger (timing-dependent): positive once rows flowed, never above what was read.
    assert max(scraper.values(f"{OPERATOR}delta_source_inputRowsPerSecond", **source)) > 0
    assert max(scraper.values(f"{OPERATOR}delta_source_processedRowsPerSecond", **source)) > 0
    assert max(scraper.values(f"{OPERATOR}delta_source_rowsEmitted", **source)) == total

    # Sink: the commit gauges of the audit table (group delta_table.<app prefix>).
    sink = {"delta_table": "changefeed_silver_orders"}
    assert max(scraper.values(f"{OPERATOR}delta_table_rowsCommitted", **sink)) == total
    # The counter counts the sink's commits in the audit table's log (the end-of-input one may land after
    # the last scrape of the finishing job).
    sink_commits = [
        h
        for h in DeltaTable(str(lakehouse / "audit" / "orders")).history()
        if h["operation"] != "CREATE TABLE"
    ]
    scraped_commits = max(scraper.values(f"{OPERATOR}delta_table_commits", **sink))
    assert len(sink_commits) - 1 <= scraped_commits <= len(sink_commits) and scraped_commits >= 2
    for gauge in ("filesCommitted", "bytesCommitted", "lastCommitLatencyMs", "stagedRowsUncommitted"):
        assert scraper.values(f"{OPERATOR}delta_table_{gauge}", **sink), f"no {gauge} scraped"
