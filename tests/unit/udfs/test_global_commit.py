"""The Python operators of global commit mode, without Flink: resolve subtasks emit silver's committables
as rows, one ``GlobalCommitterFunction`` commits them on its own markers, and each checkpoint's counts of
late events, duplicates and silver changes land in that commit's ``lakestream.counters``."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyflink.common import Row

from lakestream.adapters import AdapterSettings, get_adapter
from lakestream.quality import classify
from lakestream.silver import SILVER_MERGE, SILVER_SCHEMA
from lakestream.standard import BRONZE_SCHEMA, LATE_SCHEMA, StandardEvent
from runtime.checkpoint_markers import COMMIT, DATA, END_OF_INPUT, OPEN, PRECOMMIT
from sinks.committable import Committable
from sinks.flink.delta_sink import (
    COMMIT_GAUGES,
    STAGER_GAUGES,
    DeltaSinkFunction,
    DeltaSinkSpec,
    TableWriters,
)
from sinks.flink.global_commit import GlobalCommitterFunction
from sinks.table_spec import TableSpec
from storage.delta_log import COUNTERS_KEY
from tests.support.delta_tables import staging_leftovers, table_version, txn_version
from tests.support.metrics import MetricsContext
from udfs.ingest_resolve import LATE, SILVER, ResolveBatches
from udfs.ingest_rows import NOT_LATE, bronze_row, pack_events

UTC = timezone.utc
NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)


def payment(pay_id: str, order: str | None, minute: int) -> StandardEvent:
    body: dict[str, Any] = {"payId": pay_id, "payMoney": 100, "paidAt": int(NOW.timestamp() * 1000) + minute}
    if order is not None:
        body["orderId"] = order
    event = get_adapter("payments")(
        json.dumps(body).encode(), topic="p", partition=0, offset=0, settings=AdapterSettings()
    )
    assert isinstance(event, StandardEvent)
    return classify(event, now=NOW + timedelta(minutes=1))


def gated(
    events: list[StandardEvent], late: frozenset[int] = frozenset(), duplicates: frozenset[int] = frozenset()
) -> tuple[Any, ...]:
    """A de-dup operator output row: event ``i`` late (behind watermark 1) when ``i in late``, a
    re-delivery when ``i in duplicates``."""
    rows = [bronze_row(e, NOW) for e in events]
    batch = pa.RecordBatch.from_pylist(
        [dict(zip(BRONZE_SCHEMA.names, r, strict=True)) for r in rows], BRONZE_SCHEMA
    )
    late_wms = [1 if i in late else NOT_LATE for i in range(len(events))]
    fresh = [i not in duplicates for i in range(len(events))]
    return ([pack_events(batch)], late_wms, fresh, len(events))


def specs(tmp_path: Path) -> dict[str, DeltaSinkSpec]:
    return {
        LATE: DeltaSinkSpec(
            table=TableSpec(table_uri=str(tmp_path / "late"), schema=LATE_SCHEMA), app_prefix="late"
        ),
        SILVER: DeltaSinkSpec(
            table=TableSpec(
                table_uri=str(tmp_path / "silver"), schema=SILVER_SCHEMA, mode="merge", merge=SILVER_MERGE
            ),
            app_prefix="silver",
            commit="global",
        ),
    }


def marker(kind: int, n: int, subtask: int, parallelism: int) -> Row:
    return Row(kind, n, subtask, parallelism, "run-1", None)


def test_resolve_subtasks_stage_silver_and_one_committer_commits_each_checkpoint(tmp_path: Path) -> None:
    tables = specs(tmp_path)
    silver = tmp_path / "silver"
    resolvers = [ResolveBatches(tables=tables) for _ in range(2)]
    contexts = [MetricsContext() for _ in resolvers]
    for i, (fn, ctx) in enumerate(zip(resolvers, contexts, strict=True)):
        fn.open(ctx)
        assert list(fn.process_element(marker(OPEN, -1, i, 2), None)) == []
    committer = GlobalCommitterFunction([tables[SILVER]])
    committer_ctx = MetricsContext()
    committer.open(committer_ctx)
    assert list(committer.process_element(marker(OPEN, -1, 0, 1), None)) == []

    def checkpoint(n: int, batches: dict[int, tuple[Any, ...]]) -> list[str]:
        for i, payload in batches.items():
            assert list(resolvers[i].process_element(Row(DATA, -1, -1, -1, None, payload), None)) == []
        rows = [
            r for i, fn in enumerate(resolvers) for r in fn.process_element(marker(PRECOMMIT, n, i, 2), None)
        ]
        for r in rows:  # the committables reach the committer through its marker operator as DATA
            assert list(committer.process_element(Row(DATA, -1, -1, -1, None, r), None)) == []
        assert list(committer.process_element(marker(PRECOMMIT, n, 0, 1), None)) == []
        for i, fn in enumerate(resolvers):
            assert list(fn.process_element(marker(COMMIT, n, i, 2), None)) == []  # late commits, silver not
        return list(committer.process_element(marker(COMMIT, n, 0, 1), None))

    # Checkpoint 1: subtask 0 has a late event and an event without order; subtask 1 a duplicate.
    [report] = checkpoint(
        1,
        {
            0: gated(
                [payment("P1", "o1", 0), payment("P2", "o2", 1), payment("P3", None, 2)], late=frozenset({1})
            ),
            1: gated([payment("P4", "o3", 0), payment("P4", "o3", 0)], duplicates=frozenset({1})),
        },
    )
    assert report.startswith("silver: checkpoint 1: table version 1")
    assert table_version(silver) == 1
    [entry] = DeltaTable(str(silver)).history(1)
    assert entry["lakestream.appVersions"] == {"silver:run-1:0": 1, "silver:run-1:1": 1}
    assert entry[COUNTERS_KEY] == {"events_duplicate": 1, "events_late": 1, "silver_changes": 3}
    assert DeltaTable(str(silver)).to_pyarrow_table().num_rows == 3
    assert txn_version(tmp_path / "late", "late:run-1:0") == 1  # late stays per subtask

    # Checkpoint 2: only a re-delivery (a counters-only commit); then the input ends.
    checkpoint(2, {0: gated([payment("P1", "o1", 0)], duplicates=frozenset({0}))})
    [entry] = DeltaTable(str(silver)).history(1)
    assert entry["operation"] == "WRITE" and entry[COUNTERS_KEY] == {
        "events_duplicate": 1,
        "events_late": 0,
        "silver_changes": 0,
    }
    assert entry["lakestream.appVersions"] == {"silver:run-1:0": 2}
    list(resolvers[1].process_element(Row(DATA, -1, -1, -1, None, gated([payment("P5", "o5", 3)])), None))
    ends = [list(fn.process_element(marker(END_OF_INPUT, -1, i, 2), None)) for i, fn in enumerate(resolvers)]
    assert ends[0] == []  # nothing left in subtask 0
    [end_row] = ends[1]
    assert Committable._make(end_row).checkpoint_id == 3  # the checkpoint after the last one it prepared
    assert list(committer.process_element(Row(DATA, -1, -1, -1, None, end_row), None)) == []
    [report] = committer.process_element(marker(END_OF_INPUT, -1, 0, 1), None)
    assert txn_version(silver, "silver:run-1:1") == 2**63 - 1
    totals: dict[str, int] = {}
    for h in DeltaTable(str(silver)).history():
        for k, v in (h.get(COUNTERS_KEY) or {}).items():
            totals[k] = totals.get(k, 0) + v
    assert totals == {"events_duplicate": 2, "events_late": 1, "silver_changes": 4}
    # The Flink counters agree here (one attempt, nothing replayed).
    flink = {k: sum(c.group.counters[k].count for c in contexts) for k in ("events_late", "silver_changes")}
    assert flink == {k: totals[k] for k in flink}
    assert "events_duplicate" not in contexts[0].group.counters  # the de-dup operator's Flink counter
    assert staging_leftovers(silver) == []

    # Silver's commit gauges belong to the committer; the resolve subtasks report only silver's buffer.
    resolve_gauges = {g[-1] for g in contexts[0].group.gauges if g[:2] == ("delta_table", "silver")}
    committer_gauges = {g[-1] for g in committer_ctx.group.gauges if g[:2] == ("delta_table", "silver")}
    assert resolve_gauges == set(STAGER_GAUGES) and committer_gauges == set(COMMIT_GAUGES)
    late_gauges = {g[-1] for g in contexts[0].group.gauges if g[:2] == ("delta_table", "late")}
    assert late_gauges == set(COMMIT_GAUGES) | set(STAGER_GAUGES)
    assert committer_ctx.group.gauges[("delta_table", "silver", "commits")]() == 3
    assert committer_ctx.group.gauges[("delta_table", "silver", "rowsCommitted")]() == 4
    for fn in resolvers:
        fn.close()
    committer.close()


def test_global_tables_need_the_committables_path(tmp_path: Path) -> None:
    tables = TableWriters(specs(tmp_path))
    with pytest.raises(ValueError, match="commit globally: call apply"):
        tables.on_marker(marker(OPEN, -1, 0, 1))
    out = tables.apply(marker(OPEN, -1, 0, 1))
    assert out.committables == []
    with pytest.raises(ValueError, match="at PRECOMMIT or END_OF_INPUT"):
        tables.apply(marker(COMMIT, 1, 0, 1), counters={SILVER: {"x": 1}})
    with pytest.raises(ValueError, match="does not write: nope"):
        tables.apply(marker(PRECOMMIT, 1, 0, 1), counters={"nope": {"x": 1}})
    with pytest.raises(ValueError, match="commit must be"):
        DeltaSinkSpec(table=TableSpec(table_uri="t", schema=LATE_SCHEMA), app_prefix="a", commit="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="commit='global'"):
        GlobalCommitterFunction([specs(tmp_path)[LATE]])
    with pytest.raises(ValueError, match="commits per subtask"):
        DeltaSinkFunction(specs(tmp_path)[SILVER])  # so sink_to_delta refuses it when the graph is built
    committer = GlobalCommitterFunction([specs(tmp_path)[SILVER]])
    with pytest.raises(ValueError, match="must run at 1"):
        list(committer.process_element(marker(OPEN, -1, 0, 2), None))
