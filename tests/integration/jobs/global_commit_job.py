"""A table written by two subtasks in global commit mode, with an injected failure (own JVM per run).

usage: global_commit_job.py TABLE_URI CHECKPOINT_DIR ROWS FAIL_AFTER MARKER_FILE
Rate-limited ticks (checkpointed, so a restore replays exactly) become rows ``(id, v)`` at parallelism
2; each writer subtask stages them with a count per checkpoint and emits committables to one global
committer. Writer subtask 0 fails once (the marker file makes it once per test) after FAIL_AFTER rows.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyflink.common import Row, Types, WatermarkStrategy
from pyflink.datastream import ProcessFunction, RuntimeContext
from pyflink.datastream.connectors import Source
from pyflink.java_gateway import get_gateway

from lakestream.config import FlinkConfig
from runtime.checkpoint_markers import (
    DATA,
    END_OF_INPUT,
    KIND_FIELD,
    PAYLOAD_FIELD,
    PRECOMMIT,
    with_checkpoint_markers,
)
from runtime.flink_env import build_env
from sinks.flink.delta_sink import DeltaSinkSpec, TableWriters
from sinks.flink.global_commit import COMMITTABLE_TYPE, commit_globally, committable_row
from sinks.table_spec import TableSpec

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


class GlobalWriter(ProcessFunction):  # type: ignore[misc]
    def __init__(self, spec: DeltaSinkSpec, fail_after: int, marker: str) -> None:
        self.tables = TableWriters({"t": spec})
        self.fail_after = fail_after
        self.marker = marker

    def open(self, runtime_context: RuntimeContext) -> None:
        self.subtask = runtime_context.get_index_of_this_subtask()
        self.seen = 0
        self.rows = 0
        self.tables.register_metrics(runtime_context)

    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterator[Row]:
        if value[KIND_FIELD] == DATA:
            self.seen += 1
            if self.subtask == 0 and self.seen == self.fail_after and not Path(self.marker).exists():
                Path(self.marker).write_text("failed once\n")
                raise RuntimeError(f"injected failure after {self.fail_after} rows")
            self.tables.add("t", value[PAYLOAD_FIELD])
            self.rows += 1
            return
        counters = None
        if value[KIND_FIELD] in (PRECOMMIT, END_OF_INPUT):
            counters, self.rows = {"t": {"rows": self.rows}}, 0
        for committable in self.tables.apply(value, counters=counters).committables:
            yield committable_row(committable)

    def close(self) -> None:
        self.tables.close()


def main() -> None:
    table_uri, ckpt, rows, fail_after, marker = sys.argv[1:6]
    cfg = FlinkConfig(
        parallelism=2,
        checkpoint_interval=timedelta(milliseconds=300),
        restart_attempts=5,  # the injected failure, plus slack for slow deployments on a loaded machine
        restart_delay=timedelta(milliseconds=200),
    )
    # A spare TaskManager: PyFlink's Beam teardown can fail fatally while the failed attempt's tasks are
    # cancelled (README, Limitations), and a MiniCluster never replaces a TaskManager it lost; the
    # restart then takes the job's slots on the spare one instead of waiting 5 minutes for slots that
    # never come back. Each TaskManager has the job's slots, and a job still short of them fails within
    # 30 s rather than after ``slot.request.timeout``.
    extra = {
        "minicluster.number-of-taskmanagers": "2",
        "taskmanager.numberOfTaskSlots": str(cfg.parallelism),
        "resourcemanager.standalone.start-up-time": "30 s",
    }
    env = build_env(cfg, checkpoint_dir=ckpt, extra=extra)
    jvm = get_gateway().jvm
    j_source = jvm.io.lakestream.flink.epoch.TickGenerator.source(int(rows), 400.0)
    ticks = env.from_source(Source(j_source), WatermarkStrategy.no_watermarks(), "ticks", Types.LONG())
    ticks = ticks.uid("gc-ticks")
    rows_ds = (
        ticks.map(lambda i: Row(i, f"v{i}"), output_type=Types.ROW([Types.LONG(), Types.STRING()]))
        .name("rows")
        .uid("gc-rows")
    )
    spec = DeltaSinkSpec(
        table=TableSpec(table_uri=table_uri, schema=SCHEMA), app_prefix="gc/t", commit="global"
    )
    marked = with_checkpoint_markers(rows_ds, name="writer markers", uid="gc-writer-markers")
    committables = (
        marked.process(GlobalWriter(spec, int(fail_after), marker), output_type=COMMITTABLE_TYPE)
        .name("writer")
        .uid("gc-writer")
    )
    commit_globally(committables, [spec], name="committer", uid="gc-committer")
    env.execute("global-commit")


if __name__ == "__main__":
    main()
