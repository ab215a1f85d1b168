"""Child process: one lakestream ingest run (its own JVM), timed; the parent samples its RSS.

Tuning knobs that have no config key yet are applied here from the outside, without touching the
pipeline code: extra Flink settings (``--set key=value``), the sink's Arrow batch size
(``--batch-rows``) and the thread-mode fix (``--pythonpath-fix``: ``python.pythonpath`` = this venv's
site-packages, see the README bench section).
"""

from __future__ import annotations

import argparse
import json
import os
import site
import sys
import time
from pathlib import Path
from typing import Any

T_PROCESS = time.monotonic()


def _patch(settings_extra: dict[str, str], *, pythonpath_fix: bool, batch_rows: int | None) -> None:
    import dataclasses

    import runtime.flink_env as fr
    import sinks.flink.delta_sink as ds

    original = fr.flink_settings

    def flink_settings(
        cfg: Any, *, checkpoint_dir: str | None = None, state_backend: str = "hashmap"
    ) -> dict[str, str]:
        s = original(cfg, checkpoint_dir=checkpoint_dir, state_backend=state_backend)
        if pythonpath_fix:
            s["python.pythonpath"] = os.pathsep.join(site.getsitepackages())
        s.update(settings_extra)
        return s

    fr.flink_settings = flink_settings
    if batch_rows is not None:
        base = ds.DeltaSinkSpec

        def spec(**kw: Any) -> Any:
            return dataclasses.replace(base(**kw), batch_rows=batch_rows)

        ds.DeltaSinkSpec = spec  # type: ignore[assignment,misc]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--lakehouse", required=True)
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--group-id", required=True)
    p.add_argument("--unbounded", action="store_true")
    p.add_argument("--batch-rows", type=int)
    p.add_argument("--pythonpath-fix", action="store_true")
    p.add_argument("--set", action="append", default=[], help="extra Flink setting key=value")
    p.add_argument("--result", required=True)
    a = p.parse_args(argv)

    from flink_jobs.ingest import build_ingest_job
    from lakestream.config import load_config
    from sources.flink.kafka_input import snapshot_end_offsets

    extra = dict(kv.split("=", 1) for kv in a.set)
    _patch(extra, pythonpath_fix=a.pythonpath_fix, batch_rows=a.batch_rows)
    cfg = load_config(None)
    cfg = cfg.replace("lakehouse", root=a.lakehouse)
    cfg = cfg.replace(
        "kafka", bootstrap_servers=a.bootstrap, group_id=a.group_id, starting_offsets="earliest"
    )
    topics = sorted(set(cfg.kafka.topics.values()))
    end_offsets = None if a.unbounded else snapshot_end_offsets(a.bootstrap, topics)

    t0 = time.monotonic()
    from runtime.flink_env import launch_gateway

    launch_gateway(cfg.flink.jvm_options, archive_kind="ingest" if cfg.flink.class_archive else None)
    jvm_start = time.monotonic() - t0
    t1 = time.monotonic()
    env = build_ingest_job(
        cfg,
        bootstrap_servers=a.bootstrap,
        bounded=not a.unbounded,
        end_offsets=end_offsets,
        checkpoint_dir=a.checkpoint_dir,
    )
    build = time.monotonic() - t1
    result: dict[str, Any] = {
        "mode": cfg.flink.python_execution_mode,
        "parallelism": cfg.flink.parallelism,
        "checkpoint_interval_s": cfg.flink.checkpoint_interval.total_seconds(),
        "bundle_size": cfg.flink.bundle_size,
        "bundle_time_ms": int(cfg.flink.bundle_time.total_seconds() * 1000),
        "batch_rows": a.batch_rows,
        "extra": extra,
        "jvm_start_s": round(jvm_start, 2),
        "build_s": round(build, 2),
        "python_import_s": round(t0 - T_PROCESS, 2),
    }
    Path(a.result).write_text(json.dumps(result), encoding="utf-8")
    t2 = time.monotonic()
    result["execute_start_epoch_s"] = time.time()
    env.execute("bench-ingest")
    result["execute_end_epoch_s"] = time.time()
    result["execute_s"] = round(time.monotonic() - t2, 2)
    Path(a.result).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
