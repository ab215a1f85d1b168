"""Merge and upsert modes: the event-time guard in SQL and in the pre-reduction, on a silver-shaped table.

The reference for every expectation is ``fold``: the guard of the brief applied row by row in arrival
order, in plain Python. The Delta MERGE (one per checkpoint, on a pre-reduced source) must agree with it.
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
from hypothesis import given, settings
from hypothesis import strategies as st

from sinks.committer import CommitHooks
from sinks.errors import KeyNullError
from sinks.merge_reduce import reduce_guarded, reduce_latest
from sinks.merge_spec import MergeSpec, MergeSpecError
from sinks.retry_policy import RetryPolicy
from sinks.staging import Manifest
from sinks.writer import TwoPhaseDeltaWriter
from tests.support.delta_tables import (
    SimulatedCrash,
    assert_no_orphans,
    assert_same_rows,
    commits_with_app,
    open_writer,
    snapshot_rows,
    staging_leftovers,
    table_version,
    txn_version,
)

UTC = dt.timezone.utc
TS = pa.timestamp("us", tz="UTC")
AMOUNT = pa.decimal128(18, 2)
FIELDS: dict[str, pa.DataType] = {
    "user_id": pa.string(),
    "status": pa.string(),
    "amount": AMOUNT,
    "paid_amount": AMOUNT,
    "address": pa.string(),
    "logistics_state": pa.string(),
    "created_time": TS,
    "deleted": pa.bool_(),
}
SILVER = pa.schema(
    [
        pa.field("order_id", pa.string(), nullable=False),
        *(
            f
            for name, typ in FIELDS.items()
            for f in (pa.field(name, typ), pa.field(f"{name}__ts", TS), pa.field(f"{name}__eid", pa.string()))
        ),
        pa.field("last_event_time", TS),
        pa.field("last_event_id", pa.string()),
    ]
)
SPEC = MergeSpec.with_suffixes(
    keys=("order_id",),
    fields=FIELDS,
    greatest=("last_event_time",),
    greatest_companions={"last_event_time": ("last_event_id",)},
)
FAST_RETRY = RetryPolicy(max_attempts=5, initial_backoff_s=0.001, max_backoff_s=0.01)


def ts(second: int) -> dt.datetime:
    return dt.datetime(2024, 5, 1, 12, 0, second, tzinfo=UTC)


def event(order: str, eid: str, second: int, **values: Any) -> dict[str, Any]:
    """A silver change row: the given fields set by event ``eid`` at ``second``, all else null."""
    row: dict[str, Any] = dict.fromkeys(SILVER.names)
    row["order_id"] = order
    for name, value in values.items():
        row[name] = value
        row[f"{name}__ts"] = ts(second)
        row[f"{name}__eid"] = eid
    row["last_event_time"] = ts(second)
    row["last_event_id"] = eid
    return row


Keyed = dict[tuple[Any, ...], dict[str, Any]]


def fold(
    rows: list[dict[str, Any]], spec: MergeSpec, schema: pa.Schema, target: Keyed | None = None
) -> Keyed:
    """The brief's guard, row by row: F, T, companions := source when s.F is not null and
    (t.T is null or s.T >= t.T); unguarded: source when not null; new keys: the folded row."""
    out = {k: dict(v) for k, v in (target or {}).items()}
    for r in rows:
        key = tuple(r[k] for k in spec.keys)
        t = out.get(key) or {**dict.fromkeys(schema.names), **{k: r[k] for k in spec.keys}}
        new = dict(t)
        for g in spec.groups():
            s_val, s_time, t_time = r[g.value], r[g.time], t[g.time]
            if s_val is not None and (t_time is None or (s_time is not None and s_time >= t_time)):
                for c in g.moved:
                    new[c] = r[c]
        for c in spec.unguarded(schema):
            if r[c] is not None:
                new[c] = r[c]
        out[key] = new
    return out


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


# ---------------------------------------------------------------- the spec


def test_spec_refuses_a_column_with_two_roles() -> None:
    with pytest.raises(MergeSpecError, match="'a' is both a key and a guarded value"):
        MergeSpec(keys=("a",), guarded={"a": "t"})
    with pytest.raises(MergeSpecError, match="'t' is both the event-time column of 'x'"):
        MergeSpec(keys=("k",), guarded={"x": "t", "y": "t"})
    with pytest.raises(MergeSpecError, match="neither a guarded nor a greatest"):
        MergeSpec(keys=("k",), companions={"z": ("z_id",)})
    with pytest.raises(MergeSpecError, match="does not have: nope"):
        MergeSpec(keys=("k",), greatest=("nope",)).validate(pa.schema([("k", pa.string())]))


def test_writer_refuses_guards_in_upsert_mode(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="use mode='merge'"):
        TwoPhaseDeltaWriter(table_uri=str(tmp_path), app_prefix="j", schema=SILVER, mode="upsert", merge=SPEC)


def test_update_sql_guards_value_time_and_companion_together() -> None:
    updates = SPEC.update_expressions(SILVER)
    cond = 's."status" IS NOT NULL AND (t."status__ts" IS NULL OR s."status__ts" >= t."status__ts")'
    for col in ("status", "status__ts", "status__eid"):
        assert updates[f'"{col}"'] == f'CASE WHEN {cond} THEN s."{col}" ELSE t."{col}" END'
    lasts = 't."last_event_time" IS NULL OR s."last_event_time" >= t."last_event_time"'
    assert lasts in updates['"last_event_id"']
    assert '"order_id"' not in updates and len(updates) == len(SILVER) - 1


# ---------------------------------------------------------------- pre-reduction = row-by-row fold

SMALL = pa.schema(
    [
        ("k", pa.string()),
        ("a", pa.string()),
        ("a_t", pa.int64()),
        ("a_id", pa.string()),
        ("g", pa.int64()),
        ("g_id", pa.string()),
        ("u", pa.int64()),
    ]
)
SMALL_SPEC = MergeSpec(
    keys=("k",), guarded={"a": "a_t"}, greatest=("g",), companions={"a": ("a_id",), "g": ("g_id",)}
)
maybe_int = st.none() | st.integers(0, 3)
small_rows = st.lists(
    st.fixed_dictionaries(
        {
            "k": st.sampled_from(["x", "y", "z"]),
            "a": st.none() | st.sampled_from(["p", "q", "r"]),
            "a_t": maybe_int,
            "a_id": st.text("ab", max_size=2),
            "g": maybe_int,
            "g_id": st.text("ab", max_size=2),
            "u": maybe_int,
        }
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=150, deadline=None)
@given(small_rows)
def test_reduce_guarded_equals_the_row_by_row_fold(rows: list[dict[str, Any]]) -> None:
    reduced = reduce_guarded(pa.Table.from_pylist(rows, schema=SMALL), SMALL_SPEC)
    expected = fold(rows, SMALL_SPEC, SMALL)
    assert {(r["k"],): r for r in reduced.to_pylist()} == expected
    assert reduced.num_rows == len(expected)


# Two key columns (the sort path), a timestamp guard and a string "greatest" column (the rank path).
WIDE = pa.schema(
    [
        ("k1", pa.string()),
        ("k2", pa.int64()),
        ("a", pa.string()),
        ("a_t", pa.timestamp("us", tz="UTC")),
        ("g", pa.string()),
        ("u", pa.int64()),
    ]
)
WIDE_SPEC = MergeSpec(keys=("k1", "k2"), guarded={"a": "a_t"}, greatest=("g",))
some_time = st.none() | st.sampled_from(
    [dt.datetime(2024, 6, 1, h, tzinfo=dt.timezone.utc) for h in (0, 1, 2)]
)
wide_rows = st.lists(
    st.fixed_dictionaries(
        {
            "k1": st.sampled_from(["x", "y"]),
            "k2": st.integers(0, 1),
            "a": st.none() | st.sampled_from(["p", "q"]),
            "a_t": some_time,
            "g": st.none() | st.sampled_from(["", "m", "n"]),
            "u": maybe_int,
        }
    ),
    min_size=1,
    max_size=16,
)


@settings(max_examples=150, deadline=None)
@given(wide_rows, st.integers(1, 4))
def test_reduce_guarded_with_two_keys_and_timestamps_equals_the_fold(
    rows: list[dict[str, Any]], chunk: int
) -> None:
    table = pa.Table.from_pylist(rows, schema=WIDE)
    chunked = pa.concat_tables([table.slice(i, chunk) for i in range(0, table.num_rows, chunk)])
    reduced = reduce_guarded(chunked, WIDE_SPEC)
    expected = fold(rows, WIDE_SPEC, WIDE)
    assert {(r["k1"], r["k2"]): r for r in reduced.to_pylist()} == expected
    assert reduced.num_rows == len(expected)
    last_arrival = {}
    for i, r in enumerate(rows):
        last_arrival[(r["k1"], r["k2"])] = i
    assert [(r["k1"], r["k2"]) for r in reduced.to_pylist()] == sorted(last_arrival, key=last_arrival.get)


@settings(max_examples=100, deadline=None)
@given(small_rows)
def test_reduce_latest_keeps_the_last_row_per_key(rows: list[dict[str, Any]]) -> None:
    reduced = reduce_latest(pa.Table.from_pylist(rows, schema=SMALL), ["k"])
    last = {r["k"]: r for r in rows}
    assert {r["k"]: r for r in reduced.to_pylist()} == last


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
    assert_silver(t, fold(all_rows, SPEC, SILVER))
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
    StagingArea(t, "job").write(replace(manifest, files=(old_file,)))

    silver_writer(t, 1)  # restored from checkpoint 1: its staged source is committed
    assert_silver(t, fold(rows, SPEC, SILVER))
    assert txn_version(t, "job:run-1:0") == 1
    assert_no_orphans(t)


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
    assert_silver(t, fold(applied, SPEC, SILVER))
    assert commits_with_app(t, "job:run-1:0") == 3
    assert_no_orphans(t)


class CrashBeforeCleanup(CommitHooks):
    def before_cleanup(self, manifests: Sequence[Manifest]) -> None:
        raise SimulatedCrash("killed after the MERGE committed")


def test_merge_crash_matrix(tmp_path: Path) -> None:
    t = tmp_path / "silver"
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
    assert_silver(t, fold(first, SPEC, SILVER))
    assert len(staging_leftovers(t)) >= 2  # manifest and merge source of checkpoint 1 still there
    version = table_version(t)
    w2 = silver_writer(t, 1)  # the restore after that crash: no second MERGE, staged sources cleaned
    assert table_version(t) == version and w2.metrics.already_committed == 1
    assert_no_orphans(t)

    w2.write(batch(second))
    w2.prepare(3)
    w2.commit(3)
    w2.commit(3)
    assert_silver(t, fold(first + second, SPEC, SILVER))
    assert commits_with_app(t, "job:run-1:0") == 2
    assert staging_leftovers(t) == []


class CompactBeforeMerge(CommitHooks):
    """A compaction rewrites the files our MERGE read, after our snapshot and before our commit."""

    def before_attempt(self, attempt: int, snapshot: DeltaTable) -> None:
        if attempt == 0:
            assert DeltaTable(snapshot.table_uri).optimize.compact()["numFilesRemoved"] >= 2


def test_merge_conflicting_with_a_compaction_is_rerun(tmp_path: Path) -> None:
    t = tmp_path / "silver"
    plain = silver_writer(t, None)
    seed = [event("o1", "e1", 1, status="a")], [event("o2", "e2", 2, status="b")]
    for n, rows in enumerate(seed, start=1):
        plain.write(batch(rows))
        plain.prepare(n)
        plain.commit(n)
    w = silver_writer(t, 2, commit_hooks=CompactBeforeMerge())
    late = [event("o1", "e3", 3, status="c"), event("o3", "e4", 4, status="d")]
    w.write(batch(late))
    w.prepare(3)
    result = w.commit(3)
    assert result.committed and result.retries == 1 and w.metrics.commit_retries == 1
    assert_silver(t, fold([*seed[0], *seed[1], *late], SPEC, SILVER))
    assert commits_with_app(t, "job:run-1:0") == 3


def test_rescale_2_to_1_merges_both_subtasks_sources_in_one_commit(tmp_path: Path) -> None:
    t = tmp_path / "silver"
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
    assert_silver(t, fold(rows[0] + rows[1], SPEC, SILVER))
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
    assert_silver(small, fold(rows, SPEC, SILVER))


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
    assert_silver(t, fold(rows, SPEC, SILVER))


def test_append_tables_get_no_file_size_property(tmp_path: Path) -> None:
    t = tmp_path / "kv"
    open_writer(t, restored=None, schema=KV, target_file_size=1 << 20)
    assert _file_size_property(t) is None
