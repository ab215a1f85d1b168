"""Maintenance operations on real Delta tables written by the real two-phase sink.

Conflicts are real: a MERGE committed by another DeltaTable object after the optimize loaded its
snapshot (through the ``open_table`` seam), so delta-rs itself raises the ``CommitFailedError``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakestream.config import Config
from lakestream.merge_spec import MergeSpec
from maintenance import operations
from maintenance.facts import TableRef, resolve_table, staged_files
from maintenance.maintenance_errors import ConflictError, RefusedError, TableMissingError
from sinks.writer import TwoPhaseDeltaWriter
from storage.reader_positions import PositionRecorder
from storage.retry_policy import RetryPolicy
from tests.support.delta_tables import open_writer

SCHEMA = pa.schema([("source", pa.string()), ("id", pa.int64())])
FAST = RetryPolicy(max_attempts=3, initial_backoff_s=0.001, max_backoff_s=0.01)


def cfg(root: Path, **flink: object) -> Config:
    c = Config().replace("lakehouse", root=str(root))
    return c.replace("flink", **flink) if flink else c


def rows(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "source": ["a" if i % 2 else "b" for i in range(start, start + n)],
            "id": list(range(start, start + n)),
        },
        schema=SCHEMA,
    )


def appended(root: Path, checkpoints: int = 5) -> tuple[TableRef, TwoPhaseDeltaWriter]:
    """bronze/e written by the sink: ``checkpoints`` commits of 2 rows, partitioned by source."""
    uri = root / "bronze" / "e"
    w = open_writer(uri, restored=None, schema=SCHEMA, partition_by=["source"])
    for n in range(1, checkpoints + 1):
        w.write(rows(2, 2 * n))
        w.prepare(n)
        w.commit(n)
    return resolve_table(cfg(root), "bronze/e"), w


def ids(ref: TableRef) -> list[int]:
    return sorted(DeltaTable(ref.uri).to_pyarrow_table()["id"].to_pylist())


def test_names_resolve_under_the_lakehouse_root_and_paths_as_given(tmp_path: Path) -> None:
    assert resolve_table(cfg(tmp_path), "silver/orders").uri == str(
        (tmp_path / "silver" / "orders").resolve()
    )
    assert resolve_table(cfg(tmp_path), "/x/y").uri == "/x/y"
    with pytest.raises(TableMissingError, match="lakestream tables"):
        operations.open_table(resolve_table(cfg(tmp_path), "nope/t"))


def test_optimize_compacts_and_where_limits_it_to_partitions(tmp_path: Path) -> None:
    ref, _ = appended(tmp_path)
    one = operations.optimize(ref, where="source = 'a'", tasks=1)
    assert (one.files_removed, one.files_added, one.attempts) == (5, 1, 1)
    both = operations.optimize(ref)
    assert (both.files_removed, both.files_added) == (5, 1)
    assert ids(ref) == list(range(2, 12))
    assert DeltaTable(ref.uri).history(1)[0]["lakestream.maintenance"] == "optimize"


def test_zorder_needs_existing_columns(tmp_path: Path) -> None:
    ref, _ = appended(tmp_path)
    with pytest.raises(operations.MaintenanceError, match="--zorder: nope not columns"):
        operations.optimize(ref, zorder=["nope"])
    assert operations.optimize(ref, zorder=["id"], tasks=1).files_added >= 1
    assert ids(ref) == list(range(2, 12))


def merge_table(root: Path) -> TableRef:
    uri = root / "silver" / "m"
    w = open_writer(uri, restored=None, schema=SCHEMA, mode="upsert", merge=MergeSpec(keys=("id",)))
    for n in range(1, 4):
        w.write(rows(2, 2 * n))
        w.prepare(n)
        w.commit(n)
    return resolve_table(cfg(root), "silver/m")


def _merge_now(uri: str, i: int) -> None:
    """A MERGE that rewrites the file holding id 2 (a conflict for an OPTIMIZE that read it)."""
    dt = DeltaTable(uri)
    src = pa.table({"source": ["z", "z"], "id": [2, 100 + i]}, schema=SCHEMA)
    (
        dt.merge(src, "s.id = t.id", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


def test_optimize_retries_a_real_conflict_with_a_merge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = merge_table(tmp_path)
    real_open = operations.open_table
    opened: list[int] = []

    def stale_first(r: TableRef) -> DeltaTable:
        dt = real_open(r)
        if not opened:
            _merge_now(r.uri, 0)  # lands after this snapshot: the optimize must lose and re-plan
        opened.append(1)
        return dt

    monkeypatch.setattr(operations, "open_table", stale_first)
    result = operations.optimize(ref, retry=FAST)
    assert result.attempts == 2
    assert ids(ref) == [2, 3, 4, 5, 6, 7, 100]


def test_optimize_reports_when_conflicts_outlast_the_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = merge_table(tmp_path)
    real_open = operations.open_table
    counter = iter(range(100))

    def always_stale(r: TableRef) -> DeltaTable:
        dt = real_open(r)
        _merge_now(r.uri, next(counter))
        return dt

    monkeypatch.setattr(operations, "open_table", always_stale)
    before = DeltaTable(ref.uri).history(50)
    with pytest.raises(ConflictError, match="(?s)lost the commit race .* 3 times.*unchanged.*--where"):
        operations.optimize(ref, retry=FAST)
    assert not [e for e in DeltaTable(ref.uri).history(50) if e["operation"] == "OPTIMIZE"]
    assert len(DeltaTable(ref.uri).history(50)) == len(before) + 3  # only the three MERGEs


def test_vacuum_dry_run_by_default_and_refused_below_the_table_retention(tmp_path: Path) -> None:
    ref, _ = appended(tmp_path)
    operations.optimize(ref)
    dry = operations.vacuum(ref, cfg(tmp_path), retain_hours=0)
    assert dry.dry_run and len(dry.files) == 10 and not dry.verdict.allowed
    assert all((Path(ref.uri) / f).exists() for f in dry.files)
    with pytest.raises(RefusedError, match="(?s)below 7d \\(table\\).*--force"):
        operations.vacuum(ref, cfg(tmp_path), retain_hours=0, dry_run=False)
    done = operations.vacuum(
        ref, cfg(tmp_path, checkpoint_interval="0s"), retain_hours=0, dry_run=False, force=True
    )
    assert len(done.files) == 10 and not any((Path(ref.uri) / f).exists() for f in done.files)
    assert ids(ref) == list(range(2, 12))


def age(path: Path, hours: float) -> None:
    t = time.time() - hours * 3600
    os.utime(path, (t, t))


def test_a_full_vacuum_never_deletes_a_staged_file_and_its_checkpoint_still_commits(tmp_path: Path) -> None:
    ref, w = appended(tmp_path)
    w.write(rows(4, 100))
    manifest = w.prepare(6)  # staged for checkpoint 6; the job is down before COMMIT(6)
    assert manifest is not None
    staged = {f.path for f in manifest.files}
    assert staged_files(ref.files()) == staged
    for f in staged:
        age(Path(ref.uri) / f, 48)  # older than the retention: a full vacuum would take it
    dry = operations.vacuum(ref, cfg(tmp_path), retain_hours=24, full=True, force=True)
    assert set(dry.verdict.staged_in_the_way) == staged and not dry.verdict.allowed
    with pytest.raises(RefusedError, match="staged, not yet committed"):
        operations.vacuum(ref, cfg(tmp_path), retain_hours=24, full=True, force=True, dry_run=False)
    assert all((Path(ref.uri) / f).exists() for f in staged)
    # Lite mode never touches files the log does not know.
    operations.vacuum(ref, cfg(tmp_path, checkpoint_interval="0s"), retain_hours=0, dry_run=False, force=True)
    assert all((Path(ref.uri) / f).exists() for f in staged)
    w.commit(6)
    assert ids(ref) == [*range(2, 12), *range(100, 104)]


def test_a_reader_behind_holds_vacuum_back_until_forgotten(tmp_path: Path) -> None:
    ref, _ = appended(tmp_path)
    PositionRecorder(ref.files(), "feed").observe(version=2, table_id="t", now_ms=int(time.time() * 1000))
    c = cfg(tmp_path, checkpoint_interval="0s")
    operations.set_properties(ref, {"delta.deletedFileRetentionDuration": "interval 0 hours"})
    [status] = operations.readers(ref, c)
    assert status.needed_version == 2 and status.needed_time_ms is not None
    dry = operations.vacuum(ref, c, retain_hours=0)
    assert [r.rule for r in dry.verdict.violated] == ["reader feed"]
    with pytest.raises(RefusedError, match="(?s)reader 'feed'.*version 2"):
        operations.vacuum(ref, c, retain_hours=0, dry_run=False)
    operations.forget_reader(ref, "feed")
    assert operations.vacuum(ref, c, retain_hours=0).verdict.allowed
    with pytest.raises(operations.MaintenanceError, match="no such reader"):
        operations.forget_reader(ref, "feed")


def test_cleanup_is_refused_while_a_reader_needs_old_commits(tmp_path: Path) -> None:
    ref, _ = appended(tmp_path)
    operations.set_properties(ref, {"delta.logRetentionDuration": "interval 0 hours"})
    PositionRecorder(ref.files(), "feed").observe(version=1, table_id="t", now_ms=int(time.time() * 1000))
    time.sleep(0.01)
    with pytest.raises(RefusedError, match="(?s)log cleanup of bronze/e refused.*feed"):
        operations.cleanup(ref, cfg(tmp_path, checkpoint_interval="0s"))
    operations.checkpoint(ref)
    result = operations.cleanup(ref, cfg(tmp_path, checkpoint_interval="0s"), force=True)
    assert result.removed is not None and result.removed > 0
    assert ids(ref) == list(range(2, 12))


def test_restore_of_a_sink_written_table_needs_force(tmp_path: Path) -> None:
    ref, _ = appended(tmp_path)
    with pytest.raises(RefusedError, match="(?s)will not write them again.*--force"):
        operations.restore(ref, cfg(tmp_path), version=2)
    result = operations.restore(ref, cfg(tmp_path), version=2, force=True)
    assert result.target_version == 2 and result.new_version == 6 and result.warnings
    assert ids(ref) == [2, 3, 4, 5]
    with pytest.raises(operations.MaintenanceError, match="--timestamp 'soon'"):
        operations.restore(ref, cfg(tmp_path), timestamp="soon", force=True)


def test_properties_set_refuse_and_warn(tmp_path: Path) -> None:
    ref, _ = appended(tmp_path)
    assert operations.set_properties(ref, {"delta.logRetentionDuration": "interval 60 days"}) == []
    assert operations.properties(ref)["delta.logRetentionDuration"] == "interval 60 days"
    with pytest.raises(RefusedError, match="deletion vectors"):
        operations.set_properties(ref, {"delta.enableDeletionVectors": "true"})
    with pytest.raises(operations.MaintenanceError, match="--set: delta-rs refuses"):
        operations.set_properties(ref, {"delta.noSuchThing": "1"})
    with pytest.raises(operations.MaintenanceError, match="expected KEY=VALUE"):
        operations.parse_assignments(["novalue"])
    assert operations.parse_assignments(["a=b=c", " k = v "]) == {"a": "b=c", "k": "v"}


def test_history_lines_name_the_sink_checkpoints_and_maintenance(tmp_path: Path) -> None:
    ref, _ = appended(tmp_path, checkpoints=2)
    operations.optimize(ref)
    lines = operations.history_lines(ref)
    assert lines[0].split() == ["version", "committed", "(UTC)", "operation", "details"]
    assert "OPTIMIZE" in lines[1] and "maintenance: optimize" in lines[1]
    assert "sink checkpoints: job:run-1:0@2" in lines[2]
    assert len(operations.history_lines(ref, limit=2)) == 3


def test_two_compactions_from_one_snapshot_duplicate_rows_in_delta_rs_so_ours_take_a_lock(
    tmp_path: Path,
) -> None:
    """delta-rs 1.6 lets two OPTIMIZE commits planned on one snapshot both land (rows twice)."""
    ref, _ = appended(tmp_path)
    stale = DeltaTable(ref.uri)
    operations.optimize(ref)  # ours, under the lock
    stale.optimize.compact()  # another engine's, planned before ours landed: delta-rs lets it through
    assert len(ids(ref)) == 20  # the same 10 rows twice: what the lock and the check are for
    from maintenance.rewrites import DuplicatedRowsError, check_rewrite

    with pytest.raises(
        DuplicatedRowsError, match="(?s)version\\(s\\) \\[6\\] had already rewritten.*restore"
    ):
        check_rewrite(ref, 7, "optimize")


def test_a_second_rewrite_waits_for_the_lock_and_gives_up_naming_the_holder(tmp_path: Path) -> None:
    from maintenance.rewrites import TableBusyError, rewrite_lock

    ref, _ = appended(tmp_path)
    holder = r"(?s)another maintenance rewrite holds .*: optimize by pid \d+ on .*Fix: wait"
    with rewrite_lock(ref, "optimize"):
        with pytest.raises(TableBusyError, match=holder):
            with rewrite_lock(ref, "zorder", wait_s=0.3):
                pass
    with rewrite_lock(ref, "zorder", wait_s=0.3):  # released
        pass


def test_concurrent_optimizes_through_maintain_never_duplicate(tmp_path: Path) -> None:
    import threading

    ref, w = appended(tmp_path)
    errors: list[BaseException] = []

    def zorders() -> None:
        try:
            for _ in range(8):
                operations.optimize(ref, zorder=["id"], retry=FAST)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=zorders) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert ids(ref) == list(range(2, 12))
    assert (
        len([e for e in DeltaTable(ref.uri).history() if e.get("lakestream.maintenance") == "zorder"]) == 24
    )
