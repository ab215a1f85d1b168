"""Maintenance beside the streaming jobs: real broker, real MiniCluster jobs (subprocesses), real tables.

An unbounded ingest writes bronze, silver (MERGE through the global committer), late, quarantine and
review every second while this test compacts, checkpoints and vacuums them in a loop; the tables must
end exactly as the produced records imply (``assert_tables``: bronze row by row with its Kafka
coordinates, silver against the independent oracle). A changefeed run must leave its position record
beside its source table, where vacuum's reader rule finds it, whether that table is in a local folder or
on the S3 server.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from devtools.processes import kill_group
from lakestream.config import load_config
from maintenance import operations
from maintenance.facts import TableRef, resolve_table
from maintenance.maintenance_errors import ConflictError, RefusedError
from storage.reader_positions import read_records
from storage.retry_policy import RetryPolicy
from storage.table_files import table_files
from tests.integration.test_delta_source_flink import assert_exactly, expected_changes, output_changes
from tests.integration.test_ingest_end_to_end import assert_tables, build_stream, expected_counts, produce
from tests.support.cli import run_cli
from tests.support.delta_tables import lakehouse_env, table_at, table_options, table_version
from tests.support.ingest_job import setup_topics, start_unbounded, table_rows, wait_for_checkpoints
from tests.support.silver_oracle import expected_silver

pytestmark = pytest.mark.integration

APPEND_TABLES = ("bronze/order_events", "quarantine/order_events", "late/order_events")
SILVER = "silver/orders"


def is_table(ref: TableRef) -> bool:
    """Whether the table exists yet, in a local folder or on the store."""
    return "_delta_log" in ref.files().list_folders("")


def maintenance_round(cfg, tally: Counter[str], n: int) -> None:  # type: ignore[no-untyped-def]
    """Compact every table (bronze one partition at a time, silver Z-ordered), checkpoint, vacuum."""
    retry = RetryPolicy(max_attempts=10, initial_backoff_s=0.05, max_backoff_s=0.5)
    for name in (*APPEND_TABLES, SILVER):
        ref = resolve_table(cfg, name)
        if not is_table(ref):
            tally["optimize skipped (no table yet)"] += 1
            continue
        where = None
        if name == "bronze/order_events":
            where = f"source = '{('orders_db', 'payments', 'logistics', 'behaviour')[n % 4]}'"
        try:
            # Silver is Z-ordered: it rewrites silver's files (here often one) while MERGEs keep landing.
            zorder = ["order_id"] if name == SILVER else []
            result = operations.optimize(ref, where=where, zorder=zorder, retry=retry)
        except ConflictError:
            tally["optimize gave up"] += 1
        else:
            tally["optimize runs"] += 1
            tally[f"{name} optimize retries"] += result.attempts - 1
            tally["files compacted"] += result.files_removed
        operations.checkpoint(ref)
    # Bronze is append-only (no MERGE reads its files), so its compacted-away files may go at once
    # (forced: the jobs rule asks for two checkpoint intervals, which hour-granular retention cannot
    # express below 1h). Silver is MERGEd every second: its vacuum stays at the safe retention.
    bronze = resolve_table(cfg, "bronze/order_events")
    if is_table(bronze):
        with pytest.raises(RefusedError, match="below"):
            operations.vacuum(bronze, cfg, retain_hours=0, dry_run=False)
        done = operations.vacuum(bronze, cfg, retain_hours=0, dry_run=False, force=True)
        tally["files vacuumed"] += len(done.files)
    silver = resolve_table(cfg, SILVER)
    if is_table(silver):
        assert operations.vacuum(silver, cfg, dry_run=False).verdict.allowed


def zorder_silver_until(stop: threading.Event, cfg, tally: Counter[str]) -> None:  # type: ignore[no-untyped-def]
    """Z-order silver back to back, so its commits keep racing the streaming MERGE's (both retry)."""
    ref = resolve_table(cfg, SILVER)
    retry = RetryPolicy(max_attempts=10, initial_backoff_s=0.02, max_backoff_s=0.2)
    while not stop.is_set():
        try:
            result = operations.optimize(ref, zorder=["order_id"], retry=retry)
        except ConflictError:
            tally["gave up"] += 1
        else:
            tally["z-orders"] += 1
            tally["retries"] += result.attempts - 1
        stop.wait(0.05)


def test_optimize_and_vacuum_in_a_loop_beside_an_unbounded_ingest(
    kafka: str, any_lakehouse: Path, tmp_path: Path
) -> None:
    """On both back ends: the job's commits, OPTIMIZE, Z-order and VACUUM race on one table (silver
    copy-on-write: its MERGEs are the job's commits that rewrite what maintenance rewrites)."""
    lakehouse = any_lakehouse
    topics, env = setup_topics(kafka, tmp_path, lakehouse)
    env["LAKESTREAM__TABLES__SILVER_LAYOUT"] = "copy_on_write"
    cfg = load_config(environ=env)
    records, half = build_stream()
    produce(kafka, topics, records[:half])
    log = tmp_path / "ingest.log"
    tally: Counter[str] = Counter()
    want = {
        **expected_counts(records),
        SILVER: len(expected_silver([r.ev for r in records if r.kind == "valid"])),
    }

    started = time.monotonic()
    job = start_unbounded(env, log)
    stop = threading.Event()
    racing: Counter[str] = Counter()
    racer = threading.Thread(target=zorder_silver_until, args=(stop, cfg, racing), daemon=True)
    try:
        rounds = 0
        # The second half goes out in chunks (in order, so each partition's order is the same) between
        # rounds: silver gets a MERGE per chunk, and so files to compact while the next MERGE runs.
        rest = records[half:]
        chunks = [rest[k * len(rest) // 5 : (k + 1) * len(rest) // 5] for k in range(5)]
        deadline = time.monotonic() + 300
        while True:
            assert job.poll() is None, f"ingest exited:\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"tables {tally}: not complete\n{log.read_text()[-4000:]}"
            if table_rows(lakehouse, SILVER) == 0:
                time.sleep(0.5)  # the job is still starting
                continue
            if not racer.is_alive():
                racer.start()
            maintenance_round(cfg, tally, rounds)
            rounds += 1
            if chunks and rounds % 2 == 0:
                produce(kafka, topics, chunks.pop(0))
            if not chunks and all(table_rows(lakehouse, t) >= n for t, n in want.items()):
                break
        # A few more rounds and checkpoints once everything is in: nothing may be added twice.
        for _ in range(3):
            maintenance_round(cfg, tally, rounds)
            rounds += 1
            wait_for_checkpoints(tmp_path / "checkpoints", 1, job, log)
        stop.set()
        racer.join(timeout=60)
        # The scheduled maintainer, as a user runs it, beside the same job.
        auto = run_cli(
            "maintain",
            "auto",
            "--once",
            env={**env, "LAKESTREAM__MAINTENANCE__MIN_SMALL_FILES": "2"},
            timeout=120,
        )
        assert "silver/orders:" in auto.stdout and "not done" not in auto.stdout, auto.stdout
        wait_for_checkpoints(tmp_path / "checkpoints", 2, job, log)
    finally:
        stop.set()
        kill_group(job)
    elapsed = time.monotonic() - started
    print(f"{rounds} maintenance rounds beside ingest in {elapsed:.0f}s: {dict(tally)}")
    print(f"silver Z-ordered back to back beside its MERGEs: {dict(racing)}")
    # The racer Z-ordered silver again and again while the rounds ran (on a store each takes longer).
    assert racing["z-orders"] >= 3
    assert (
        rounds >= 5
        and sum(tally[k] for k in ("optimize runs", "optimize gave up", "optimize skipped (no table yet)"))
        == 4 * rounds
    )
    assert tally["files compacted"] > 0 and tally["files vacuumed"] > 0
    history = DeltaTable(str(lakehouse / SILVER)).history()
    zordered = [e for e in history if e.get("lakestream.maintenance") == "zorder"]
    merges = [e for e in history if e.get("operation") == "MERGE"]
    print(f"silver: {len(zordered)} Z-order and {len(merges)} MERGE commits interleaved")
    assert len(zordered) >= rounds - tally["optimize gave up"] + racing["z-orders"] and len(merges) >= 2
    assert_tables(lakehouse, records)


def test_a_changefeed_records_its_position_and_vacuum_sees_it(tmp_path: Path, any_lakehouse: Path) -> None:
    """On either back end: the source table (and so the position record) local or on the S3 server."""
    src = table_at(any_lakehouse, "silver/feedsrc")
    for k in range(6):
        ids = list(range(10 * k, 10 * k + 10))
        write_deltalake(
            src,
            pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids]}),
            mode="append",
            configuration={"delta.enableChangeDataFeed": "true"} if k == 0 else None,
            storage_options=table_options(any_lakehouse),
        )
    audit = tmp_path / "audit" / "feed"
    env = {
        **lakehouse_env(any_lakehouse),
        "LAKESTREAM__FLINK__CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "LAKESTREAM__FLINK__CHECKPOINT_INTERVAL": '"500ms"',
        "LAKESTREAM__FLINK__PARALLELISM": "1",
    }
    args = ["changefeed", "--table", "silver/feedsrc", "--to", f"delta:{audit}", "--from-version", "0"]
    run_cli(
        *args,
        "--max-files-per-trigger",
        "1",
        "--polls",
        "20",
        "--poll-interval",
        "200ms",
        env=env,
        timeout=240,
    )
    # Every change row of the source once, with its version and change type (the table's own feed).
    assert_exactly(output_changes(audit), expected_changes(src))

    files = table_files(src, table_options(any_lakehouse))
    [record] = read_records(files)
    reader = f"changefeed silver/feedsrc -> delta:{audit}"
    assert record.reader == reader
    assert record.positions[0][1] == 0  # it started at version 0
    assert record.positions[-1][1] == 6  # and last polled with everything up to version 5 emitted
    out = run_cli("maintain", "readers", "silver/feedsrc", env=env).stdout
    assert f"{reader}: may still read from version 0" in out

    # A restore may go back to version 0 (its first position is within the restore horizon), so vacuum
    # must keep every file removed since version 0's commit.
    cfg = load_config(environ=env).replace("flink", checkpoint_interval="0s")
    ref = resolve_table(cfg, "silver/feedsrc")
    operations.set_properties(ref, {"delta.deletedFileRetentionDuration": "interval 0 hours"})
    operations.optimize(ref)
    dry = operations.vacuum(ref, cfg, retain_hours=0)
    assert [r.rule for r in dry.verdict.violated] == [f"reader {reader}"]
    assert dry.files and all(files.info(f) is not None for f in dry.files)


def maintenance_commits(lakehouse: Path, table: str) -> list[dict[str, object]]:
    """The commits of ``table`` made by a maintenance operation (compaction, Z-order), oldest first."""
    if not (lakehouse / table / "_delta_log").is_dir():
        return []
    history = DeltaTable(str(lakehouse / table)).history()
    return [e for e in reversed(history) if e.get("lakestream.maintenance") in ("optimize", "zorder")]


def test_the_job_maintains_its_own_tables_while_it_ingests(kafka: str, tmp_path: Path) -> None:
    """``maintenance.in_job``: the ingest job compacts and checkpoints its tables between its commits,
    with nobody else maintaining them, and they stay exact."""
    lakehouse = tmp_path / "lakehouse"
    topics, env = setup_topics(kafka, tmp_path, lakehouse)
    env = {
        **env,
        "LAKESTREAM__MAINTENANCE__INTERVAL": '"2s"',
        "LAKESTREAM__MAINTENANCE__MIN_SMALL_FILES": "2",
        "LAKESTREAM__MAINTENANCE__CHECKPOINT_EVERY": "3",
    }
    records, half = build_stream()
    produce(kafka, topics, records[:half])
    log = tmp_path / "ingest.log"
    want = {
        **expected_counts(records),
        SILVER: len(expected_silver([r.ev for r in records if r.kind == "valid"])),
    }
    job = start_unbounded(env, log)
    try:
        deadline = time.monotonic() + 240
        # Evidence, not time: a compaction of bronze by the job while the first half is in.
        while not maintenance_commits(lakehouse, "bronze/order_events"):
            assert job.poll() is None, f"ingest exited:\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"no compaction by the job\n{log.read_text()[-4000:]}"
            time.sleep(0.5)
        first = len(maintenance_commits(lakehouse, "bronze/order_events"))
        rest = records[half:]
        bronze = lakehouse / "bronze/order_events"
        for k in range(4):  # the second half in chunks: commits keep landing between the rounds
            before = table_version(bronze)
            produce(kafka, topics, rest[k * len(rest) // 4 : (k + 1) * len(rest) // 4])
            while table_version(bronze) == before:  # a commit of this chunk, or a compaction, landed
                assert job.poll() is None, f"ingest exited:\n{log.read_text()[-4000:]}"
                assert time.monotonic() < deadline, f"bronze stayed at {before}\n{log.read_text()[-4000:]}"
                time.sleep(0.2)
        while not (
            all(table_rows(lakehouse, t) >= n for t, n in want.items())
            and len(maintenance_commits(lakehouse, "bronze/order_events")) > first
            and (bronze / "_delta_log" / "_last_checkpoint").is_file()
        ):
            assert job.poll() is None, f"ingest exited:\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"tables not complete\n{log.read_text()[-4000:]}"
            time.sleep(0.5)
        wait_for_checkpoints(tmp_path / "checkpoints", 2, job, log)  # a late replay would show now
    finally:
        kill_group(job)
    compacted = {t: len(maintenance_commits(lakehouse, t)) for t in (*APPEND_TABLES, SILVER)}
    print(f"compactions by the job: {compacted}")
    assert compacted["bronze/order_events"] >= 2
    assert_tables(lakehouse, records)
