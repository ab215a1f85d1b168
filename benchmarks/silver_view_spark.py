"""Check the merge-on-read SQL view in Spark SQL: ``python -m benchmarks.silver_view_spark``.

Writes a small merge-on-read silver with the real sink writer (changes mode) and folds at two points,
then runs ``view_sql(dialect="spark")`` in Spark over the two Delta tables (delta-spark) and compares
the result with ``read_current`` and with the reference fold of every event (``SILVER_MERGE.fold_rows``).
Spark and its Delta jars come with ``make bench`` (the ``bench`` extra, Maven profile ``spark-bench``),
so this runs with the benchmarks, not in ``make test``; exit 1 on a difference.
"""

from __future__ import annotations

import argparse
import glob
import random
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa

from lakestream import paths
from lakestream.silver import (
    CHANGE_SEQ,
    LAST_EVENT_TIME,
    RESOLVED_FIELDS,
    SILVER_MERGE,
    SILVER_MOR_MERGE,
    SILVER_MOR_SCHEMA,
    SILVER_SCHEMA,
)
from merge_on_read.fold_changes import fold_once
from merge_on_read.table import MergeOnReadTable, read_current, view_sql
from sinks.table_spec import TableSpec
from sinks.writer import TwoPhaseDeltaWriter

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)


def partial_row(rng: random.Random, eid: str) -> dict[str, Any]:
    """A silver partial row of a random order setting one to three fields at a random second."""
    row: dict[str, Any] = dict.fromkeys(SILVER_SCHEMA.names)
    row["order_id"] = f"o{rng.randint(1, 6)}"
    when = T0 + timedelta(seconds=rng.randint(0, 5))  # many ties
    for name in rng.sample(list(RESOLVED_FIELDS), rng.randint(1, 3)):
        if name in ("amount", "paid_amount"):
            value: Any = Decimal(rng.randint(0, 999)) / 100
        elif name == "created_time":
            value = T0
        elif name == "deleted":
            value = rng.random() < 0.5
        else:
            value = f"{name}-{rng.randint(0, 3)}"
        row[name], row[f"{name}__ts"], row[f"{name}__eid"] = value, when, eid
    row[LAST_EVENT_TIME], row["last_event_id"] = when, eid
    return row


def build(root: Path, seed: int) -> tuple[MergeOnReadTable, list[dict[str, Any]]]:
    """A merge-on-read silver of eight checkpoints, folded after the third and the sixth."""
    rng = random.Random(seed)
    table = MergeOnReadTable(
        str(root / "orders"), str(root / "orders_changes"), SILVER_MOR_SCHEMA, SILVER_MOR_MERGE, CHANGE_SEQ
    )
    writer = TwoPhaseDeltaWriter(
        spec=TableSpec(
            table_uri=table.changes_uri,
            schema=SILVER_SCHEMA,
            mode="changes",
            merge=SILVER_MERGE,
            sequence_column=CHANGE_SEQ,
        ),
        app_prefix="check",
    )
    writer.open(restored_checkpoint_id=None, run_id="r1", subtask=0, parallelism=1)
    applied: list[dict[str, Any]] = []
    for n in range(1, 9):
        rows = [partial_row(rng, f"e{n}-{i}") for i in range(15)]
        applied += rows
        writer.write(pa.RecordBatch.from_pylist(rows, schema=SILVER_SCHEMA))
        writer.prepare(n)
        writer.commit(n)
        if n in (3, 6):
            fold_once(table, retention=timedelta(0) if n == 3 else timedelta(hours=1))
    return table, applied


def comparable(rows: pa.Table) -> list[dict[str, Any]]:
    """Silver columns only, sorted by order: what the layouts must agree on."""
    out: list[dict[str, Any]] = (
        rows.select(SILVER_SCHEMA.names).cast(SILVER_SCHEMA).sort_by("order_id").to_pylist()
    )
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the check for ``--seeds`` random tables; print one line each."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seeds", type=int, default=3)
    args = p.parse_args(argv)
    jars = sorted(glob.glob(str(paths.PROJECT_ROOT / "jvm/target/lib/spark/*.jar")))
    if not jars:
        print("no Spark jars in jvm/target/lib/spark: run `make bench` once (Maven profile spark-bench)")
        return 2
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.jars", ",".join(jars))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    failed = 0
    try:
        for seed in range(args.seeds):
            root = Path(tempfile.mkdtemp(prefix="silver-view-"))
            table, applied = build(root, seed)
            spark.read.format("delta").load(table.snapshot_uri).createOrReplaceTempView("snapshot")
            spark.read.format("delta").load(table.changes_uri).createOrReplaceTempView("changes")
            viewed = [r.asDict() for r in spark.sql(view_sql(table, dialect="spark")).collect()]
            got = comparable(pa.Table.from_pylist(viewed, schema=SILVER_MOR_SCHEMA))
            reference = SILVER_MERGE.fold_rows(applied, SILVER_SCHEMA)
            want = comparable(pa.Table.from_pylist(list(reference.values()), schema=SILVER_SCHEMA))
            same = got == want == comparable(read_current(table))
            failed += not same
            print(
                f"seed {seed}: Spark SQL view {'equals' if same else 'DIFFERS FROM'} the reference fold "
                f"({len(got)} orders, {len(applied)} events)"
            )
    finally:
        spark.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
