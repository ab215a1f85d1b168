"""The Delta source in real Flink MiniClusters: injected failure, kill + restart from a checkpoint, Kafka.

Every job runs in its own process (its own JVM) with a timeout. Expected change rows come from
deltalake's own ``load_cdf`` over the whole table, independently of the source's planner.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError

from devtools.processes import kill_group

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

Change = tuple[int, str, str, int]  # (id, v, _change_type, _commit_version)


def build_source(uri: str | Path, *, appends: int = 12, rows: int = 40) -> None:
    """CDF table: appends, a MERGE (updates + inserts), a DELETE, an OPTIMIZE, more appends."""

    def data(start: int, n: int, tag: str) -> pa.Table:
        ids = list(range(start, start + n))
        return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]})

    write_deltalake(str(uri), data(0, rows, "a"), configuration={"delta.enableChangeDataFeed": "true"})
    for k in range(1, appends):
        write_deltalake(str(uri), data(k * rows, rows, "a"), mode="append")
    DeltaTable(str(uri)).merge(
        data(rows - 5, 10, "m"), "t.id = s.id", source_alias="s", target_alias="t"
    ).when_matched_update_all().when_not_matched_insert_all().execute()
    DeltaTable(str(uri)).delete("id < 3")
    DeltaTable(str(uri)).optimize.compact()


def more_appends(uri: str | Path, start: int, count: int, rows: int = 40) -> None:
    for k in range(count):
        ids = list(range(start + k * rows, start + (k + 1) * rows))
        write_deltalake(
            str(uri), pa.table({"id": pa.array(ids, pa.int64()), "v": [f"b{i}" for i in ids]}), mode="append"
        )


def expected_changes(
    uri: str | Path, *, starting_version: int = 0, ending_version: int | None = None
) -> Counter[Change]:
    reader = DeltaTable(str(uri)).load_cdf(starting_version=starting_version, ending_version=ending_version)
    t = pa.RecordBatchReader.from_stream(reader).read_all()
    cols = [t.column(n).to_pylist() for n in ("id", "v", "_change_type", "_commit_version")]
    return Counter((i, str(v), str(c), int(ver)) for i, v, c, ver in zip(*cols, strict=True))


def output_changes(uri: str | Path) -> Counter[Change]:
    t = DeltaTable(str(uri)).to_pyarrow_table()
    cols = [t.column(n).to_pylist() for n in ("id", "v", "_change_type", "_commit_version")]
    return Counter(zip(*cols, strict=True))


def output_rows(uri: str | Path) -> int:
    try:
        return int(DeltaTable(str(uri)).to_pyarrow_dataset().count_rows())
    except TableNotFoundError:
        return 0


def assert_exactly(got: Counter[Change], want: Counter[Change]) -> None:
    dupes = {k: n for k, n in got.items() if n > 1}
    missing = want - got
    extra = got - want
    assert not dupes, f"{len(dupes)} change rows emitted more than once, e.g. {list(dupes.items())[:3]}"
    assert not missing, f"{sum(missing.values())} change rows missing, e.g. {list(missing)[:3]}"
    assert not extra, f"{sum(extra.values())} unexpected change rows, e.g. {list(extra)[:3]}"


@dataclass
class Finished:
    returncode: int
    output: str


def run(cmd: list[str], env: dict[str, str], log: Path, timeout: float = 150) -> Finished:
    """Run a job in its own process group; on timeout kill the whole group (the MiniCluster JVM too)."""
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            raise AssertionError(f"job timed out after {timeout:.0f} s:\n{tail(log)}") from None
    return Finished(proc.returncode, log.read_text(errors="replace"))


def tail(log: Path, n: int = 6000) -> str:
    return log.read_text(errors="replace")[-n:]


def job_env(tmp_path: Path, lakehouse: Path, **extra: str) -> dict[str, str]:
    return {
        "LAKESTREAM__LAKEHOUSE__ROOT": str(lakehouse),
        "LAKESTREAM__FLINK__CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "LAKESTREAM__FLINK__CHECKPOINT_INTERVAL": '"500ms"',
        "LAKESTREAM__FLINK__PARALLELISM": "1",
        **extra,
    }


FAILING_JOB = textwrap.dedent(
    """
    import os, sys, time
    from datetime import timedelta
    from lakestream.config import FlinkConfig
    from runtime.flink_env import build_env
    from sources.flink.delta_source import delta_source
    from sources.options import DeltaSourceOptions
    from sources.reader import output_schema
    from sources.stream_reader import resolve_read_schema
    from sinks.flink.delta_sink import DeltaSinkSpec, sink_to_delta
    from sinks.table_spec import TableSpec

    src, out, marker, fail_after, ckpt = sys.argv[1:6]

    class FailOnce:
        # Raises once (the marker file survives the restart), after `after` rows and once the sink has
        # committed data, so the restart restores a checkpoint taken mid-stream, not the empty start.
        # The source paces the stream (one file per 600 ms poll), so checkpoints complete while it
        # flows. Pacing here instead (sleeping per row) held the checkpoint barriers behind the queued
        # polls: no data commit until every row had passed, and the failure never fired.
        def __init__(self, marker, after, out):
            self.marker, self.after, self.out = marker, after, out
            self.seen, self.checked, self.ok = 0, 0.0, False
        def committed(self):
            from deltalake import DeltaTable
            try:
                return DeltaTable(self.out).version() >= 1
            except Exception:
                return False
        def __call__(self, row):
            self.seen += 1
            if os.path.exists(self.marker):
                return row
            if not self.ok and time.time() - self.checked > 0.05:
                self.checked = time.time()
                self.ok = self.committed()
            if self.ok and self.seen >= self.after:
                with open(self.marker, "w") as fh:
                    fh.write(str(time.time()))
                raise RuntimeError("injected failure after %d rows" % self.seen)
            return row

    # Bundles of one element: a barrier never waits behind a paced backlog in the Python worker.
    cfg = FlinkConfig(parallelism=1, checkpoint_interval=timedelta(milliseconds=300), checkpoint_dir=ckpt,
                      restart_attempts=2, restart_delay=timedelta(seconds=1), bundle_size=1)
    env = build_env(cfg)
    opts = DeltaSourceOptions(mode="cdf", starting_version=0, max_files_per_trigger=1,
                              poll_interval=timedelta(milliseconds=600))
    schema = resolve_read_schema(src)
    rows = delta_source(env, src, opts, ticks=40, read_schema=schema, uid="it-source")
    rows = rows.map(FailOnce(marker, int(fail_after), out)).name("inject failure").uid("it-fail")
    spec = DeltaSinkSpec(
        table=TableSpec(table_uri=out, schema=output_schema(schema, "cdf")), app_prefix="it-delta-source"
    )
    sink_to_delta(rows, spec, name="out", uid="it-out")
    env.execute("delta source injected failure")
    """
)


def test_injected_failure_mid_stream_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    src, out, marker = tmp_path / "src", tmp_path / "out", tmp_path / "failed.marker"
    build_source(src)
    want = expected_changes(src)
    script = tmp_path / "failing_job.py"
    script.write_text(FAILING_JOB)
    fail_after = sum(want.values()) // 2
    proc = run(
        [
            sys.executable,
            str(script),
            str(src),
            str(out),
            str(marker),
            str(fail_after),
            str(tmp_path / "ckpt"),
        ],
        env={},
        log=tmp_path / "job.log",
    )
    assert proc.returncode == 0, f"job failed:\n{proc.output[-6000:]}"
    assert marker.exists(), "the injected failure never fired"
    failed_at = float(marker.read_text())
    assert_exactly(output_changes(out), want)
    # The restart resumed from a checkpoint taken mid-stream: rows were committed before the failure.
    history = DeltaTable(str(out)).history()
    assert any(h["timestamp"] / 1000 < failed_at for h in history if h.get("operation") != "CREATE TABLE")


def latest_checkpoint(ckpt_root: Path) -> Path:
    done = [p.parent for p in ckpt_root.rglob("chk-*/_metadata")]
    assert done, f"no completed checkpoint under {ckpt_root}"
    return max(done, key=lambda p: int(p.name.split("-")[1]))


def test_killed_changefeed_restarted_from_its_checkpoint_is_exact(tmp_path: Path, lakehouse: Path) -> None:
    src = lakehouse / "silver" / "orders"
    src.parent.mkdir(parents=True)
    # Long enough (one version per 300 ms poll) for commits to land while it flows: the kill must come
    # mid-stream, after the first 100 rows are committed and before the last.
    build_source(src, appends=40)
    out = lakehouse / "audit" / "orders"
    env = job_env(tmp_path, lakehouse)
    base = ["--table", "silver/orders", "--to", "delta:audit/orders", "--from-version", "0"]
    base += ["--max-files-per-trigger", "1", "--poll-interval", "300ms"]
    log = tmp_path / "run1.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "changefeed", *base],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the MiniCluster JVM and workers die with it
    )
    try:
        deadline = time.monotonic() + 120
        while output_rows(out) < 100:
            assert proc.poll() is None, f"job exited early:\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"no output after 120 s:\n{log.read_text()[-4000:]}"
            time.sleep(0.2)
    finally:
        kill_group(proc)
    partial = output_rows(out)
    assert 0 < partial < sum(expected_changes(src).values()), "the job was not killed mid-stream"
    # New versions arrive while the job is down.
    last = max(DeltaTable(str(src)).to_pyarrow_table().column("id").to_pylist())
    more_appends(src, last + 1, 3)
    want = expected_changes(src)
    latest_checkpoint(tmp_path / "ckpt")  # the first run did leave a completed checkpoint

    restart = run(
        [
            sys.executable,
            "-m",
            "cli",
            "changefeed",
            *base,
            "--polls",
            "60",
            "--poll-interval",
            "100ms",
        ],
        env=env,
        log=tmp_path / "run2.log",
    )
    assert restart.returncode == 0, f"restart failed:\n{restart.output[-6000:]}"
    # No flag needed: the job resumes from its own newest retained checkpoint by default.
    assert "resuming from checkpoint" in restart.output
    assert_exactly(output_changes(out), want)
    # The restart ended by itself with everything committed: its position is the table's, no checkpoint
    # is left to resume from by mistake.
    assert not list((tmp_path / "ckpt").rglob("chk-*/_metadata"))


def test_changefeed_to_kafka_exactly_once(tmp_path: Path, lakehouse: Path, kafka: str) -> None:
    from kafka import KafkaConsumer

    from devtools.kafka_broker import create_topic

    src = lakehouse / "silver" / "orders"
    src.parent.mkdir(parents=True)
    build_source(src, appends=4, rows=25)
    want = expected_changes(src)
    topic = "changefeed.orders"
    create_topic(kafka, topic, partitions=1)
    env = job_env(tmp_path, lakehouse, LAKESTREAM__KAFKA__BOOTSTRAP_SERVERS=kafka)
    proc = run(
        [
            sys.executable,
            "-m",
            "cli",
            "changefeed",
            "--table",
            "silver/orders",
            "--to",
            f"kafka:{topic}",
            "--from-version",
            "0",
            "--max-files-per-trigger",
            "2",
            "--poll-interval",
            "100ms",
            "--polls",
            "30",
        ],
        env=env,
        log=tmp_path / "job.log",
    )
    assert proc.returncode == 0, f"job failed:\n{proc.output[-6000:]}"
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=kafka,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
        enable_auto_commit=False,
    )
    events: list[dict[str, Any]] = [json.loads(m.value) for m in consumer]
    consumer.close()
    got = Counter((e["id"], e["v"], e["_change_type"], e["_commit_version"]) for e in events)
    assert_exactly(got, want)
    versions = [e["_commit_version"] for e in events]
    assert versions == sorted(versions), "one writer, one partition: commit order is kept"
    assert all(e["_commit_timestamp"].endswith("+00:00") for e in events)


def test_vacuumed_gap_stops_the_job_with_a_clear_error_or_is_skipped_on_request(
    tmp_path: Path, lakehouse: Path
) -> None:
    src = lakehouse / "silver" / "orders"
    src.parent.mkdir(parents=True)
    build_source(src, appends=3, rows=10)  # v0-v2 appends, v3 merge, v4 delete, v5 optimize
    removed = DeltaTable(str(src)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert removed
    after_vacuum = DeltaTable(str(src)).version() + 1
    more_appends(src, 10_000, 2, rows=10)
    env = job_env(tmp_path, lakehouse, LAKESTREAM__FLINK__RESTART_ATTEMPTS="0")
    base = [
        sys.executable,
        "-m",
        "cli",
        "changefeed",
        "--table",
        "silver/orders",
        "--from-version",
        "1",
        "--poll-interval",
        "100ms",
        "--polls",
        "20",
    ]
    failed = run([*base, "--to", "delta:audit/strict"], env=env, log=tmp_path / "strict.log")
    assert failed.returncode == 1, tail(tmp_path / "strict.log")
    line = next(x for x in failed.output.splitlines() if x.startswith("lakestream changefeed: job failed"))
    assert "DataLossError" in line and "version 1" in line and "delta.deletedFileRetentionDuration" in line
    assert output_rows(lakehouse / "audit" / "strict") == 0

    lossy = run(
        [*base, "--to", "delta:audit/lossy", "--no-fail-on-data-loss"], env=env, log=tmp_path / "lossy.log"
    )
    assert lossy.returncode == 0, tail(tmp_path / "lossy.log")
    # The files versions 1 and 2 added were compacted away and vacuumed: those versions are skipped. The
    # MERGE and DELETE (v3, v4) keep their change files (_change_data is not vacuumed): still exact.
    want = expected_changes(src, starting_version=3, ending_version=4) + expected_changes(
        src, starting_version=after_vacuum
    )
    assert sum(want.values()) == 23 + 20
    assert_exactly(output_changes(lakehouse / "audit" / "lossy"), want)
