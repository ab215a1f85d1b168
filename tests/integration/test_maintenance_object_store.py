"""Maintenance on both back ends, a local folder and the real S3 server, with real delta-rs tables.

The table lock kept in the table's files: racing holders never overlap, an expired lock goes to exactly
one of the takers racing for it, renewals keep a long holder in, a killed holder on this host lets go at
once. ``lakestream maintain`` compacts, checkpoints, vacuums and cleans up a table, and its vacuum and log
cleanup keep what a changefeed reader recorded in the table's files still needs, without ``--force``;
``maintain auto`` finds the tables under the lakehouse root.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lakestream.config import load_config
from maintenance import operations
from maintenance.facts import TableRef, last_checkpoint_version, staged_files, tables_under
from maintenance.maintenance_errors import RefusedError
from maintenance.rewrites import TableBusyError, rewrite_lock
from storage.reader_positions import PositionRecorder, read_records
from storage.table_files import TableFiles, table_files
from storage.table_lock import LockHeldError, LockOwner, LockRecord, TableLock, now_ms
from tests.support.cli import ROOT, run_cli
from tests.support.delta_tables import StoredTable, lakehouse_env, open_writer, table_at, table_options

pytestmark = pytest.mark.integration


def files_of(lakehouse: Path, name: str = "") -> TableFiles:
    """The files of table ``name`` under ``lakehouse``, or of the whole lakehouse."""
    return table_files(table_at(lakehouse, name), table_options(lakehouse))


def table_in(lakehouse: Path, name: str) -> Path:
    """Table ``name`` as the sink's test helpers take it."""
    if isinstance(lakehouse, StoredTable):
        return StoredTable.at(lakehouse / name, uri=table_at(lakehouse, name), options=lakehouse.options)
    return lakehouse / name


def elsewhere(operation: str) -> LockOwner:
    """A holder on another host: nothing but its expiry frees the lock."""
    return LockOwner(f"t-{operation}", operation, f"lakestream maintain {operation} t", "other-host", 4242)


def append(lakehouse: Path, name: str, commits: int, **kw: object) -> None:
    for k in range(commits):
        ids = list(range(10 * k, 10 * k + 10))
        write_deltalake(
            table_at(lakehouse, name),
            pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids]}),
            mode="append",
            storage_options=table_options(lakehouse),
            **kw,  # type: ignore[arg-type]
        )


def in_threads(target: Callable[[int], None], n: int) -> None:
    """Run ``target(0)`` .. ``target(n - 1)`` at once, each in a thread of its own, and wait for all."""
    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def lakestream_fails(*args: str, env: dict[str, str]) -> str:
    """Run ``lakestream ARGS``, which must fail; its output."""
    proc = subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode != 0, proc.stdout
    return proc.stdout + proc.stderr


# ------------------------------------------------------------------------------------------ the lock


def test_racing_holders_never_overlap_and_each_taking_is_one_generation(any_lakehouse: Path) -> None:
    files = files_of(any_lakehouse, "t")
    lock = TableLock(files)
    inside: list[int] = []
    overlaps: list[tuple[int, ...]] = []
    taken: Counter[int] = Counter()
    mutex = threading.Lock()
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for n in range(4):
                with lock.holding(f"worker-{i}", wait_s=120):
                    with mutex:
                        inside.append(i)
                        if len(inside) > 1:
                            overlaps.append(tuple(inside))
                    # Something the store sees while held: a marker written and read back unchanged.
                    files.write_atomic("marker", f"{i}-{n}".encode())
                    assert files.read("marker") == f"{i}-{n}".encode()
                    with mutex:
                        inside.remove(i)
                    taken[i] += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    in_threads(work, 6)
    assert not errors and not overlaps and sum(taken.values()) == 24
    # Every taking created one generation and every release one more: no generation was taken twice.
    state = lock.state()
    assert state.generation == 48 and state.record is not None and state.record.state == "released"
    assert [f.path for f in files.list("_lakestream/locks/maintenance")] == [lock.path(48)]


def test_an_expired_lock_goes_to_exactly_one_of_the_takers_racing_for_it(any_lakehouse: Path) -> None:
    files = files_of(any_lakehouse, "t")
    # The primitive: eight creates of one generation at once, one wins.
    race = TableLock(files, "race")
    barrier = threading.Barrier(8)
    won: list[int] = []

    def create(i: int) -> None:
        record = LockRecord(elsewhere(f"c{i}"), "held", now_ms(), now_ms() + 60_000)
        barrier.wait()
        if race._create(1, record):
            won.append(i)

    in_threads(create, 8)
    assert len(won) == 1

    # The takeover: a holder on another host that stopped renewing; eight maintainers wait for it.
    lock = TableLock(files)
    expires = now_ms() + 1500
    assert lock._create(1, LockRecord(elsewhere("optimize"), "held", now_ms(), expires))
    winners: list[tuple[int, int]] = []
    losers: list[str] = []
    all_lost = threading.Event()
    mutex = threading.Lock()

    def take(i: int) -> None:
        try:
            held = lock.acquire(f"taker-{i}", wait_s=6)
        except LockHeldError as exc:
            with mutex:
                losers.append(str(exc))
                if len(losers) == 7:
                    all_lost.set()
            return
        winners.append((i, held.generation))
        all_lost.wait(60)  # hold it until every other taker gave up
        held.release()

    in_threads(take, 8)
    assert len(winners) == 1 and len(losers) == 7, (winners, losers)
    [(winner, generation)] = winners
    assert generation == 2 and now_ms() > expires
    assert all(f"held by taker-{winner} by pid {os.getpid()}" in message for message in losers)


def test_renewals_keep_a_long_holder_in_and_a_waiter_is_told_who(any_lakehouse: Path) -> None:
    lock = TableLock(files_of(any_lakehouse, "t"), lease_s=1.5, renew_every_s=0.3)
    with lock.holding("optimize", wait_s=0) as held:
        started = time.monotonic()
        with pytest.raises(LockHeldError, match="held by optimize by pid .* held until .* unless renewed"):
            lock.acquire("zorder", wait_s=4.0)
        assert time.monotonic() - started >= 4.0
        assert held.generation >= 5 and held.lost is None
    with lock.holding("zorder", wait_s=0) as again:  # released at the end: no renewer left behind
        assert again.generation == held.generation + 1


HOLDER = """
import sys, time
from storage.table_files import table_files
from storage.table_lock import TableLock
TableLock(table_files(sys.argv[1]), lease_s=600, renew_every_s=60).acquire("optimize", wait_s=0)
print("held", flush=True)
time.sleep(600)
"""


def test_a_killed_holder_on_this_host_lets_go_at_once_a_live_one_does_not(any_lakehouse: Path) -> None:
    uri = table_at(any_lakehouse, "t")
    lock = TableLock(files_of(any_lakehouse, "t"))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, uri], cwd=ROOT, stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(LockHeldError, match=f"held by optimize by pid {holder.pid} on "):
            lock.acquire("zorder", wait_s=0.5)
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
    finally:
        holder.kill()
    state = lock.state()
    assert state.record is not None and state.record.owner.pid == holder.pid
    assert state.record.expires_ms > now_ms() + 500_000  # its lease runs for ten minutes more
    taken = lock.acquire("zorder", wait_s=0)  # and yet the lock is free: its process is gone
    assert taken.generation == state.generation + 1
    taken.release()


def test_a_second_rewrite_is_refused_naming_the_holder_and_the_fix(any_lakehouse: Path) -> None:
    append(any_lakehouse, "bronze/events", 2)
    ref = TableRef("bronze/events", table_at(any_lakehouse, "bronze/events"))
    with rewrite_lock(ref, "restore"):
        with pytest.raises(TableBusyError) as refused:
            with rewrite_lock(ref, "optimize", wait_s=0.5):
                pass
    message = str(refused.value)
    assert f"another maintenance rewrite holds {ref.uri}/_lakestream/locks/maintenance" in message
    assert f"restore by pid {os.getpid()}" in message and "Fix: wait for it to finish" in message
    with rewrite_lock(ref, "optimize", wait_s=0):  # released
        pass


# ------------------------------------------------------------------------------- lakestream maintain


def test_maintain_compacts_and_vacuums_and_keeps_what_a_recorded_reader_needs(any_lakehouse: Path) -> None:
    name = "bronze/events"
    append(any_lakehouse, name, 6)
    env = {**lakehouse_env(any_lakehouse), "LAKESTREAM__FLINK__CHECKPOINT_INTERVAL": '"0s"'}
    files = files_of(any_lakehouse, name)

    out = run_cli("maintain", "optimize", name, env=env).stdout
    assert "6 files -> 1" in out and "version 6" in out, out
    lock = TableLock(files).state()
    assert lock.record is not None and lock.record.state == "released"
    assert "maintain optimize bronze/events" in lock.record.owner.command
    run_cli(
        "maintain",
        "properties",
        name,
        "--set",
        "delta.deletedFileRetentionDuration=interval 0 hours",
        "--set",
        "delta.logRetentionDuration=interval 0 hours",
        env=env,
    )

    # A changefeed that last read version 1 (recorded in the table's files, as its source does).
    uri, options = table_at(any_lakehouse, name), table_options(any_lakehouse)
    table_id = DeltaTable(uri, storage_options=options).metadata().id
    PositionRecorder(files, "feed").observe(version=1, table_id=table_id, now_ms=now_ms())
    assert [r.reader for r in read_records(files)] == ["feed"]
    assert "feed: may still read from version 1" in run_cli("maintain", "readers", name, env=env).stdout

    dry = run_cli("maintain", "vacuum", name, "--retain-hours", "0", env=env).stdout
    removed = [line.strip() for line in dry.splitlines() if line.startswith("  ") and ".parquet" in line]
    assert len(removed) == 6 and "would be refused" in dry and "reader 'feed'" in dry, dry
    refused = lakestream_fails("maintain", "vacuum", name, "--retain-hours", "0", "--delete", env=env)
    assert "vacuum of bronze/events refused" in refused and "reader 'feed'" in refused, refused
    assert "local tables only" not in refused
    refused = lakestream_fails("maintain", "cleanup", name, env=env)
    assert "log cleanup of bronze/events refused" in refused and "feed" in refused, refused
    assert all(files.info(path) is not None for path in removed)

    run_cli("maintain", "readers", name, "--forget", "feed", env=env)
    deleted = run_cli("maintain", "vacuum", name, "--retain-hours", "0", "--delete", env=env).stdout
    assert "deleted 6 file(s)" in deleted, deleted
    assert all(files.info(path) is None for path in removed)
    # A checkpoint only now (it drops expired tombstones, which the vacuum read); then the log cleanup.
    assert last_checkpoint_version(TableRef(name, table_at(any_lakehouse, name))) is None
    written = run_cli("maintain", "checkpoint", name, env=env).stdout
    assert "checkpoint bronze/events: written at version 9" in written, written
    assert last_checkpoint_version(TableRef(name, table_at(any_lakehouse, name))) == 9
    cleaned = run_cli("maintain", "cleanup", name, env=env).stdout
    assert "cleanup bronze/events: 0 " not in cleaned and "expired log file(s) deleted" in cleaned, cleaned
    assert DeltaTable(uri, storage_options=options).to_pyarrow_table().num_rows == 60


def test_auto_finds_the_tables_under_the_root_and_maintains_them(any_lakehouse: Path) -> None:
    append(any_lakehouse, "bronze/a", 3)
    append(any_lakehouse, "silver/deep/b", 3)
    append(any_lakehouse, "silver/deep/b/_stage", 1)  # inside a table's folder: not a table of its own
    assert tables_under(files_of(any_lakehouse)) == ["bronze/a", "silver/deep/b"]
    env = {**lakehouse_env(any_lakehouse), "LAKESTREAM__MAINTENANCE__MIN_SMALL_FILES": "2"}
    out = run_cli("maintain", "auto", "--once", env=env).stdout
    for name in ("bronze/a", "silver/deep/b"):
        assert f"{name}: compact (3 files below" in out and f"{name}: vacuum at 168h retention" in out, out
        assert f"{name}: log cleanup" in out
        table = DeltaTable(table_at(any_lakehouse, name), storage_options=table_options(any_lakehouse))
        history = table.history(1)
        assert history[0].get("lakestream.maintenance") == "optimize"
    assert "not done" not in out and "_stage" not in out, out


def test_a_full_vacuum_never_deletes_what_a_sink_staged_and_the_checkpoint_still_commits(
    any_lakehouse: Path,
) -> None:
    """The sinks' manifests are read from the table's files on either back end (``facts.staged_files``)."""
    schema = pa.schema([("source", pa.string()), ("id", pa.int64())])
    table = table_in(any_lakehouse, "bronze/e")
    writer = open_writer(table, restored=None, schema=schema, partition_by=["source"])
    for n in (1, 2):
        writer.write(pa.table({"source": ["a", "b"], "id": [2 * n, 2 * n + 1]}, schema=schema))
        writer.prepare(n)
        writer.commit(n)
    writer.write(pa.table({"source": ["a", "b"], "id": [100, 101]}, schema=schema))
    manifest = writer.prepare(3)  # staged for checkpoint 3; the job is down before COMMIT(3)
    assert manifest is not None
    staged = {f.path for f in manifest.files}
    ref = TableRef("bronze/e", table_at(any_lakehouse, "bronze/e"))
    assert staged_files(ref.files()) == staged
    cfg = load_config(environ=lakehouse_env(any_lakehouse)).replace("flink", checkpoint_interval="0s")
    dry = operations.vacuum(ref, cfg, retain_hours=0, full=True, force=True)
    assert set(dry.verdict.staged_in_the_way) == staged and not dry.verdict.allowed
    with pytest.raises(RefusedError, match="staged, not yet committed"):
        operations.vacuum(ref, cfg, retain_hours=0, full=True, force=True, dry_run=False)
    assert all(ref.files().info(path) is not None for path in staged)
    writer.commit(3)
    rows = DeltaTable(ref.uri, storage_options=table_options(any_lakehouse)).to_pyarrow_table()
    assert sorted(rows["id"].to_pylist()) == [2, 3, 4, 5, 100, 101]

