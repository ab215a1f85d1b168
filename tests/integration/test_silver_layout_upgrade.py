"""A deployment on copy-on-write silver switching to merge-on-read, by the step docs/merge-on-read.md gives.

A copy-on-write job runs unbounded on the first half of a scenario and is killed with kill -9 while more
input is in flight. A start with merge-on-read is refused while the kill left copy-on-write work staged,
naming the bounded run as the fix. One bounded run in copy-on-write settles what the checkpoint holds;
the job then starts with merge-on-read on the same checkpoint folder and tables, reads the rest, and its
first fold turns the old ``silver/orders`` into the snapshot. Every table ends exact, silver's read path
included, and silver's counters count each lineage's duplicates (the settle starts a new lineage, with
new de-dup state, where the killed run's last checkpoint ended).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from devtools.processes import kill_group
from flink_jobs.ingest import check_silver_layout
from lakestream.config import ConfigError, load_config
from lakestream.progress import PROGRESS_SEGMENT, kafka_key
from lakestream.silver import CHANGE_SEQ
from storage.delta_log import DeltaLog
from tests.integration.test_ingest_end_to_end import (
    Record,
    assert_tables,
    build_stream,
    expected_counts,
    merge_on_read,
    produce,
)
from tests.support.cli import run_cli
from tests.support.ingest_job import (
    setup_topics,
    start_ingest,
    start_unbounded,
    table_rows,
    wait_for,
    wait_for_checkpoints,
)
from tests.support.silver_oracle import expected_silver

pytestmark = pytest.mark.integration

BRONZE = "bronze/order_events"
SILVER = "silver/orders"


def test_a_copy_on_write_deployment_switches_to_merge_on_read_by_the_documented_step(
    kafka: str, tmp_path: Path
) -> None:
    lakehouse = tmp_path / "lakehouse"
    topics, base = setup_topics(kafka, tmp_path, lakehouse)
    cow = {**base, "LAKESTREAM__TABLES__SILVER_LAYOUT": "copy_on_write"}
    env = {**base, "LAKESTREAM__TABLES__SILVER_LAYOUT": "merge_on_read"}
    records, half = build_stream()
    three_quarters = half + (len(records) - half) // 2
    produce(kafka, topics, records[:half])
    log = tmp_path / "ingest.log"

    old = start_unbounded(cow, log)
    try:
        counts = expected_counts(records[:half])
        counts[SILVER] = len(expected_silver([r.ev for r in records[:half] if r.kind == "valid"]))
        wait_for(lakehouse, counts, old, log)
        produce(kafka, topics, records[half:three_quarters])
        in_flight = expected_counts(records[:three_quarters])[BRONZE]
        assert table_rows(lakehouse, BRONZE) < in_flight, "nothing was in flight"
    finally:
        kill_group(old)  # stopped the hard way: its last checkpoint's work may stay staged
    assert not merge_on_read(lakehouse)

    try:
        check_silver_layout(load_config(None, environ=env))
        staged = False
    except ConfigError:
        staged = True
    if staged:
        refused = run_cli("ingest", env=env, timeout=120, check=False)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "copy_on_write" in refused.stderr and "--bounded" in refused.stderr, refused.stderr

    settle_log = tmp_path / "settle.log"
    settle = start_ingest(cow, settle_log, "--bounded")  # the documented step
    assert settle.wait(timeout=240) == 0, settle_log.read_text()[-4000:]
    assert "settling the previous run at checkpoint" in settle_log.read_text()  # the killed run's work
    assert not merge_on_read(lakehouse)
    check_silver_layout(load_config(None, environ=env))  # nothing staged any more

    produce(kafka, topics, records[three_quarters:])
    new_env = {**env, "LAKESTREAM__TABLES__SILVER_FOLD_EVERY": '"3s"'}
    new = start_unbounded(new_env, log)
    try:
        counts = expected_counts(records)
        counts[SILVER] = len(expected_silver([r.ev for r in records if r.kind == "valid"]))
        wait_for(lakehouse, counts, new, log)
        deadline = time.monotonic() + 120
        while CHANGE_SEQ not in DeltaTable(str(lakehouse / SILVER)).schema().to_arrow().names:
            assert new.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, f"no fold into {SILVER}\n{log.read_text()[-4000:]}"
            time.sleep(0.5)
        wait_for_checkpoints(tmp_path / "checkpoints", 2, new, log)  # nothing may be added twice
    finally:
        kill_group(new)
    assert merge_on_read(lakehouse)
    lineages = records_by_run(lakehouse, records)
    assert len(lineages) == 3 and all(lineages), [len(run) for run in lineages]
    assert_tables(lakehouse, records, runs=lineages)
    print(f"copy-on-write work staged at the kill: {staged}")


def records_by_run(lakehouse: Path, records: list[Record]) -> list[list[Record]]:
    """``records`` split by the run that committed them to bronze, in commit order: each bronze commit
    names its run (``txn`` app ids ``.../bronze/order_events:<run>:<subtask>``) and records per Kafka
    partition the next offset, so a record belongs to the first run whose progress passed its offset."""
    log = DeltaLog(str(lakehouse / BRONZE))
    runs: dict[str, dict[str, int]] = {}
    for version in log.commit_versions():
        commit = log.read_commit(version)
        assert commit is not None
        ids = {app.split(":")[1] for app in commit.txn if app.split(":")[1] != PROGRESS_SEGMENT}
        assert len(ids) <= 1, commit.txn
        if ids:
            progress = runs.setdefault(ids.pop(), {})
            for app, value in commit.txn.items():
                _, segment, key = app.split(":", 2)
                if segment == PROGRESS_SEGMENT:
                    progress[key] = max(progress.get(key, 0), value)
    out: list[list[Record]] = [[] for _ in runs]
    for r in records:
        key = kafka_key(r.topic, r.partition)
        i = next(i for i, ends in enumerate(runs.values()) if r.offset < ends.get(key, 0))
        out[i].append(r)
    return out
