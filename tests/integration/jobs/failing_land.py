"""Landing graph with an injected failure, for the exactly-once tests (run as a script in its own JVM).

usage: failing_land.py BOOTSTRAP TOPIC TABLE_URI CHECKPOINT_DIR FAIL_AFTER MARKER_FILE
The map fails once (the marker file makes it once per test, across restarts) after FAIL_AFTER records
on subtask 0, and sleeps a little per record so that several checkpoints complete before and after.
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from pathlib import Path

from pyflink.datastream import MapFunction, RuntimeContext

from flink_jobs.land import LANDING_SCHEMA, to_landing_row
from lakestream.config import FlinkConfig
from runtime.flink_env import build_env
from sinks.flink.delta_sink import DeltaSinkSpec, sink_to_delta
from sinks.table_spec import TableSpec
from sources.flink.kafka_input import kafka_records


class FailOnce(MapFunction):
    def __init__(self, fail_after: int, marker: str) -> None:
        self.fail_after = fail_after
        self.marker = marker
        self.seen = 0

    def open(self, runtime_context: RuntimeContext) -> None:
        self.seen = 0

    def map(self, value):
        self.seen += 1
        time.sleep(0.002)
        if self.seen == self.fail_after and not Path(self.marker).exists():
            Path(self.marker).write_text("failed once\n")
            raise RuntimeError(f"injected failure after {self.fail_after} records")
        return to_landing_row(value)


def main() -> None:
    bootstrap, topic, table_uri, ckpt, fail_after, marker = sys.argv[1:7]
    cfg = FlinkConfig(
        parallelism=2,
        checkpoint_interval=timedelta(milliseconds=300),
        restart_attempts=3,
        restart_delay=timedelta(milliseconds=200),
    )
    env = build_env(cfg, checkpoint_dir=ckpt)
    records = kafka_records(
        env,
        bootstrap_servers=bootstrap,
        topics=[topic],
        group_id="failing-land",
        starting_offsets="earliest",
        bounded=True,
        name="kafka records",
        uid="fail-kafka",
    )
    rows = records.map(FailOnce(int(fail_after), marker)).name("fail once").uid("fail-once")
    spec = DeltaSinkSpec(
        table=TableSpec(table_uri=table_uri, schema=LANDING_SCHEMA, partition_by=()),
        app_prefix="failing-land/raw",
    )
    sink_to_delta(rows, spec, name="delta raw", uid="fail-delta")
    env.execute("failing-land")


if __name__ == "__main__":
    main()
