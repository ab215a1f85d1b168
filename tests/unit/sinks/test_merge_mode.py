"""Merge and upsert modes of the writer on a silver-shaped table, against ``MergeSpec.fold_rows``.

The reference for every expectation is the spec's Python fold (rows one by one in arrival order); the
Delta MERGE (one per checkpoint, on a pre-reduced source) must agree with it, across crashes and retries.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Sequence
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakestream.merge_spec import MergeSpec
from lakestream.silver import FIELD_TYPES, SILVER_MERGE, SILVER_SCHEMA
from sinks.committer import CommitHooks
from sinks.sink_errors import KeyNullError
from sinks.staging import Manifest
from sinks.writer import TwoPhaseDeltaWriter
from storage.retry_policy import RetryPolicy
from storage.table_files import LocalTableFiles
from tests.support.delta_tables import (
    SimulatedCrash,
    assert_no_orphans,
    assert_same_rows,
    commits_with_app,
    new_writer,
    open_writer,
    snapshot_rows,
    staging_leftovers,
    table_options,
    table_version,
    txn_version,
)
from tests.support.silver_rows import change as event
from tests.support.silver_rows import ts

UTC = dt.timezone.utc
TS = pa.timestamp("us", tz="UTC")
AMOUNT = pa.decimal128(18, 2)
FIELDS = FIELD_TYPES
SILVER = SILVER_SCHEMA
SPEC = SILVER_MERGE
FAST_RETRY = RetryPolicy(max_attempts=5, initial_backoff_s=0.001, max_backoff_s=0.01)


def as_table(rows: dict[Any, dict[str, Any]], schema: pa.Schema, keys: list[str]) -> pa.Table:
    return pa.Table.from_pylist(list(rows.values()), schema=schema).sort_by([(k, "ascending") for k in keys])


def silver_writer(table: Path, restored: int | None, **kw: Any) -> TwoPhaseDeltaWriter:
    kw.setdefault("schema", SILVER)
    kw.setdefault("mode", "merge")
    kw.setdefault("merge", SPEC)
    kw.setdefault("retry", FAST_RETRY)
    return open_writer(table, restored=restored, **kw)


def batch(rows: list[dict[str, Any]], schema: pa.Schema = SILVER) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=schema)


def assert_silver(table: Path, expected: dict[Any, dict[str, Any]]) -> None:
    assert_same_rows(snapshot_rows(table, SILVER, ["order_id"]), as_table(expected, SILVER, ["order_id"]))


# ---------------------------------------------------------------- writer settings


def test_writer_refuses_guards_in_upsert_mode(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="use mode='merge'"):
        new_writer(tmp_path, app_prefix="j", schema=SILVER, mode="upsert", merge=SPEC)


# ---------------------------------------------------------------- MERGE on a silver-shaped table


def test_event_time_guard_in_the_delta_merge(tmp_path: Path) -> None:
    t = tmp_path / "silver"
    w = silver_writer(t, None)
    checkpoints = [
        [
            event(
                "o1", "e1", 10, user_id="u1", status="created", amount=Decimal("5.00"), created_time=ts(10)
            ),
            event("o2", "e2", 11, status="created"),
        ],
        [
            event("o1", "e3", 5, status="stale", address="old street"),  # older: status loses, address is new
            event("o1", "e4", 20, address=None, logistics_state="packed"),  # null never erases the address
            event("o1", "e5", 10, status="tied"),  # same time as e1: the later arrival wins the tie
            event("o2", "e6", 30, deleted=True),  # delete = tombstone column, not a row removal
        ],
        [
            event("o2", "e7", 25, deleted=False, status="paid"),  # older un-delete loses; newer status lands
            event("o3", "e8", 1, paid_amount=Decimal("1.50")),
        ],
    ]
    for n, rows in enumerate(checkpoints, start=1):
        w.write(batch(rows))
        w.prepare(n)
        w.commit(n)

    got = {r["order_id"]: r for r in snapshot_rows(t, SILVER, ["order_id"]).to_pylist()}
    o1, o2, o3 = got["o1"], got["o2"], got["o3"]
    assert (o1["status"], o1["status__eid"], o1["status__ts"]) == ("tied", "e5", ts(10))
    assert (o1["address"], o1["address__eid"]) == ("old street", "e3")
    assert (o1["logistics_state"], o1["amount"], o1["user_id"]) == ("packed", Decimal("5.00"), "u1")
    assert (o1["last_event_time"], o1["last_event_id"]) == (ts(20), "e4")
    assert (o2["deleted"], o2["deleted__eid"], o2["status"]) == (True, "e6", "paid")
    assert (o2["last_event_time"], o2["last_event_id"]) == (ts(30), "e6")
    assert o3["paid_amount"] == Decimal("1.50") and o3["status"] is None
    all_rows = [r for rows in checkpoints for r in rows]
    assert_silver(t, SPEC.fold_rows(all_rows, SILVER))
    assert txn_version(t, "job:run-1:0") == 3
    assert_no_orphans(t)


def test_merge_sources_are_arrow_ipc_and_parquet_ones_of_older_versions_still_commit(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from sinks.staging import StagingArea

    t = tmp_path / "silver"
    rows = [event("o1", "e1", 10, status="created"), event("o1", "e2", 5, status="older")]
    w = silver_writer(t, None)
    w.write(batch(rows))
    manifest = w.prepare(1)
    assert manifest is not None and manifest.files[0].path.endswith(".arrow")
    staged = t / manifest.files[0].path
    with pa.OSFile(str(staged), "rb") as fh:
        assert pa.ipc.open_file(fh).read_all().num_rows == 1  # stored already folded

    # What a version that staged Parquet left behind when the task died before COMMIT(1).
    w.close()
    legacy = staged.with_suffix(".parquet")
    with pa.OSFile(str(staged), "rb") as fh:
        pq.write_table(pa.ipc.open_file(fh).read_all(), legacy)
    staged.unlink()
    old_file = replace(manifest.files[0], path=manifest.files[0].path[: -len(".arrow")] + ".parquet")
    StagingArea(LocalTableFiles(t), "job").write(replace(manifest, files=(old_file,)))

    silver_writer(t, 1)  # restored from checkpoint 1: its staged source is committed
    assert_silver(t, SPEC.fold_rows(rows, SILVER))
    assert txn_version(t, "job:run-1:0") == 1
    assert_no_orphans(t)


def test_merge_sources_are_compressed(tmp_path: Path) -> None:
    """zstd buffers: fewer bytes to write and, on an object store, to upload and fetch at the commit."""
    t = tmp_path / "silver"
    w = silver_writer(t, None)
    w.write(batch([event(f"o{i}", f"e{i}", i % 7, status="created") for i in range(2000)]))
    manifest = w.prepare(1)
    assert manifest is not None
    with LocalTableFiles(t).open_input(manifest.files[0].path) as fh:
        folded = pa.ipc.open_file(fh).read_all()
    plain = pa.BufferOutputStream()
    with pa.ipc.new_file(plain, folded.schema) as ipc_writer:
        ipc_writer.write_table(folded)
    assert folded.num_rows == 2000 and manifest.files[0].size_bytes < plain.getvalue().size / 2
    w.commit(1)
    assert txn_version(t, "job:run-1:0") == 1


def random_events(rng: random.Random, n: int, first_eid: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        values: dict[str, Any] = {}
        for name in rng.sample(list(FIELDS), rng.randint(1, 3)):
            if rng.random() < 0.2:
                values[name] = None
            elif name in ("amount", "paid_amount"):
                values[name] = Decimal(rng.randint(0, 999)) / 100
            elif name == "created_time":
                values[name] = ts(rng.randint(0, 5))
            elif name == "deleted":
                values[name] = rng.random() < 0.5
            else:
                values[name] = f"{name}-{rng.randint(0, 3)}"
        out.append(event(f"o{rng.randint(1, 4)}", f"e{first_eid + i}", rng.randint(0, 6), **values))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_checkpointed_merges_equal_applying_every_event_in_order(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    t = tmp_path / "silver"
    w = silver_writer(t, None)
    applied: list[dict[str, Any]] = []
    for n in range(1, 5):
        rows = random_events(rng, 12, 100 * n)  # many rows per key per checkpoint, out of order
        applied += rows
        w.write(batch(rows))
        w.prepare(n)
        if n != 2:  # COMMIT(2) skipped: checkpoint 3's commit folds 2 and 3 in one MERGE
            w.commit(n)
    assert_silver(t, SPEC.fold_rows(applied, SILVER))
    assert commits_with_app(t, "job:run-1:0") == 3
    assert_no_orphans(t)


class CrashBeforeCleanup(CommitHooks):
    def before_cleanup(self, manifests: Sequence[Manifest]) -> None:
        raise SimulatedCrash("killed after the MERGE committed")


def test_merge_crash_matrix(sink_table: Path) -> None:
    t = sink_table
    first = [event("o1", "e1", 1, status="a"), event("o1", "e2", 2, status="b")]
    second = [event("o1", "e3", 3, status="c")]
    third = [event("o2", "e4", 4, status="z")]

    w = silver_writer(t, None)
    w.write(batch(first))
    w.prepare(1)
    w.write(batch(third))
    w.prepare(2)
    del w  # checkpoint 1 completed, 2 did not
    with pytest.raises(SimulatedCrash):  # OPEN(1) commits 1, then dies before the cleanup
        silver_writer(t, 1, commit_hooks=CrashBeforeCleanup())
    assert_silver(t, SPEC.fold_rows(first, SILVER))
    assert len(staging_leftovers(t)) >= 2  # manifest and merge source of checkpoint 1 still there
    version = table_version(t)
    w2 = silver_writer(t, 1)  # the restore after that crash: no second MERGE, staged sources cleaned
    assert table_version(t) == version and w2.metrics.already_committed == 1
    assert_no_orphans(t)

    w2.write(batch(second))
    w2.prepare(3)
    w2.commit(3)
    w2.commit(3)
    assert_silver(t, SPEC.fold_rows(first + second, SILVER))
    assert commits_with_app(t, "job:run-1:0") == 2
    assert staging_leftovers(t) == []


class CompactBeforeMerge(CommitHooks):
    """Another writer compacts the files our MERGE read, after our snapshot and before our commit."""

    def __init__(self, table: Path) -> None:
        self.options = table_options(table)

    def before_attempt(self, attempt: int, snapshot: DeltaTable) -> None:
        if attempt == 0:
            compacted = DeltaTable(snapshot.table_uri, storage_options=self.options).optimize.compact()
            assert compacted["numFilesRemoved"] >= 2


def test_merge_conflicting_with_a_compaction_is_rerun(sink_table: Path) -> None:
    """On S3 the compaction takes the version our MERGE was to create, so the MERGE's conditional PUT of
    that log entry is refused; delta-rs finds the files it read gone and our retry plans it again."""
    t = sink_table
    plain = silver_writer(t, None)
    seed = [event("o1", "e1", 1, status="a")], [event("o2", "e2", 2, status="b")]
    for n, rows in enumerate(seed, start=1):
        plain.write(batch(rows))
        plain.prepare(n)
        plain.commit(n)
    w = silver_writer(t, 2, commit_hooks=CompactBeforeMerge(t))
    late = [event("o1", "e3", 3, status="c"), event("o3", "e4", 4, status="d")]
    w.write(batch(late))
    w.prepare(3)
    result = w.commit(3)
    assert result.committed and result.retries == 1 and w.metrics.commit_retries == 1
    assert_silver(t, SPEC.fold_rows([*seed[0], *seed[1], *late], SILVER))
    assert commits_with_app(t, "job:run-1:0") == 3


def test_rescale_2_to_1_merges_both_subtasks_sources_in_one_commit(sink_table: Path) -> None:
    t = sink_table
    rows = {
        0: [event("o1", "e1", 5, status="s0"), event("o2", "e2", 1, address="x")],
        1: [event("o1", "e3", 4, status="s1", user_id="u"), event("o3", "e4", 2, deleted=True)],
    }
    for i in (0, 1):
        w = silver_writer(t, None, subtask=i, parallelism=2)
        w.write(batch(rows[i]))
        w.prepare(1)
    silver_writer(t, 1, subtask=0, parallelism=1)
    assert txn_version(t, "job:run-1:0") == 1 and txn_version(t, "job:run-1:1") == 1
    assert commits_with_app(t, "job:run-1:0") == commits_with_app(t, "job:run-1:1") == 1
    assert table_version(t) == 1  # one MERGE carried both app ids
    assert_silver(t, SPEC.fold_rows(rows[0] + rows[1], SILVER))
    assert_no_orphans(t)


# ---------------------------------------------------------------- upsert

KV = pa.schema([("id", pa.int64()), ("v", pa.string()), ("w", pa.string())])


def test_upsert_replaces_whole_rows_with_the_latest(tmp_path: Path) -> None:
    t = tmp_path / "kv"
    w = open_writer(t, restored=None, schema=KV, mode="upsert", merge=MergeSpec(keys=("id",)))
    w.write(batch([{"id": 1, "v": "a", "w": "x"}, {"id": 2, "v": "b", "w": "y"}], KV))
    w.prepare(1)
    w.commit(1)
    w.write(
        batch(
            [
                {"id": 1, "v": "a2", "w": "x2"},
                {"id": 1, "v": None, "w": "x3"},
                {"id": 3, "v": "c", "w": None},
            ],
            KV,
        )
    )
    w.prepare(2)
    w.commit(2)
    expected = pa.Table.from_pylist(
        [{"id": 1, "v": None, "w": "x3"}, {"id": 2, "v": "b", "w": "y"}, {"id": 3, "v": "c", "w": None}],
        schema=KV,
    )
    assert_same_rows(snapshot_rows(t, KV, ["id"]), expected)
    assert_no_orphans(t)


def test_upsert_never_replaces_a_protected_row_nor_inserts_its_key_again(tmp_path: Path) -> None:
    """Gold's rule: a row another layer owns (here ``w = 'batch'``) stays as it is, one row per key."""
    t = tmp_path / "kv"
    spec = MergeSpec(keys=("id",), protected={"w": "batch"})
    w = open_writer(t, restored=None, schema=KV, mode="upsert", merge=spec)
    w.write(batch([{"id": 1, "v": "a", "w": "realtime"}, {"id": 2, "v": "b", "w": "realtime"}], KV))
    w.prepare(1)
    w.commit(1)
    # Another writer replaces key 2 with its own row (and a null-layer row, which is not protected).
    DeltaTable(str(t)).update({"w": "'batch'", "v": "'B'"}, predicate="id = 2")
    w.write(batch([{"id": 1, "v": "a2", "w": "realtime"}, {"id": 2, "v": "b2", "w": "realtime"}], KV))
    w.write(batch([{"id": 3, "v": "c", "w": None}], KV))
    w.prepare(2)
    w.commit(2)
    w.write(batch([{"id": 3, "v": "c2", "w": "realtime"}], KV))
    w.prepare(3)
    w.commit(3)
    expected = pa.Table.from_pylist(
        [
            {"id": 1, "v": "a2", "w": "realtime"},
            {"id": 2, "v": "B", "w": "batch"},
            {"id": 3, "v": "c2", "w": "realtime"},
        ],
        schema=KV,
    )
    assert_same_rows(snapshot_rows(t, KV, ["id"]), expected)
    assert DeltaTable(str(t)).to_pyarrow_table().num_rows == 3
    assert spec.is_protected({"w": "batch"}) and not spec.is_protected({"w": None})


def test_protected_columns_are_for_upserts_only(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="upsert rule"):
        new_writer(
            tmp_path,
            app_prefix="j",
            schema=SILVER,
            mode="merge",
            merge=replace(SPEC, protected={"status": "x"}),
        )
    with pytest.raises(ValueError, match="is a key"):
        MergeSpec(keys=("id",), protected={"id": "x"})


def test_null_keys_are_refused(tmp_path: Path) -> None:
    w = open_writer(tmp_path / "kv", restored=None, schema=KV, mode="upsert", merge=MergeSpec(keys=("id",)))
    with pytest.raises(KeyNullError, match="'id' has 1 null"):
        w.write(batch([{"id": None, "v": "a", "w": "x"}], KV))


# ---------------------------------------------------------------- file size of MERGE output


def _file_size_property(table: Path) -> str | None:
    return DeltaTable(str(table)).metadata().configuration.get("delta.targetFileSize")


def _many_orders(n: int) -> list[dict[str, Any]]:
    rng = random.Random(7)
    return [
        event(f"o{i:06d}", f"e{rng.getrandbits(128):032x}", 1, address=f"{rng.getrandbits(128):032x}")
        for i in range(n)
    ]


def test_merge_output_is_split_at_the_target_file_size(tmp_path: Path) -> None:
    small, large = tmp_path / "small", tmp_path / "large"
    rows = _many_orders(20_000)
    for table, size in ((small, 256 * 1024), (large, 128 * 1024 * 1024)):
        w = silver_writer(table, None, target_file_size=size)
        assert _file_size_property(table) == str(size) and table_version(table) == 0  # set by the CREATE
        w.write(batch(rows))
        w.prepare(1)
        w.commit(1)
    assert len(DeltaTable(str(large)).file_uris()) == 1
    assert len(DeltaTable(str(small)).file_uris()) > 1  # the MERGE itself split its output
    assert_silver(small, SPEC.fold_rows(rows, SILVER))


def test_an_existing_merge_table_gets_the_file_size_at_open_from_subtask_0(tmp_path: Path) -> None:
    t = tmp_path / "silver"
    DeltaTable.create(str(t), schema=SILVER)
    version = table_version(t)
    silver_writer(t, None, subtask=1, parallelism=2, target_file_size=1 << 20)
    assert _file_size_property(t) is None and table_version(t) == version  # not subtask 1's business
    w = silver_writer(t, None, subtask=0, parallelism=2, target_file_size=1 << 20)
    assert _file_size_property(t) == str(1 << 20) and table_version(t) == version + 1
    silver_writer(t, None, run_id="run-2", target_file_size=1 << 20)
    assert table_version(t) == version + 1  # already right: no further commit
    rows = [event("o1", "e1", 1, status="paid")]
    w.write(batch(rows))
    w.prepare(1)
    w.commit(1)
    assert_silver(t, SPEC.fold_rows(rows, SILVER))


def test_append_tables_get_no_file_size_property(tmp_path: Path) -> None:
    t = tmp_path / "kv"
    open_writer(t, restored=None, schema=KV, target_file_size=1 << 20)
    assert _file_size_property(t) is None
