"""Child process: the seeds' own pipeline as the baseline, on the same topics.

Spark Structured Streaming reads the four topics, standardises them with Spark SQL, and in
``foreachBatch`` appends every record to bronze and MERGEs the batch into silver with the per-field
event-time guard (``source.F__ts >= target.F__ts``, null never erases), both idempotent with
``txnAppId``/``txnVersion`` (the batch id). Bounded with ``trigger(availableNow=True)``. It does less than
lakestream (no quarantine/review/late tables, no per-partition late decision, no keyed dedup state across
batches), so it is a generous baseline.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakestream.silver import RESOLVED_FIELDS as FIELDS  # the same silver columns as lakestream's

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topics", required=True, help="comma-separated source=topic")
    p.add_argument("--root", required=True)
    p.add_argument("--jars", required=True, help="comma-separated jar paths")
    p.add_argument("--result", required=True)
    p.add_argument("--max-offsets-per-trigger", type=int, default=200_000)
    a = p.parse_args(argv)
    topics = dict(kv.split("=", 1) for kv in a.topics.split(","))
    root = Path(a.root)

    t0 = time.monotonic()
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("seed-pipeline-baseline")
        .config("spark.jars", a.jars)
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.databricks.delta.schema.autoMerge.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    jvm_start = time.monotonic() - t0

    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", a.bootstrap)
        .option("subscribe", ",".join(topics.values()))
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(a.max_offsets_per_trigger))
        .load()
    )
    v = F.col("value").cast("string")

    def j(path: str) -> Any:
        return F.get_json_object(v, path)

    t_db, t_pay, t_log, t_beh = (topics[s] for s in ("orders_db", "payments", "logistics", "behaviour"))
    topic = F.col("topic")
    order_id = (
        F.when(topic == t_db, j("$.order_id"))
        .when(topic == t_pay, j("$.orderId"))
        .when(topic == t_log, j("$.order"))
        .when(topic == t_beh, j("$.orderId"))
    )
    event_time = (
        F.when(topic == t_db, F.to_utc_timestamp(F.to_timestamp(j("$.updated_at")), "Asia/Shanghai"))
        .when(topic.isin(t_pay), F.timestamp_millis(j("$.paidAt").cast("long")))
        .when(topic == t_log, F.to_timestamp(j("$.ts")))
        .when(topic == t_beh, F.timestamp_millis(j("$.ts").cast("long")))
    )
    is_db = topic == t_db
    std = raw.select(
        F.sha2(F.concat(topic, F.lit("/"), F.col("value").cast("string")), 256).alias("event_id"),
        order_id.alias("order_id"),
        event_time.alias("event_time"),
        F.when(is_db, j("$.user_id")).alias("user_id"),
        F.when(is_db, j("$.status")).when(topic == t_pay, F.lit("paid")).alias("status"),
        F.when(is_db, j("$.amount").cast("decimal(18,2)")).alias("amount"),
        F.when(topic == t_pay, (j("$.payMoney").cast("long") / 100).cast("decimal(18,2)")).alias(
            "paid_amount"
        ),
        F.when(is_db, j("$.address")).alias("address"),
        F.when(topic == t_log, j("$.state")).alias("logistics_state"),
        F.when(is_db & (j("$.op") == "c"), event_time).alias("created_time"),
        F.when(is_db, j("$.op") == "d").alias("deleted"),
        topic.alias("topic"),
        F.col("partition"),
        F.col("offset"),
        F.col("value").alias("raw"),
    )

    bronze = str(root / "bronze")
    silver = str(root / "silver")
    app_id = "seed-baseline"
    silver_ready = {"created": False}

    def merge_batch(df, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        df = df.persist()
        # bronze: every record, idempotent per batch id
        (
            df.write.format("delta")
            .mode("append")
            .option("txnAppId", f"{app_id}/bronze")
            .option("txnVersion", batch_id)
            .save(bronze)
        )
        valid = df.where("order_id IS NOT NULL AND event_time IS NOT NULL").dropDuplicates(["event_id"])
        aggs = []
        for f in FIELDS:
            ts = F.when(F.col(f).isNotNull(), F.col("event_time"))
            aggs += [F.max_by(F.col(f), ts).alias(f), F.max(ts).alias(f"{f}__ts")]
        aggs += [F.max("event_time").alias("last_event_time")]
        src = valid.groupBy("order_id").agg(*aggs)
        if not silver_ready["created"]:
            src.limit(0).write.format("delta").mode("ignore").save(silver)
            silver_ready["created"] = True
        sets: dict[str, str | Column] = {}
        for f in FIELDS:
            guard = f"s.{f}__ts IS NOT NULL AND (t.{f}__ts IS NULL OR s.{f}__ts >= t.{f}__ts)"
            sets[f] = f"CASE WHEN {guard} THEN s.{f} ELSE t.{f} END"
            sets[f"{f}__ts"] = f"CASE WHEN {guard} THEN s.{f}__ts ELSE t.{f}__ts END"
        sets["last_event_time"] = "GREATEST(t.last_event_time, s.last_event_time)"
        # Idempotent MERGE: Delta's SQL-conf form of txnAppId/txnVersion (applies to DML).
        spark.conf.set("spark.databricks.delta.write.txnAppId", f"{app_id}/silver")
        spark.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
        (
            DeltaTable.forPath(spark, silver)
            .alias("t")
            .merge(src.alias("s"), "t.order_id = s.order_id")
            .whenMatchedUpdate(set=sets)
            .whenNotMatchedInsertAll()
            .execute()
        )
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")
        df.unpersist()

    from delta.tables import DeltaTable

    t1 = time.monotonic()
    q = (
        std.writeStream.foreachBatch(merge_batch)
        .option("checkpointLocation", str(root / "_checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    run = time.monotonic() - t1

    rows = {
        "bronze": DeltaTable.forPath(spark, bronze).toDF().count(),
        "silver": DeltaTable.forPath(spark, silver).toDF().count(),
        "silver_distinct": DeltaTable.forPath(spark, silver).toDF().select("order_id").distinct().count(),
    }
    progress = q.recentProgress
    batches = len(progress)
    # Time inside micro-batches (planning, reading, both writes), without query start-up: the
    # counterpart of lakestream's "sustained" rate (first read to everything committed).
    processing = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000
    Path(a.result).write_text(
        json.dumps(
            {
                "jvm_start_s": round(jvm_start, 2),
                "run_s": round(run, 2),
                "processing_s": round(processing, 2),
                "rows": rows,
                "batches": batches,
            }
        ),
        encoding="utf-8",
    )
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
