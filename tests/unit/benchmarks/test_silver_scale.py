"""The pure parts of the silver-at-scale benchmark: ids, partial rows, the schedule, the report."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from benchmarks.silver_scale import (
    STATUSES,
    CheckpointRecord,
    FoldRecord,
    backlog_growing,
    barrier_at,
    check_rows,
    checkpoint_rows,
    initial_rows,
    last_status,
    markdown,
    order_ids,
    parse,
    start_of,
    summarize,
)
from lakestream.silver import SILVER_MERGE, SILVER_SCHEMA


def test_order_ids_are_random_looking_stable_and_distinct() -> None:
    ids = order_ids(np.arange(20000)).to_pylist()
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert len(set(ids)) == len(ids)
    assert order_ids(np.array([5, 7])).to_pylist() == [ids[5], ids[7]]
    descending = sum(1 for a, b in zip(ids, ids[1:], strict=False) if a > b) / (len(ids) - 1)
    assert 0.45 < descending < 0.55  # not ordered by index
    first_chars = {i[0] for i in ids}
    assert len(first_chars) == 16  # spread over the key space


def test_initial_rows_are_creates_with_the_brief_fields_set() -> None:
    t = initial_rows(10, 20, np.random.default_rng(0))
    assert t.schema == SILVER_SCHEMA and t.num_rows == 10
    assert t["order_id"].to_pylist() == order_ids(np.arange(10, 20)).to_pylist()
    for f in ("user_id", "status", "amount", "address", "created_time"):
        assert t[f].null_count == 0 and t[f"{f}__ts"].equals(t["last_event_time"])
        assert t[f"{f}__eid"].equals(t["last_event_id"])
    for f in ("paid_amount", "logistics_state", "deleted"):
        assert t[f].null_count == t[f"{f}__ts"].null_count == 10
    assert set(t["status"].to_pylist()) == {"created"}
    amounts = t["amount"].to_pylist()
    assert all(1 <= a <= 99999 and a.as_tuple().exponent == -2 for a in amounts)


def test_checkpoint_rows_hold_the_update_share_of_old_orders_and_numbered_new_ones() -> None:
    rng = np.random.default_rng(1)
    cp = checkpoint_rows(3, orders_before=1000, events=10000, update_share=0.3, interval_s=10.0, rng=rng)
    t = cp.rows
    assert t.num_rows == 10000 and t.schema == SILVER_SCHEMA
    updates = pc.is_null(t["created_time"])
    share = pc.sum(pc.cast(updates, pa.int64())).as_py() / t.num_rows
    assert share == pytest.approx(0.3, abs=0.02)
    assert cp.new_orders == t.num_rows - len(cp.update_index)
    assert cp.update_index.min() >= 0 and cp.update_index.max() < 1000
    assert len(np.unique(cp.update_index)) > 900  # uniform over the table: most orders hit
    new_ids = set(pc.filter(t["order_id"], pc.invert(updates)).to_pylist())
    assert new_ids == set(order_ids(np.arange(1000, 1000 + cp.new_orders)).to_pylist())
    # Updates set status and address only; event times increase within the checkpoint's interval.
    upd = t.filter(updates)
    assert upd["user_id"].null_count == upd.num_rows and upd["status"].null_count == 0
    micros = pc.cast(t["last_event_time"], pa.int64()).to_numpy()
    assert (np.diff(micros) > 0).all() and micros[-1] - micros[0] < 10_000_000
    assert len(set(t["last_event_id"].to_pylist())) == t.num_rows


def test_the_expected_status_is_the_last_update_of_a_sampled_order() -> None:
    rng = np.random.default_rng(2)
    cp = checkpoint_rows(1, orders_before=10, events=500, update_share=0.9, interval_s=10.0, rng=rng)
    sample = np.array([0, 3, 9])
    expected: dict[int, int] = {}
    last_status(expected, cp, sample)
    folded = SILVER_MERGE.fold_rows(cp.rows.to_pylist(), SILVER_SCHEMA)
    by_id = {r["order_id"]: r["status"] for r in folded.values()}
    ids = order_ids(sample).to_pylist()
    assert set(expected) == {0, 3, 9}
    assert [by_id[i] for i in ids] == [STATUSES[expected[k]] for k in (0, 3, 9)]
    current = pa.table({"order_id": ids[:2], "status": [by_id[ids[0]], "nope"]})
    assert check_rows(current, sample, expected) == {
        "sampled": 3,
        "missing": 1,
        "wrong_status": 1,
        "updated_in_sample": 3,
    }


def rec(n: int, start: float, end: float, interval: float = 10.0) -> CheckpointRecord:
    return CheckpointRecord(n, barrier_at(0.0, n, interval), start, end, 0.1, 100)


def test_schedule_lateness_and_visibility() -> None:
    assert barrier_at(5.0, 3, 10.0) == 35.0
    assert start_of(20.0, None) == 20.0 and start_of(20.0, 18.0) == 20.0 and start_of(20.0, 27.5) == 27.5
    r = rec(2, 27.5, 40.0)
    assert (r.barrier, r.commit_s, r.lateness, r.visibility) == (20.0, 12.5, 7.5, 20.0)


def test_backlog_growing_only_when_the_lateness_exceeds_an_interval_and_rises() -> None:
    steady = [rec(n, 10.0 * n + 2.0, 10.0 * n + 9.0) for n in range(1, 7)]
    assert not backlog_growing(steady, 10.0)
    # A commit of 25 s every 10 s: each barrier starts 15 s later than the one before.
    growing, end = [], 0.0
    for n in range(1, 6):
        start = start_of(10.0 * n, end or None)
        end = start + 25.0
        growing.append(rec(n, start, end))
    assert [r.lateness for r in growing] == [0.0, 15.0, 30.0, 45.0, 60.0]
    assert backlog_growing(growing, 10.0)
    assert not backlog_growing(growing[:1], 10.0)


def test_summary_and_markdown() -> None:
    records = [rec(1, 10.0, 10.5), rec(2, 20.0, 21.0), rec(3, 30.0, 30.5)]
    folds = [FoldRecord(60.0, 4.0, 1000, 900, 20), FoldRecord(120.0, 6.0, 3000, 2500, 20)]
    s = summarize("mor", 1_000_000, records, folds, interval_s=10.0, extra={"ok": True})
    assert s["checkpoints"] == 3 and s["commit_p50_s"] == 0.5 and s["visibility_p99_s"] == pytest.approx(0.99)
    assert s["worst_event_to_visible_p99_s"] == pytest.approx(10.99)
    assert (s["folds"], s["fold_median_s"], s["fold_rows_median"], s["lateness_end_s"]) == (2, 5.0, 2000, 0.0)
    assert s["backlog_growing"] is False and s["ok"] is True
    assert s["per_checkpoint"][1] == {
        "n": 2,
        "barrier": 20.0,
        "start": 20.0,
        "end": 21.0,
        "prepare_s": 0.1,
        "rows": 100,
        "commit_s": 1.0,
        "lateness_s": 0.0,
        "visibility_s": 1.0,
    }
    assert [f["start"] for f in s["per_fold"]] == [60.0, 120.0]
    cow = summarize("cow", 4_000_000, [], [], interval_s=10.0, extra={"capped": True})
    md = markdown([s, cow]).splitlines()
    assert len(md) == 4 and md[0].count("|") == md[1].count("|") == md[2].count("|") == 13
    assert "| mor | 1,000,000 | 3 | 0.50 / 0.99 |" in md[2]
    assert md[3].startswith("| cow (capped) | 4,000,000 | 0 | - / - |")


def test_parse() -> None:
    s = parse(["--orders", "1000,2000", "--minutes", "2", "--layouts", "mor", "--cow-checkpoints", "3"])
    assert (s.orders, s.minutes, s.layouts, s.cow_checkpoints, s.rate, s.update_share) == (
        [1000, 2000],
        2.0,
        ["mor"],
        3,
        10_000,
        0.5,
    )
    with pytest.raises(SystemExit):
        parse(["--layouts", "mor,xyz"])
