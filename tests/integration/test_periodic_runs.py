"""Periodic runs (cron, like Spark's availableNow) continue exactly where the previous run ended.

A run that ends by itself (``land --bounded``, ``changefeed --polls``) leaves no Flink checkpoint; the
next run with the same command must start at the position its output recorded with its last rows, and
runs that do not end by themselves (killed) must hand over to bounded ones and back, all exactly: the
output equals an oracle of all input, no duplicates, no gaps. Real broker, real MiniClusters, real Delta.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from kafka import KafkaConsumer, TopicPartition

from devtools.kafka_broker import create_topic
from devtools.processes import kill_group
from lakestream.progress import kafka_key, read_progress
from tests.integration.test_delta_source_flink import (
    Change,
    assert_exactly,
    build_source,
    expected_changes,
    more_appends,
    output_changes,
    output_rows,
    run,
)
from tests.integration.test_resume_after_kill import produce, rows, start_job, wait_rows
from tests.support.cli import run_cli
from tests.support.delta_tables import lakehouse_env, table_at
from tests.support.ingest_job import wait_for_checkpoints

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------------------------- land


def land_env(kafka: str, lakehouse: Path, tmp_path: Path) -> dict[str, str]:
    return {
        "LAKESTREAM__KAFKA__BOOTSTRAP_SERVERS": kafka,
        "LAKESTREAM__KAFKA__GROUP_ID": f"periodic{time.time_ns() % 10**9}",
        "LAKESTREAM__LAKEHOUSE__ROOT": str(lakehouse),
        "LAKESTREAM__FLINK__CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "LAKESTREAM__FLINK__CHECKPOINT_INTERVAL": "1s",
    }


def landed(uri: str) -> dict[tuple[int, int], bytes]:
    """(partition, offset) -> value of the landing table, failing on a record landed twice."""
    got = DeltaTable(uri).to_pyarrow_table()
    keys = list(zip(got["partition"].to_pylist(), got["offset"].to_pylist(), strict=True))
    twice = [k for k, n in Counter(keys).items() if n > 1]
    assert not twice, f"{len(twice)} records landed twice, e.g. {twice[:3]}"
    return dict(zip(keys, got["value"].to_pylist(), strict=True))


def test_land_runs_continue_exactly_bounded_unbounded_and_back(
    kafka: str, lakehouse: Path, tmp_path: Path
) -> None:
    topic = "periodic.land"
    create_topic(kafka, topic, partitions=2)
    env = land_env(kafka, lakehouse, tmp_path)
    bounded = ["land", "--topic", topic, "--table", "raw/periodic", "--bounded"]
    unbounded = ["land", "--topic", topic, "--table", "raw/periodic"]
    uri = str(lakehouse / "raw" / "periodic")
    log = tmp_path / "unbounded.log"
    sent: dict[tuple[int, int], bytes] = {}

    # 1. A first bounded run: nothing recorded yet, so the consumer group (never committed): earliest.
    sent |= produce(kafka, topic, 0, 600)
    first = run_cli(*bounded, env=env)
    assert "nothing recorded yet" in first.stdout
    assert landed(uri) == sent

    # 2. More input, the same command: it starts exactly where the table's rows end.
    sent |= produce(kafka, topic, 600, 400)
    second = run_cli(*bounded, env=env)
    assert f"from the offsets {uri} recorded with its rows" in second.stdout
    assert landed(uri) == sent
    # The position is in the table's own commits: the next offset of each partition.
    ends = {kafka_key(topic, p): max(o for (q, o) in sent if q == p) + 1 for p in (0, 1)}
    assert read_progress(DeltaTable(uri), "lakestream-land/raw/periodic", ends) == ends

    # 3. An unbounded run after the bounded ones starts at their end too, and is killed mid-stream.
    proc = start_job(unbounded, env, log)
    try:
        sent |= produce(kafka, topic, 1000, 500)
        wait_rows(uri, len(sent), proc, log)
        sent |= produce(kafka, topic, 1500, 300)  # in flight at the kill: read, staged, not committed
    finally:
        kill_group(proc)
    assert len(landed(uri)) < len(sent), "everything produced was committed before the kill: not mid-stream"
    assert "from the offsets" in log.read_text()

    # 4. Unbounded again: it resumes the killed run's checkpoint, and is killed too.
    proc = start_job(unbounded, env, log)
    try:
        sent |= produce(kafka, topic, 1800, 200)
        wait_rows(uri, len(sent), proc, log)
        wait_for_checkpoints(tmp_path / "ckpt", 1, proc, log)  # one more, empty; the kill lands after it
    finally:
        kill_group(proc)
    assert log.read_text().count("resuming from checkpoint") == 1

    # 5. A bounded run after the killed one: that run's checkpoint is settled into the table (what it
    # holds is committed, the rest aborted), and this run reads on from there: nothing twice.
    sent |= produce(kafka, topic, 2000, 300)
    fifth = run_cli(*bounded, env=env)
    assert "settling the previous run at checkpoint" in fifth.stdout
    assert landed(uri) == sent
    sent |= produce(kafka, topic, 2300, 100)
    run_cli(*bounded, env=env)
    assert landed(uri) == sent
    assert rows(uri) == len(sent) == 2400
    assert not list((tmp_path / "ckpt").rglob("chk-*/_metadata")), "a finished run leaves no checkpoint"


# ----------------------------------------------------------------------------------------- changefeed


def changefeed_env(tmp_path: Path, lakehouse: Path, **extra: str) -> dict[str, str]:
    return {
        **lakehouse_env(lakehouse),
        "LAKESTREAM__FLINK__CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "LAKESTREAM__FLINK__CHECKPOINT_INTERVAL": "500ms",
        "LAKESTREAM__FLINK__PARALLELISM": "2",
        **extra,
    }


def changefeed(args: list[str], env: dict[str, str], log: Path) -> str:
    done = run([sys.executable, "-m", "cli", "changefeed", *args], env=env, log=log, timeout=240)
    assert done.returncode == 0, f"changefeed failed:\n{done.output[-6000:]}"
    return done.output


def cdf_table(lakehouse: Path) -> str:
    """A CDF-enabled source with 4 commits: appends, then a MERGE (updates and inserts)."""
    src = table_at(lakehouse, "silver/orders")
    build_source(src, appends=3, rows=20)  # v0-v2 appends, v3 merge, v4 delete, v5 optimize
    return src


def newest_id(src: str) -> int:
    return int(max(DeltaTable(src).to_pyarrow_table().column("id").to_pylist()))


def test_changefeed_polls_to_delta_continue_exactly(tmp_path: Path, any_lakehouse: Path) -> None:
    """On both back ends: a local lakehouse and one on the S3 server."""
    lakehouse = any_lakehouse
    src = cdf_table(lakehouse)
    out = table_at(lakehouse, "audit/orders")
    env = changefeed_env(tmp_path, lakehouse)
    feed = ["--table", "silver/orders", "--to", "delta:audit/orders", "--poll-interval", "200ms"]

    # The reported case: --from-version 0, a few polls, two more commits, the command without it.
    first = changefeed([*feed, "--from-version", "0", "--polls", "6"], env, tmp_path / "run1.log")
    assert "starting changefeed of silver/orders at version 0 (nothing recorded" in first
    assert_exactly(output_changes(out), expected_changes(src))
    more_appends(src, newest_id(src) + 1, 2, rows=10)
    second = changefeed([*feed, "--polls", "6"], env, tmp_path / "run2.log")
    version = DeltaTable(src).version()
    assert (
        f"resuming changefeed of silver/orders at version {version - 1} (recorded by the previous run's"
        in second
    )
    assert_exactly(output_changes(out), expected_changes(src))

    # The first command again, --from-version 0 included: a later run continues all the same.
    more_appends(src, newest_id(src) + 1, 1, rows=10)
    third = changefeed([*feed, "--from-version", "0", "--polls", "6"], env, tmp_path / "run3.log")
    assert "note: --from-version 0 applies to a first run or with --fresh only" in third
    assert_exactly(output_changes(out), expected_changes(src))

    # An unbounded run after them, killed once its first new rows are committed, then --polls again.
    log = tmp_path / "run4.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "changefeed", *feed, "--max-files-per-trigger", "1"],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        before = output_rows(out)
        more_appends(src, newest_id(src) + 1, 6, rows=10)
        deadline = time.monotonic() + 120
        while output_rows(out) <= before:
            assert proc.poll() is None, f"job exited early:\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"no new output:\n{log.read_text()[-4000:]}"
            time.sleep(0.2)
    finally:
        kill_group(proc)
    more_appends(src, newest_id(src) + 1, 1, rows=10)
    fifth = changefeed([*feed, "--polls", "12"], env, tmp_path / "run5.log")
    assert "resuming from checkpoint" in fifth
    assert_exactly(output_changes(out), expected_changes(src))

    # --fresh starts over on purpose: the whole feed again, now twice in the table.
    changefeed([*feed, "--fresh", "--from-version", "0", "--polls", "12"], env, tmp_path / "run6.log")
    assert output_changes(out) == Counter({k: 2 * n for k, n in expected_changes(src).items()})


def kafka_changes(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Every change event on ``topic`` a read_committed consumer sees, in order."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        enable_auto_commit=False,
        consumer_timeout_ms=5000,
    )
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    end = consumer.end_offsets([tp])[tp]
    events = []
    deadline = time.monotonic() + 60
    while consumer.position(tp) < end and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            events += [json.loads(r.value) for r in batch]
    consumer.close()
    return events


def change_counter(events: list[dict[str, Any]]) -> Counter[Change]:
    return Counter((e["id"], e["v"], e["_change_type"], e["_commit_version"]) for e in events)


def test_changefeed_polls_to_kafka_continue_exactly(tmp_path: Path, lakehouse: Path, kafka: str) -> None:
    src = cdf_table(lakehouse)
    topic = "periodic.changes"
    create_topic(kafka, topic, partitions=1)
    env = changefeed_env(tmp_path, lakehouse, LAKESTREAM__KAFKA__BOOTSTRAP_SERVERS=kafka)
    feed = ["--table", "silver/orders", "--to", f"kafka:{topic}", "--poll-interval", "200ms"]

    changefeed([*feed, "--from-version", "0", "--polls", "6"], env, tmp_path / "run1.log")
    assert_exactly(change_counter(kafka_changes(kafka, topic)), expected_changes(src))
    more_appends(src, newest_id(src) + 1, 2, rows=10)
    second = changefeed([*feed, "--polls", "6", "--max-files-per-trigger", "1"], env, tmp_path / "run2.log")
    assert f"in {topic}.lakestream-positions)" in second
    assert_exactly(change_counter(kafka_changes(kafka, topic)), expected_changes(src))

    # An unbounded run killed with a transaction open, then --polls: the restore aborts that transaction
    # and replays after its checkpoint; read_committed consumers see every change once.
    log = tmp_path / "run3.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "changefeed", *feed, "--max-files-per-trigger", "1"],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        before = len(kafka_changes(kafka, topic))
        more_appends(src, newest_id(src) + 1, 6, rows=10)
        deadline = time.monotonic() + 120
        while len(kafka_changes(kafka, topic)) <= before:
            assert proc.poll() is None, f"job exited early:\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"no new output:\n{log.read_text()[-4000:]}"
        more_appends(src, newest_id(src) + 1, 2, rows=10)  # in flight at the kill: not committed
    finally:
        kill_group(proc)
    committed = len(kafka_changes(kafka, topic))  # what a read_committed consumer sees
    assert committed < sum(expected_changes(src).values()), "all of it was committed before the kill"
    fourth = changefeed([*feed, "--polls", "12"], env, tmp_path / "run4.log")
    assert "resuming from checkpoint" in fourth
    events = kafka_changes(kafka, topic)
    assert_exactly(change_counter(events), expected_changes(src))
    versions = [e["_commit_version"] for e in events]
    assert versions == sorted(versions), "one writer, one partition: commit order is kept across runs"


# The change feed's Kafka output, built as the CLI builds it, with a failure injected between the Delta
# source and the Kafka writer: the job fails once mid-stream, Flink restores its last checkpoint (the
# writer's open transaction is aborted, the source replays what followed), and the run goes on.
FAILING_KAFKA_FEED = textwrap.dedent(
    """
    import os, sys, time
    from datetime import timedelta
    from lakestream.config import FlinkConfig
    from runtime.flink_env import build_env
    from lakestream.progress import Progress
    from flink_jobs.changefeed import app_prefix
    from sinks.flink.kafka_changes import kafka_change_sink
    from flink_jobs.positions_topic import default_positions_topic, ensure_positions_topic
    from sources.flink.delta_source import delta_source
    from sources.options import DeltaSourceOptions
    from sources.reader import output_schema
    from sources.stream_reader import resolve_read_schema

    src, bootstrap, topic, marker, fail_after, ckpt = sys.argv[1:7]

    class FailOnce:
        # Raises once (the marker file survives the restart) after `after` change rows, and only once a
        # transaction with changes is committed, so the restore is from a checkpoint taken mid-stream.
        def __init__(self, marker, after, bootstrap, topic):
            self.marker, self.after, self.bootstrap, self.topic = marker, after, bootstrap, topic
            self.seen, self.checked, self.ok = 0, 0.0, False
        def committed(self):
            from kafka import KafkaConsumer, TopicPartition
            c = KafkaConsumer(bootstrap_servers=self.bootstrap, isolation_level="read_committed")
            try:
                tp = TopicPartition(self.topic, 0)
                return c.end_offsets([tp])[tp] > 0
            finally:
                c.close()
        def __call__(self, row):
            if type(row) is Progress or os.path.exists(self.marker):
                return row
            self.seen += 1
            if not self.ok and time.time() - self.checked > 0.2:
                self.checked = time.time()
                self.ok = self.committed()
            if not self.ok:
                time.sleep(0.05)
            elif self.seen >= self.after:
                with open(self.marker, "w") as fh:
                    fh.write(str(time.time()))
                raise RuntimeError("injected failure after %d rows" % self.seen)
            return row

    cfg = FlinkConfig(parallelism=1, checkpoint_interval=timedelta(milliseconds=300), checkpoint_dir=ckpt,
                      restart_attempts=2, restart_delay=timedelta(seconds=1), bundle_size=1)
    env = build_env(cfg)
    opts = DeltaSourceOptions(mode="cdf", starting_version=0, max_files_per_trigger=1,
                              poll_interval=timedelta(milliseconds=250))
    schema = resolve_read_schema(src)
    rows = delta_source(env, src, opts, ticks=60, read_schema=schema, uid="changefeed-source-silver-orders",
                        emit_progress=True)
    rows = rows.map(FailOnce(marker, int(fail_after), bootstrap, topic)).name("inject failure").uid("it-fail")
    positions = default_positions_topic(topic)
    ensure_positions_topic(bootstrap, positions)
    kafka_change_sink(rows, names=output_schema(schema, "cdf").names, topic=topic,
                      positions_topic=positions, position_key=app_prefix("silver/orders"),
                      bootstrap_servers=bootstrap, exactly_once=True,
                      transactional_id_prefix="lakestream-changefeed-silver-orders",
                      uid="changefeed-kafka-silver-orders")
    env.execute("changefeed to kafka, injected failure")
    """
)


def test_changefeed_to_kafka_is_exact_under_an_injected_failure_and_across_runs(
    tmp_path: Path, lakehouse: Path, kafka: str
) -> None:
    src = lakehouse / "silver" / "orders"
    src.parent.mkdir(parents=True)
    build_source(src)  # long enough that half of it comes after the first committed transaction
    topic = "failing.changes"
    create_topic(kafka, topic, partitions=1)
    want = expected_changes(src)
    script = tmp_path / "failing_feed.py"
    script.write_text(FAILING_KAFKA_FEED)
    marker = tmp_path / "failed.marker"
    args = [str(src), kafka, topic, str(marker), str(sum(want.values()) // 2), str(tmp_path / "ckpt-script")]
    failed = run([sys.executable, str(script), *args], env={}, log=tmp_path / "failing.log", timeout=240)
    assert failed.returncode == 0, f"job failed:\n{failed.output[-6000:]}"
    assert marker.exists(), "the injected failure never fired"
    assert_exactly(change_counter(kafka_changes(kafka, topic)), want)

    # The CLI continues where that run's last transaction left the position: a periodic run.
    more_appends(src, newest_id(src) + 1, 3, rows=10)
    env = changefeed_env(tmp_path, lakehouse, LAKESTREAM__KAFKA__BOOTSTRAP_SERVERS=kafka)
    out = changefeed(
        ["--table", "silver/orders", "--to", f"kafka:{topic}", "--poll-interval", "200ms", "--polls", "8"],
        env,
        tmp_path / "periodic.log",
    )
    assert "resuming changefeed of silver/orders at version" in out
    assert_exactly(change_counter(kafka_changes(kafka, topic)), expected_changes(src))


def test_a_killed_bounded_run_is_completed_by_the_next_run(
    kafka: str, lakehouse: Path, tmp_path: Path
) -> None:
    topic = "periodic.killed"
    create_topic(kafka, topic, partitions=2)
    # One record per Python bundle: slow enough to be killed after some commits, before the end.
    env = {**land_env(kafka, lakehouse, tmp_path), "LAKESTREAM__FLINK__BUNDLE_SIZE": "1"}
    bounded = ["land", "--topic", topic, "--table", "raw/killed", "--bounded"]
    uri = str(lakehouse / "raw" / "killed")
    log = tmp_path / "killed.log"
    sent = produce(kafka, topic, 0, 4000)
    proc = start_job(bounded, env, log)
    try:
        wait_rows(uri, 1, proc, log)
    finally:
        kill_group(proc)
    partial = rows(uri)
    assert 0 < partial < len(sent), f"the run was not killed mid-way ({partial} rows)"

    sent |= produce(kafka, topic, 4000, 500)  # more input before the next run
    out = run_cli(*bounded, env=env)
    # First the killed run, to its own end offsets (from its checkpoint), then this run from there.
    assert "completing the interrupted bounded run" in out.stdout
    assert landed(uri) == sent
