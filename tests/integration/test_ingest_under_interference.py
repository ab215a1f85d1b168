"""A running unbounded ``lakestream ingest`` disturbed from outside; the tables must stay exact.

1. The batch layer beside the speed layer: ``lakestream reconcile --fix`` (the real CLI) backfills the
   closed gold windows the stream missed (events beyond the allowed lateness) while the job keeps
   reading and committing. Batch rows win and stay (DESIGN.md 11.3), no gold version holds a window
   twice, and the job does not notice (no restart).
2. A sink whose commits fail for longer than its retry budget (DESIGN.md section 3): a directory is put
   where bronze's next commit file goes, so every delta-rs commit of it fails with ``CommitFailedError``,
   the error the committer retries, until the budget is spent. The task fails, Flink restores the job
   from its checkpoint, and once the obstruction is gone the job catches up in the same process: every
   table exact, nothing staged left behind.

Expectations come from what the tests produced (the sample generator's ground truth, the gold
scenario's lateness oracle, ``tests/support/gold_oracle.py``), never from the job's code.
"""

from __future__ import annotations

import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from devtools.processes import kill_group
from lakestream.gold import KIND_ORDER_CREATED, LAYER_BATCH, LAYER_REALTIME
from storage.retry_policy import RetryPolicy
from tests.integration.test_gold_speed_layer import (
    GOLD,
    START,
    Event,
    classify,
    gold_env,
    gold_rows,
    metrics_of,
    scenario,
)
from tests.integration.test_gold_speed_layer import produce as produce_events
from tests.integration.test_ingest_end_to_end import (
    assert_tables,
    build_stream,
    expected_counts,
    produce,
    read_silver,
)
from tests.integration.test_object_store_faults import JOB_FAILED, RESTARTING, RESTORED, flink_log
from tests.support.cli import run_cli
from tests.support.delta_tables import assert_no_orphans
from tests.support.gold_oracle import expected_gold
from tests.support.ingest_job import (
    completed_checkpoint,
    setup_topics,
    start_unbounded,
    table_rows,
    wait_for,
    wait_for_checkpoints,
)
from tests.support.silver_oracle import FIELDS as RESOLVED
from tests.support.silver_oracle import expected_silver

pytestmark = pytest.mark.integration

BRONZE = "bronze/order_events"
SILVER = "silver/orders"
#: The range reconciled: late events reach an hour before the scenario's start; the first window
#: still open after the first part is 04:20 (its slowest partition's newest event is after 04:28).
FROM, TO = START - timedelta(hours=1), START + timedelta(minutes=15)
#: ``CommitConflictError``'s message: the checkpoint, the app ids (named after the table), the attempts.
EXHAUSTED = re.compile(
    r"Delta commit for checkpoint (\d+) \(app ids ([^)]*)\) still conflicts after (\d+) attempts"
)


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _wait_until(missing: Callable[[], object], proc: Any, log: Path, what: str, timeout: float = 120) -> None:
    """Until ``missing()`` is falsy (it says what is still missing), while the job runs."""
    deadline = time.monotonic() + timeout
    while gap := missing():
        assert proc.poll() is None, f"job exited early:\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, (
            f"{what}: not within {timeout:.0f}s: {gap}\n{log.read_text()[-3000:]}"
        )
        time.sleep(0.3)


def gold_differs(
    lakehouse: Path, expected: dict[datetime, dict[str, Any]], within: tuple[datetime, datetime] | None = None
) -> list[tuple[datetime, Any, Any]]:
    """(window, gold's metrics, expected) of each window where gold is not as expected (in ``within``)."""
    got = metrics_of(list(gold_rows(lakehouse).values()))
    windows = sorted(set(got) | set(expected))
    if within is not None:
        windows = [w for w in windows if within[0] <= w < within[1]]
    return [(w, got.get(w), expected.get(w)) for w in windows if got.get(w) != expected.get(w)]


@dataclass
class Said:
    """What one produced scenario record says about its order (``silver_oracle.GeneratedEvent``)."""

    order_id: str | None
    event_time: datetime | None
    sets: dict[str, Any] = field(default_factory=dict)
    malformed: bool = False


def said(e: Event) -> Said:
    """The fields a scenario record sets, from the payload the scenario wrote (README's field rules)."""
    if e.source == "orders_db":
        sets: dict[str, Any] = {
            "user_id": e.user_id,
            "amount": e.amount,
            "status": "created",
            "deleted": False,
        }
        if e.kind == KIND_ORDER_CREATED:
            sets["created_time"] = e.at
        return Said(e.order_id, e.at, sets)
    if e.source == "payments":
        return Said(e.order_id, e.at, {"paid_amount": e.amount, "status": "paid"})
    return Said(None, e.at)


def untied(events: list[Event]) -> bool:
    """No two different events of one order share an event time: silver then does not depend on the
    arrival order across partitions (``expected_silver`` assumes no ties)."""
    ids: dict[tuple[str, datetime], set[str]] = defaultdict(set)
    for e in events:
        if e.order_id is not None:
            ids[(e.order_id, e.at)].add(e.event_id)
    return all(len(v) == 1 for v in ids.values())


def in_chunks(events: list[Event], n: int) -> list[list[Event]]:
    """``events`` in ``n`` chunks, each with the next slice of every partition's records: the stream
    advances on all partitions at once, and each partition keeps its order (``classify``'s premise)."""
    by_partition: dict[tuple[str, int], list[Event]] = defaultdict(list)
    for e in events:
        by_partition[(e.source, e.partition)].append(e)
    chunks: list[list[Event]] = [[] for _ in range(n)]
    for timeline in by_partition.values():
        size = -(-len(timeline) // n)
        for i in range(n):
            chunks[i].extend(timeline[i * size : (i + 1) * size])
    return chunks


def stream_commits(lakehouse: Path, table: str) -> list[dict[str, Any]]:
    """The commits of ``table`` the job's sinks made (they carry their txn versions), oldest first."""
    return sorted(
        (h for h in DeltaTable(str(lakehouse / table)).history() if "lakestream.appVersions" in h),
        key=lambda h: int(h["version"]),
    )


def test_reconcile_fix_beside_a_running_ingest_keeps_batch_rows_and_one_row_per_window(
    kafka: str, lakehouse: Path, tmp_path: Path
) -> None:
    topics, env = gold_env(kafka, tmp_path, lakehouse)
    flink_logs = tmp_path / "flink-log"
    env["FLINK_LOG_DIR"] = str(flink_logs)
    first = scenario(seed=41, minutes=30)
    # Goes on an hour later: its late events (at most 14 min behind) stay far from the range fixed.
    chunks = in_chunks(scenario(seed=42, minutes=20, start=START + timedelta(hours=1)), 6)
    events = first + [e for chunk in chunks for e in chunk]  # production order
    assert untied(events)
    counted, beyond = classify(events)
    # The speed layer counts each event id's first delivery unless beyond the lateness; a recompute
    # from bronze counts every event id once (the gold oracle drops re-deliveries itself).
    realtime = metrics_of(expected_gold([e.delivery() for e in counted]))
    everything = metrics_of(expected_gold([e.delivery() for e in events]))
    assert beyond and everything == metrics_of(expected_gold([e.delivery() for e in counted + beyond]))
    missed = sorted(w for w in everything if FROM <= w < TO and realtime.get(w) != everything[w])
    assert missed, "the range must have closed windows with events beyond the allowed lateness"
    in_range = {w: everything[w] for w in everything if FROM <= w < TO}

    produce_events(kafka, topics, first)
    log = tmp_path / "ingest.log"
    checkpoints = tmp_path / "checkpoints"
    job = start_unbounded(env, log)
    feeder_errors: list[BaseException] = []
    fed, reconciled, stop = threading.Event(), threading.Event(), threading.Event()

    def feed() -> None:
        """The rest of the stream, a chunk at a time, each once bronze holds everything before it; the
        last one after the CLI is done, so that the stream has something to commit after the fix too."""
        total = len(first)
        try:
            for i, chunk in enumerate(chunks):
                if i == len(chunks) - 1:
                    reconciled.wait(timeout=120)
                produce_events(kafka, topics, chunk)
                total += len(chunk)
                fed.set()
                deadline = time.monotonic() + 90
                while table_rows(lakehouse, BRONZE) < total and not stop.is_set():
                    assert time.monotonic() < deadline, f"bronze short of {total} rows"
                    time.sleep(0.2)
        except BaseException as exc:
            feeder_errors.append(exc)
        finally:
            fed.set()

    feeder = threading.Thread(target=feed, daemon=True)
    try:
        # Evidence that the speed layer is done with the range: its realtime rows are final there.
        wait_for(lakehouse, {BRONZE: len(first)}, job, log)
        _wait_until(
            lambda: gold_differs(lakehouse, realtime, (FROM, TO)), job, log, "realtime gold rows of the range"
        )
        wait_for_checkpoints(checkpoints, 1, job, log)
        gold_before = DeltaTable(str(lakehouse / GOLD)).version()

        feeder.start()
        fed.wait(timeout=60)
        started_ms = time.time() * 1000
        fix = run_cli("reconcile", "--from", _iso(FROM), "--to", _iso(TO), "--fix", env=env, timeout=120)
        ended_ms = time.time() * 1000
        reconciled.set()
        feeder.join(timeout=120)
        assert not feeder_errors, feeder_errors
        assert not feeder.is_alive(), "the feeder did not finish"

        # The stream goes on to the end of its input: every window as expected (batch rows included).
        expected = {**realtime, **{w: everything[w] for w in missed}}
        _wait_until(lambda: gold_differs(lakehouse, expected), job, log, "final gold")
        wait_for(lakehouse, {BRONZE: len(events)}, job, log)
        # Two more completed checkpoints: a commit that changed anything late would show now.
        wait_for_checkpoints(checkpoints, 2, job, log)
        assert job.poll() is None, log.read_text()[-4000:]
    finally:
        stop.set()
        reconciled.set()
        kill_group(job)
        if feeder.is_alive():
            feeder.join(timeout=30)

    # The CLI fixed exactly the windows the stream missed, and says gold matches bronze now.
    out = fix.stdout
    assert "still open" not in out, out  # the whole range was closed: nothing clipped
    named = out.split("differ above the threshold 0: ")[1].splitlines()[0]
    assert named == ", ".join(_iso(w) for w in missed), out
    assert "reconcile: re-checked: gold matches bronze now" in out, out

    # The job ran on in one attempt: no restart, no restore, and it committed before and after the fix.
    flink = flink_log(flink_logs)
    assert "Completed checkpoint" in flink and RESTARTING not in flink and not RESTORED.search(flink)
    assert "resuming from checkpoint" not in log.read_text()
    bronze_during = [h for h in stream_commits(lakehouse, BRONZE) if started_ms <= h["timestamp"] <= ended_ms]
    assert bronze_during, "the stream committed nothing to bronze while the CLI ran: no race"
    history = DeltaTable(str(lakehouse / GOLD)).history()
    [fixed_at] = [int(h["version"]) for h in history if "lakestream.backfill" in h]
    gold_commits = stream_commits(lakehouse, GOLD)
    stream_after = [h for h in gold_commits if int(h["version"]) > fixed_at]
    gold_during = [h for h in gold_commits if started_ms <= h["timestamp"] <= ended_ms]
    assert stream_after, "the speed layer committed nothing after the fix"
    assert [h for h in stream_commits(lakehouse, BRONZE) if h["timestamp"] > ended_ms], "bronze stopped"

    # Every gold version from before the race to the end: one row per window; from the fix on, the
    # batch rows exactly as the fix wrote them, whatever the stream committed around them.
    table = DeltaTable(str(lakehouse / GOLD))
    last = table.version()
    batch_rows: dict[datetime, dict[str, Any]] | None = None
    for v in range(gold_before, last + 1):
        table.load_as_version(v)
        rows = table.to_pyarrow_table().to_pylist()
        starts = [r["window_start"] for r in rows]
        assert len(starts) == len(set(starts)), f"gold version {v} has a window twice"
        batch = {r["window_start"]: r for r in rows if r["layer"] == LAYER_BATCH}
        if v < fixed_at:
            assert not batch, f"gold version {v}, before the fix, has batch rows"
        elif batch_rows is None:
            batch_rows = batch
        else:
            assert batch == batch_rows, f"gold version {v} changed a batch row"

    # The end: batch rows are the missed windows, recomputed from every event of theirs; every other
    # window is the speed layer's, equal to the reference over the events it counted.
    final = gold_rows(lakehouse)
    assert batch_rows is not None and sorted(batch_rows) == missed
    assert {w: final[w]["layer"] for w in final} == {
        w: LAYER_BATCH if w in missed else LAYER_REALTIME for w in expected
    }
    got = metrics_of(list(final.values()))
    assert got == expected
    assert {w: got[w] for w in in_range} == in_range  # the range now equals a recompute from bronze
    assert all(r["source_version"] is not None for r in batch_rows.values())

    # Silver is exact: one row per order, equal to the independent oracle.
    silver_rows = read_silver(lakehouse)
    silver = {r["order_id"]: {f: r[f] for f in RESOLVED if r[f] is not None} for r in silver_rows}
    assert len(silver) == len(silver_rows)
    assert silver == expected_silver([said(e) for e in events])
    print(
        f"reconcile --fix took {(ended_ms - started_ms) / 1000:.1f}s; the stream committed bronze "
        f"{len(bronze_during)} and gold {len(gold_during)} time(s) meanwhile, gold {len(stream_after)} "
        "time(s) after the fix "
        f"(gold versions {gold_before}..{last}, fix at {fixed_at})"
    )


def obstruct_next_commit(table: Path) -> Path:
    """A directory where ``table``'s next commit file goes: delta-rs cannot write that version, sees
    it as taken, finds no commit there to reconcile with and gives up with ``CommitFailedError``; the
    table stays readable. Returns the directory (remove it to let commits through again)."""
    version = DeltaTable(str(table)).version()
    while True:
        version += 1
        path = table / "_delta_log" / f"{version:020d}.json"
        try:
            path.mkdir()
            return path
        except FileExistsError:  # a commit landed meanwhile
            continue


def test_bronze_commits_failing_past_the_retry_budget_fail_over_and_leave_exact_tables(
    kafka: str, lakehouse: Path, tmp_path: Path
) -> None:
    topics, env = setup_topics(kafka, tmp_path, lakehouse)
    flink_logs = tmp_path / "flink-log"
    env["FLINK_LOG_DIR"] = str(flink_logs)
    records, half = build_stream()
    three_quarters = half + (len(records) - half) // 2
    log = tmp_path / "ingest.log"
    checkpoints = tmp_path / "checkpoints"
    produce(kafka, topics, records[:half])
    started = time.monotonic()
    proc = start_unbounded(env, log)
    try:
        counts = expected_counts(records[:half])
        counts[SILVER] = len(expected_silver([r.ev for r in records[:half] if r.kind == "valid"]))
        wait_for(lakehouse, counts, proc, log)

        before = flink_log(flink_logs)
        blocked = obstruct_next_commit(lakehouse / BRONZE)
        committed = table_rows(lakehouse, BRONZE)
        produce(kafka, topics, records[half:three_quarters])
        obstructed = time.monotonic()

        # Evidence: a bronze commit spent its retries, the task failed, Flink restored the job.
        def not_failed_over() -> str | None:
            during = flink_log(flink_logs).removeprefix(before)
            spent = EXHAUSTED.search(during)
            if spent is None:
                return "no commit spent its retries"
            return None if RESTORED.search(during, spent.end()) else f"no restore after: {spent.group(0)}"

        _wait_until(not_failed_over, proc, log, "a commit exhausting its retries, then a restore", timeout=90)
        failed = time.monotonic()
        last_before = completed_checkpoint(checkpoints)
        # Input was in flight: nothing got past the obstruction, and bronze lacks what was produced.
        assert DeltaTable(str(lakehouse / BRONZE)).version() == int(blocked.name.split(".")[0]) - 1
        in_flight = expected_counts(records[:three_quarters])[BRONZE]
        assert table_rows(lakehouse, BRONZE) == committed < in_flight, "nothing was in flight"

        blocked.rmdir()
        produce(kafka, topics, records[three_quarters:])
        wait_for(lakehouse, expected_counts(records), proc, log, timeout=120)
        caught_up = time.monotonic()
        # Two more completed checkpoints after everything landed: a late replay would show now.
        wait_for_checkpoints(checkpoints, 2, proc, log)
    finally:
        kill_group(proc)
    assert_tables(lakehouse, records)
    for table in (*expected_counts(records), SILVER, GOLD):
        assert_no_orphans(lakehouse / table)  # what the failed attempts staged was committed or removed

    during = flink_log(flink_logs).removeprefix(before)
    spent = EXHAUSTED.search(during)
    assert spent is not None, during[-4000:]
    checkpoint, app_id, attempts = int(spent.group(1)), spent.group(2).split(", ")[0], int(spent.group(3))
    assert app_id.startswith(f"lakestream-ingest/{BRONZE}:"), spent.group(0)
    assert attempts == RetryPolicy().max_attempts  # the sinks' whole budget (not configurable)
    assert "Failed to commit transaction" in during  # delta-rs' own error, retried by the committer
    # The restored subtask's OPEN committed what the failed commit had left staged (DESIGN.md 3).
    recovered = re.compile(rf"{re.escape(app_id)}: committing \d+ manifest\(s\) of checkpoint <= (\d+)")
    opened = [int(r) for r in recovered.findall(during, spent.end())]
    assert opened and opened[0] >= checkpoint, during[-4000:]
    # It failed over in the same job, restoring a checkpoint completed before the failure, and went on.
    restored = [int(n) for n in RESTORED.findall(during)]
    assert during.count(RESTARTING) >= 1 and restored, during[-4000:]
    assert max(restored) <= last_before < completed_checkpoint(checkpoints)
    assert not JOB_FAILED.search(during), during[-4000:]
    assert "resuming from checkpoint" not in log.read_text()  # one run: no new process was needed
    print(
        f"bronze obstructed {obstructed - started:.0f}s after the start; failed over after "
        f"{failed - obstructed:.0f}s (restored checkpoints {sorted(set(restored))}); caught up "
        f"{caught_up - failed:.0f}s later; {time.monotonic() - started:.0f}s in all"
    )
