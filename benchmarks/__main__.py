"""``python -m benchmarks``: lakestream ingest end to end vs baselines (same run, same data, same machine).

Measures (each a few times; spread reported):
  baselines   raw Kafka consume (kafka-python, confluent-kafka), raw delta-rs Arrow append of the same rows,
              the seeds' Spark Structured Streaming pipeline (foreachBatch MERGE, txnAppId/txnVersion)
  ingest      lakestream bounded ingest, process vs thread mode, rows verified exactly once; at each
              ``--parallelisms`` value (same data), every job vertex's busy ratio from Flink's REST API,
              its ceiling rate and a projection to ``--project-parallelism`` (``benchmarks.busy``)
  latency     unbounded, fixed input rate: producer send -> visible in silver, p50/p95/p99
  freshness   unbounded at each checkpoint interval on a seeded silver, half the events updates spread over
              it: send -> readable in bronze and in silver's read path (``benchmarks.freshness``); and
              bounded ingest at each of those intervals: sustained rate as a ratio of the longest's
  object store the bounded ingest (once per repeat, after the local runs) and the visibility run with the
              lakehouse on a local S3 server the bench starts (``benchmarks.s3_variant``): sustained rate
              as a ratio to the local folder's, visibility p99 against checkpoint interval + 3 s
  memory      peak RSS per process kind (client, JVM, Python workers by operator); the unbounded
              memory run (``--memory-minutes``, at the configured dedup_ttl unless ``--memory-ttl``):
              RSS per kind over time, de-dup entries and bytes per entry (RocksDB metrics, local dir)
Writes ``results.json`` and ``results.md`` to ``--out`` and refreshes the README bench section.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks import report, requirements, s3_variant
from benchmarks.s3_variant import BenchStore
from benchmarks.unbounded import child_env as _child_env
from benchmarks.unbounded import env_overrides, ingest_run_cmd
from benchmarks.workload import (
    Workload,
    distinct_count,
    first_ingest_epoch_s,
    ingest_time_quantiles,
    last_commit_epoch_s,
    prepare,
    table_rows,
)
from devtools.processes import kill_group
from lakestream import paths
from lakestream.time import parse_duration

ROOT = paths.PROJECT_ROOT


def _fresh_dir(work: Path, name: str) -> Path:
    run_dir = work / name
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    return run_dir


def _measured_run(
    cmd: list[str],
    run_dir: Path,
    *,
    env: dict[str, str],
    cwd: Path,
    timeout: float,
    cpu_series: list[tuple[float, dict[str, float]]] | None = None,
) -> dict[str, Any]:
    """Run one pipeline process (own session), sample its tree's RSS, merge the result file it wrote.

    ``cpu_series``: filled with the tree's cumulative CPU seconds per kind of process over the run
    (``procs.RssSampler.cpu_series``)."""
    from benchmarks.procs import RssSampler

    t0 = time.monotonic()
    with open(run_dir / "log.txt", "wb") as log:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        sampler = RssSampler(proc.pid).start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            rc = -9
        mem = sampler.stop()
    if cpu_series is not None:
        cpu_series.extend(sampler.cpu_series)
    out: dict[str, Any] = {"rc": rc, "wall_s": round(time.monotonic() - t0, 2), "memory": mem}
    result_file = run_dir / "result.json"
    if result_file.exists():
        out.update(json.loads(result_file.read_text()))
    if rc != 0 or not result_file.exists():
        out["error"] = (run_dir / "log.txt").read_text(errors="replace")[-3000:]
    return out


def run_ingest(
    work: Path,
    bootstrap: str,
    wl: Workload,
    *,
    label: str,
    mode: str,
    env_over: dict[str, str],
    sets: list[str],
    batch_rows: int | None,
    verify: bool = True,
    timeout: float = 1800,
    tree: Path = ROOT,
    sample_busy: bool = False,
    store: BenchStore | None = None,
) -> dict[str, Any]:
    """One bounded lakestream run in its own process (its own JVM), RSS sampled, tables verified.

    ``sample_busy``: the MiniCluster's REST endpoint on a known port, every vertex's busy, back-pressured
    and idle time polled once a second (``benchmarks.busy``). ``store``: the tables (and checkpoints, if
    it says so) on the bench's S3 server, read back from its folder; its JVM's CPU over the run recorded.
    """
    from benchmarks import busy
    from benchmarks.flink_rest import RestSampler, free_port, rest_settings
    from benchmarks.procs import cpu_between
    from benchmarks.s3_variant import local_place

    run_dir = _fresh_dir(work, f"ingest-{label}")
    place = store.place(run_dir) if store is not None else local_place(run_dir)
    rest: RestSampler | None = None
    if sample_busy:
        port = free_port()
        sets = [*sets, *rest_settings(port)]
        rest = RestSampler(port, select=busy.selects, interval=1.0)
    cmd = ingest_run_cmd(
        bootstrap,
        run_dir,
        group_id=f"bench-{label}-{time.time_ns()}",
        mode=mode,
        sets=sets,
        batch_rows=batch_rows,
        place=place,
    )
    env = _child_env(LAKESTREAM__FLINK__PYTHON_EXECUTION_MODE=mode, **{**place.env, **env_over})
    if rest is not None:
        rest.start()
    cpu_series: list[tuple[float, dict[str, float]]] = []
    with ExitStack() as sampling:
        server_cpu = sampling.enter_context(store.cpu_series()) if store is not None else []
        out = {
            "label": label,
            "mode": mode,
            **_measured_run(cmd, run_dir, env=env, cwd=tree, timeout=timeout, cpu_series=cpu_series),
        }
    if store is not None:
        out["lakehouse_uri"] = place.lakehouse
        out["checkpoints_uri"] = place.checkpoints
        if server_cpu:
            out["s3_server_cpu_s"] = round(
                server_cpu[-1][1][s3_variant.SERVER] - server_cpu[0][1][s3_variant.SERVER], 2
            )
    samples = rest.stop() if rest is not None else []
    if rest is not None:
        # Summarised below once the tables tell the run's steady part; kept raw for re-analysis.
        out["busy"] = {"rest": rest.summary(), "samples": samples, "vertex_meta": rest.vertices}
    if out["rc"] != 0 or "execute_s" not in out:
        out.setdefault("error", (run_dir / "log.txt").read_text(errors="replace")[-3000:])
        return out
    out["events_per_s"] = round(wl.events / out["execute_s"])
    if verify:
        lh = place.lakehouse_view
        rows = {
            t: table_rows(lh, t)
            for t in (
                "bronze/order_events",
                "quarantine/order_events",
                "review/order_events",
                "late/order_events",
                "silver/orders",
            )
        }
        bronze_unique = distinct_count(lh, "bronze/order_events", ["topic", "partition", "offset"])
        silver_unique = distinct_count(lh, "silver/orders", ["order_id"])
        out["rows"] = rows
        out["exactly_once"] = {
            "bronze_plus_quarantine_eq_produced": rows["bronze/order_events"]
            + rows["quarantine/order_events"]
            == wl.events,
            "bronze_no_duplicate_coordinates": bronze_unique == rows["bronze/order_events"],
            "silver_one_row_per_order": silver_unique == rows["silver/orders"],
            "silver_rows_eq_expected_orders": rows["silver/orders"] == wl.orders_expected,
        }
        out["exactly_once_ok"] = all(out["exactly_once"].values())
        out["lakehouse"] = str(lh)
        first = first_ingest_epoch_s(lh)
        last = last_commit_epoch_s(lh, list(rows))
        if first is not None and last is not None and "execute_end_epoch_s" in out:
            # "Sustained": first record read -> everything committed, i.e. the last table commit (the
            # issue's definition). Deploy and worker start come before it, Flink's teardown after it;
            # the rate to the end of ``execute()`` (teardown included) is kept next to it.
            out["startup_s"] = round(first - out["execute_start_epoch_s"], 2)
            out["sustained_s"] = round(last - first, 2)
            out["teardown_s"] = round(out["execute_end_epoch_s"] - last, 2)
            out["sustained_events_per_s"] = round(wl.events / out["sustained_s"])
            out["to_execute_end_events_per_s"] = round(wl.events / (out["execute_end_epoch_s"] - first))
            # What the sustained part cost the machine: CPU seconds of the job's processes (the broker
            # is not one of them), per event and as cores kept busy on average.
            cpu = cpu_between(cpu_series, first, last)
            out["sustained_cpu_s"] = cpu
            out["cpu_us_per_event"] = round(sum(cpu.values()) * 1e6 / wl.events, 1)
            out["cores_busy"] = round(sum(cpu.values()) / (last - first), 2)
            if server_cpu:
                # The local S3 server shares the machine's cores: its CPU over the same span, apart.
                server = cpu_between(server_cpu, first, last).get(s3_variant.SERVER, 0.0)
                out["s3_server_sustained_cpu_s"] = server
                out["s3_server_cpu_us_per_event"] = round(server * 1e6 / wl.events, 1)
            if rest is not None:
                q = ingest_time_quantiles(lh, (0.1, 0.9))
                steady = None if q is None or q[1] <= q[0] else (q[0], q[1], 0.8 * wl.events / (q[1] - q[0]))
                summary = busy.summarize(
                    samples, rest.vertices, steady=steady, sustained=(first, last, wl.events / (last - first))
                )
                out["busy"] = {**summary, **out["busy"]}
    return out


def run_steady(
    work: Path,
    bootstrap: str,
    *,
    events: int,
    repeat: int,
    mode: str,
    sets: list[str],
    batch_rows: int | None,
    tree: Path = ROOT,
) -> dict[str, Any]:
    """Steady-state rate: bounded runs over a backlog long enough for several mid-run checkpoints.

    The 1M-event runs end after one or two checkpoints, so their rates include start and end of input;
    here ``events`` fresh-keyed events (``benchmarks.steady``) fill topics of their own and each run's
    rate is taken between its first and last mid-run checkpoint commits.
    """
    from benchmarks import steady
    from benchmarks.unbounded import source_topics
    from benchmarks.workload import PARTITIONS

    topics, env = source_topics(bootstrap, "steady.", partitions=PARTITIONS)
    t0 = time.monotonic()
    sent = steady.produce_input(bootstrap, topics, events)
    produce_s = round(time.monotonic() - t0, 1)
    out: dict[str, Any] = {"events": sent, "generate_and_produce_s": produce_s, "runs": []}
    print(f"  steady input: {sent} events in {out['generate_and_produce_s']}s", flush=True)
    wl = Workload(events=sent, per_topic={}, malformed=0, orders_expected=0, produce_s=0.0, generate_s=0.0)
    for rep in range(repeat):
        label = f"steady-{mode}-{rep}"
        r = run_ingest(
            work,
            bootstrap,
            wl,
            label=label,
            mode=mode,
            env_over=env,
            sets=sets,
            batch_rows=batch_rows,
            verify=False,
            tree=tree,
        )
        if "execute_s" in r:
            lh = work / f"ingest-{label}" / "lakehouse"
            ingested = table_rows(lh, "bronze/order_events") + table_rows(lh, "quarantine/order_events")
            r["all_ingested"] = ingested == sent
            r["steady"] = steady.measure(lh)
        out["runs"].append(r)
        print(
            f"  lakestream steady #{rep}: {r.get('steady')}, all ingested {r.get('all_ingested')}"
            + (f"\n{r['error']}" if "error" in r else ""),
            flush=True,
        )
    return out


def run_spark(
    work: Path, bootstrap: str, topics: dict[str, str], *, label: str, timeout: float = 1800
) -> dict[str, Any]:
    run_dir = _fresh_dir(work, f"spark-{label}")
    result_file = run_dir / "result.json"
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.spark_pipeline",
        "--bootstrap",
        bootstrap,
        "--topics",
        ",".join(f"{k}={v}" for k, v in topics.items()),
        "--root",
        str(run_dir / "lakehouse"),
        "--jars",
        ",".join(str(p) for p in requirements.spark_jars()),
        "--result",
        str(result_file),
    ]
    env = _child_env(SPARK_LOCAL_IP="127.0.0.1")
    return {"label": label, **_measured_run(cmd, run_dir, env=env, cwd=ROOT, timeout=timeout)}


def silver_visible_in() -> str:
    """The table where a new order first becomes readable in silver, in the layout the bench's jobs run
    with (the environment's, else the default): merge-on-read's changes table (its snapshot changes
    only at folds), or ``silver/orders`` in copy-on-write."""
    from lakestream.config import load_config

    merge_on_read = load_config(None, environ=dict(os.environ)).tables.silver_layout == "merge_on_read"
    return "silver/orders_changes" if merge_on_read else "silver/orders"


def run_latency(
    work: Path,
    bootstrap: str,
    *,
    mode: str,
    rate: int,
    seconds: float,
    checkpoint_interval: str,
    sets: list[str],
    tree: Path = ROOT,
    store: BenchStore | None = None,
) -> dict[str, Any]:
    """Unbounded ingest on fresh topics; paced producer starts once the first checkpoint completed.

    ``store``: the tables (and checkpoints, if it says so) on the bench's S3 server, silver polled
    through its API."""
    from benchmarks import latency
    from benchmarks.procs import RssSampler
    from benchmarks.s3_variant import local_place
    from benchmarks.unbounded import unbounded_ingest

    out: dict[str, Any] = {"mode": mode, "checkpoint_interval": checkpoint_interval}
    with unbounded_ingest(
        work,
        bootstrap,
        label=f"latency-{mode}-{rate}" if store is None else f"latency-s3-{mode}-{rate}",
        topic_prefix="lat",
        mode=mode,
        env_over={"LAKESTREAM__FLINK__CHECKPOINT_INTERVAL": checkpoint_interval},
        sets=sets,
        tree=tree,
        place_for=local_place if store is None else store.place,
    ) as run:
        sampler = RssSampler(run.proc.pid, interval=1.0).start()
        try:
            if not run.wait_first_checkpoint():
                out["error"] = run.log_tail()
                return out
            sent: list[float] = []
            seen: list[tuple[float, int]] = []
            stop = threading.Event()
            prod = threading.Thread(
                target=latency.paced_producer,
                args=(bootstrap, run.topics["orders_db"]),
                kwargs={
                    "rate": rate,
                    "seconds": seconds,
                    "first_id": 500_000_000,
                    "sent": sent,
                    "stop": stop,
                },
                daemon=True,
            )
            prod.start()
            drain = 30.0
            place = run.place or local_place(run.run_dir)
            latency.poll_visibility(
                place.table(silver_visible_in()),
                base_rows=0,
                until=time.monotonic() + seconds + drain,
                seen=seen,
                storage_options=place.options or None,
            )
            stop.set()
            prod.join(timeout=10)
            out.update(latency.summarize(rate, seconds, sent, seen))
        finally:
            out["memory"] = sampler.stop()
    return out


def run_gold_latency(
    work: Path,
    bootstrap: str,
    *,
    mode: str,
    rate: int,
    seconds: float,
    checkpoint_interval: str,
    sets: list[str],
    tree: Path = ROOT,
) -> dict[str, Any]:
    """The speed layer's freshness: a gold row shows all its window's events within checkpoint interval
    + 2 s of the watermark passing the window's end (1-minute windows, 2 s out-of-orderness and
    idleness, event times = the send clock)."""
    from datetime import datetime, timedelta

    from benchmarks import latency
    from benchmarks.unbounded import unbounded_ingest

    window, bound = timedelta(minutes=1), timedelta(seconds=2)
    out: dict[str, Any] = {"mode": mode, "checkpoint_interval": checkpoint_interval, "rate": rate}
    env_over = {
        "LAKESTREAM__FLINK__CHECKPOINT_INTERVAL": checkpoint_interval,
        "LAKESTREAM__GOLD__WINDOW": '"1m"',
        "LAKESTREAM__GOLD__ENABLED": "true",
        "LAKESTREAM__EVENT_TIME__MAX_OUT_OF_ORDERNESS": '"2s"',
        "LAKESTREAM__EVENT_TIME__IDLENESS_TIMEOUT": '"2s"',
    }
    with unbounded_ingest(
        work,
        bootstrap,
        label=f"gold-latency-{mode}-{rate}",
        topic_prefix="goldlat",
        mode=mode,
        env_over=env_over,
        sets=sets,
        tree=tree,
    ) as run:
        if not run.wait_first_checkpoint():
            out["error"] = run.log_tail()
            return out
        event_times: list[datetime] = []
        seen: list[tuple[float, dict[datetime, int]]] = []
        stop = threading.Event()
        prod = threading.Thread(
            target=latency.gold_paced_producer,
            args=(bootstrap, run.topics["orders_db"]),
            kwargs={
                "rate": rate,
                "seconds": seconds,
                "first_id": 700_000_000,
                "event_times": event_times,
                "stop": stop,
            },
            daemon=True,
        )
        prod.start()
        latency.poll_gold(
            run.run_dir / "lakehouse" / "gold" / "order_metrics_5m",
            until=time.monotonic() + seconds + 30,
            seen=seen,
        )
        stop.set()
        prod.join(timeout=10)
        interval = float(checkpoint_interval.rstrip("s"))
        out.update(latency.gold_visibility(event_times, seen, window=window, bound=bound))
        out["budget_s"] = interval + 2
        out["within_budget"] = (
            out["max_lag_s"] is not None and out["max_lag_s"] <= interval + 2 and not (out["windows_missing"])
        )
    return out


def run_gold_compare(
    work: Path,
    bootstrap: str,
    wl: Workload,
    *,
    repeat: int,
    mode: str,
    sets: list[str],
    batch_rows: int | None,
) -> dict[str, Any]:
    """Bounded ingest with ``gold.enabled`` false and true, paired in each repetition (same data)."""
    out = run_variants(
        work,
        bootstrap,
        wl,
        {"off": {"LAKESTREAM__GOLD__ENABLED": "false"}, "on": {"LAKESTREAM__GOLD__ENABLED": "true"}},
        repeat=repeat,
        mode=mode,
        sets=sets,
        batch_rows=batch_rows,
        label="gold",
    )
    for key in ("events_per_s", "sustained_events_per_s"):
        med = out[key]
        out[f"{key}_cost_pct"] = round(100 * (1 - med["on"] / med["off"]), 1) if med["off"] else None
    return out


def interval_ratios(rates: dict[str, float], base: str) -> dict[str, float | None]:
    """Each interval's rate as a ratio of ``base``'s (None where a rate is missing)."""
    b = rates.get(base) or 0
    return {k: round(v / b, 3) if b and v else None for k, v in rates.items()}


def run_interval_throughput(
    work: Path,
    bootstrap: str,
    wl: Workload,
    intervals: list[str],
    *,
    repeat: int,
    mode: str,
    sets: list[str],
    batch_rows: int | None,
) -> dict[str, Any]:
    """Bounded ingest at each checkpoint interval (merge-on-read silver, as the freshness sweep), paired in
    each repetition on the same data; medians, and each interval's sustained rate as a ratio of the
    longest interval's (the cost of committing more often)."""
    out = run_variants(
        work,
        bootstrap,
        wl,
        {
            iv: {
                "LAKESTREAM__FLINK__CHECKPOINT_INTERVAL": json.dumps(iv),
                "LAKESTREAM__TABLES__SILVER_LAYOUT": '"merge_on_read"',
            }
            for iv in intervals
        },
        repeat=repeat,
        mode=mode,
        sets=sets,
        batch_rows=batch_rows,
        label="interval",
    )
    base = max(intervals, key=lambda iv: parse_duration(iv, key="--freshness-intervals").total_seconds())
    out["base"] = base
    out["sustained_ratio"] = interval_ratios(out["sustained_events_per_s"], base)
    return out


def _peak_total(run: dict[str, Any]) -> float | None:
    peak = (run.get("memory") or {}).get("peak_mib")
    return peak.get("total") if isinstance(peak, dict) else peak


def parse_variants(specs: list[str]) -> dict[str, dict[str, str]]:
    """``--compare-env LABEL:KEY=VALUE`` entries as environment overrides per variant, in given order."""
    out: dict[str, dict[str, str]] = {}
    for spec in specs:
        label, sep, assignment = spec.partition(":")
        key, eq, value = assignment.partition("=")
        if not (sep and eq and label and key.startswith("LAKESTREAM__")):
            raise SystemExit(
                f"--compare-env {spec!r}: expected LABEL:LAKESTREAM__SECTION__KEY=VALUE, e.g. "
                "'heap512m:LAKESTREAM__FLINK__JVM_OPTIONS=[\"-Xmx512m\"]'"
            )
        out.setdefault(label, {})[key] = value
    if len(out) < 2:
        raise SystemExit("--compare-env: give at least two variants (labels) to compare")
    return out


def run_variants(
    work: Path,
    bootstrap: str,
    wl: Workload,
    variants: dict[str, dict[str, str]],
    *,
    repeat: int,
    mode: str,
    sets: list[str],
    batch_rows: int | None,
    label: str = "variant",
) -> dict[str, Any]:
    """Bounded ingest once per variant (environment overrides) in each repetition, same data: paired runs
    on a noisy machine; medians of the rates, of the CPU per event and of each run's peak RSS per
    variant."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for rep in range(repeat):
        for name, env_over in variants.items():
            r = run_ingest(
                work,
                bootstrap,
                wl,
                label=f"{label}-{name}-{rep}",
                mode=mode,
                env_over=env_over,
                sets=sets,
                batch_rows=batch_rows,
                sample_busy=True,
            )
            runs[name].append(r)
            print(
                f"  {label} {name} #{rep}: {r.get('events_per_s')} events/s, sustained "
                f"{r.get('sustained_events_per_s')} events/s, peak RSS "
                f"{_peak_total(r)} MiB, CPU {r.get('cpu_us_per_event')} us/event, exactly once "
                f"{r.get('exactly_once_ok')}"
                + (f"\n    busy: {_busy_line(r['busy'])}" if "busy" in r else "")
                + (f"\n{r['error']}" if "error" in r else ""),
                flush=True,
            )
    out: dict[str, Any] = {"variants": variants, "runs": runs}
    for key in ("events_per_s", "sustained_events_per_s", "cpu_us_per_event"):
        out[key] = {k: statistics.median([r[key] for r in rs if r.get(key)] or [0]) for k, rs in runs.items()}
    # a run's memory summary is peak MiB per process kind and of the whole tree ("total")
    out["peak_rss_mib"] = {
        k: statistics.median([t for r in rs if (t := _peak_total(r))] or [0]) for k, rs in runs.items()
    }
    out["exactly_once_ok"] = {k: all(r.get("exactly_once_ok") for r in rs) for k, rs in runs.items()}
    return out


def _ingest_line(what: str, r: dict[str, Any]) -> str:
    """What one bounded ingest run printed as it finished."""
    return (
        f"  lakestream {what}: {r.get('events_per_s')} events/s, "
        f"sustained {r.get('sustained_events_per_s')} events/s "
        f"({r.get('to_execute_end_events_per_s')} to the end of execute(), teardown "
        f"{r.get('teardown_s')}s), execute {r.get('execute_s')}s "
        f"(start-up {r.get('startup_s')}s), "
        f"jvm {r.get('jvm_start_s')}s, exactly once {r.get('exactly_once_ok')}, "
        f"peak {r['memory']['peak_mib']}, CPU {r.get('cpu_us_per_event')} us/event "
        f"({r.get('cores_busy')} cores; seconds by process: {r.get('sustained_cpu_s')})"
        + (f"\n    busy: {_busy_line(r['busy'])}" if "busy" in r else "")
        + (f"\n{r['error']}" if "error" in r else "")
    )


def _busy_line(b: dict[str, Any]) -> str:
    """One line per run: window rate and each vertex's mean / max busy ratio."""
    if "error" in b or "vertices" not in b:
        return str(b.get("error", "no summary (the run failed)"))
    vs = "; ".join(
        f"{v['name'][:48]} (p={v['parallelism']}) {v.get('busy_mean')}/{v.get('busy_max')}"
        for v in b.get("vertices", [])
    )
    rate, polls = b.get("window_events_per_s"), b.get("window_polls")
    return f"window {rate} events/s over {polls} polls; busy mean/max: {vs}"


def spread(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {}
    return {
        "median": round(statistics.median(xs), 1),
        "min": round(min(xs), 1),
        "max": round(max(xs), 1),
        "n": len(xs),
    }


def _serve_bench(a: argparse.Namespace) -> dict[str, Any]:
    from benchmarks import serve_latency

    res = serve_latency.run(
        Path(a.out),
        days=a.serve_days,
        requests=a.serve_requests,
        repeat=a.serve_repeat or a.repeat,
        load_clients=a.serve_clients,
        load_requests=a.serve_load_requests,
        load_seconds=a.serve_load_seconds,
        baseline_tree=Path(a.serve_baseline_tree) if a.serve_baseline_tree else None,
    )
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "serve.json").write_text(json.dumps(res, indent=2, default=str), encoding="utf-8")
    md = serve_latency.markdown(res)
    if not a.no_readme:
        serve_latency.update_readme(ROOT / "benchmarks" / "RESULTS.md", md)
    print(md, flush=True)
    return res


def _serve_only(a: argparse.Namespace) -> int:
    """``--only serve``: the serving benchmark alone (writes serve.json, refreshes its README block)."""
    if a.serve_days < 8:
        print("benchmarks: --serve-days must be at least 8 (a week and the last day)", file=sys.stderr)
        return 2
    _serve_bench(a)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--skip-spark", action="store_true")
    p.add_argument("--out", default=str(paths.STATE_DIR / "bench"))
    p.add_argument("--repeat", type=int, default=2, help="runs per measurement (spread reported)")
    p.add_argument(
        "--modes",
        default="process",
        help="process,thread: lakestream refuses thread mode with a clear error (README: why); a thread run "
        "records that error",
    )
    p.add_argument(
        "--latency-rate", type=int, default=10_000, help="events/s, visibility run (target: 10,000)"
    )
    p.add_argument("--latency-seconds", type=float, default=60)
    p.add_argument("--skip-latency", action="store_true")
    p.add_argument(
        "--freshness-minutes",
        type=float,
        default=1.0,
        help="freshness at size (benchmarks.freshness): input minutes per checkpoint interval (0 = skip)",
    )
    p.add_argument("--freshness-orders", type=int, default=1_000_000, help="seeded silver orders")
    p.add_argument("--freshness-intervals", default="500ms,1s,2s,5s,10s", help="checkpoint intervals")
    p.add_argument(
        "--skip-interval-throughput",
        action="store_true",
        help="leave out bounded ingest at each of --freshness-intervals (sustained rate vs the longest)",
    )
    p.add_argument(
        "--memory-minutes",
        type=float,
        default=0,
        help="memory-flat run: unbounded ingest at steady input for M minutes, first mode only (0 = skip)",
    )
    p.add_argument("--memory-rate", type=int, default=2000, help="events/s of the memory-flat run")
    p.add_argument(
        "--memory-ttl",
        help="state TTL of the memory-flat run (every event_time.*_ttl, e.g. 2m); default: the configured "
        "dedup_ttl (30m), so the run needs --memory-minutes above it to see expiry",
    )
    p.add_argument(
        "--memory-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="configuration override of the memory-flat run's job, e.g. "
        "LAKESTREAM__TABLES__SILVER_LAYOUT=merge_on_read (repeatable)",
    )
    p.add_argument(
        "--parallelisms",
        default="1,2",
        help="bounded ingest at each flink.parallelism (same data; the configured one is the main ingest "
        "measurement), every vertex's busy ratio from Flink's REST API ('' = no busy sampling)",
    )
    p.add_argument(
        "--project-parallelism",
        type=int,
        default=8,
        help="parallelism (one core per subtask) the measured per-vertex ceilings are projected to",
    )
    p.add_argument(
        "--steady-events",
        type=int,
        default=2_500_000,
        help="backlog of the steady-state runs (several checkpoints long; 0 = skip)",
    )
    p.add_argument("--set", action="append", default=[], help="extra Flink setting for lakestream runs")
    p.add_argument("--batch-rows", type=int)
    p.add_argument(
        "--no-readme", action="store_true", help="leave the generated block of benchmarks/RESULTS.md as it is"
    )
    p.add_argument(
        "--gold-compare",
        action="store_true",
        help="only the speed layer's cost: bounded ingest with gold.enabled false vs true, paired per repeat",
    )
    p.add_argument(
        "--compare-env",
        action="append",
        default=[],
        metavar="LABEL:KEY=VALUE",
        help="only a paired comparison of variants: bounded ingest per variant in each repeat, the variant "
        "given as environment overrides (e.g. 'heap512m:LAKESTREAM__FLINK__JVM_OPTIONS=[\"-Xmx512m\"]')",
    )
    p.add_argument(
        "--gold-latency-seconds",
        type=float,
        default=0,
        help="unbounded run of this length measuring gold freshness after the watermark (0 = skip)",
    )
    p.add_argument("--gold-latency-rate", type=int, default=2000, help="events/s of the gold freshness run")
    p.add_argument("--thread-tree", help="run thread-mode lakestream from this source tree (candidate fixes)")
    p.add_argument(
        "--only",
        choices=("all", "serve"),
        default="all",
        help="serve: only the serving benchmark (lakestream serve's JSON latency, no Kafka or Spark)",
    )
    p.add_argument("--skip-serve", action="store_true", help="leave out the serving benchmark")
    p.add_argument(
        "--skip-object-store",
        action="store_true",
        help="leave out the object-store variant (bounded ingest after each repeat's local runs and a "
        "visibility run, with the lakehouse on a local S3 server the bench starts)",
    )
    p.add_argument(
        "--object-store-checkpoints",
        choices=("store", "local"),
        default="store",
        help="where the object-store variant keeps Flink's checkpoints: on the S3 server too, or in the "
        "run's local folder",
    )
    p.add_argument("--serve-days", type=int, default=365, help="days of 5-minute gold windows to serve")
    p.add_argument("--serve-requests", type=int, default=200, help="requests per kind of range and run")
    p.add_argument("--serve-repeat", type=int, help="serving runs (fresh server each; default: --repeat)")
    p.add_argument("--serve-clients", type=int, default=32, help="concurrent clients of the serving load run")
    p.add_argument(
        "--serve-load-requests", type=int, default=100, help="requests per client of the serving load run"
    )
    p.add_argument(
        "--serve-load-seconds", type=float, default=60.0, help="time limit of one serving load run"
    )
    p.add_argument(
        "--serve-baseline-tree",
        help="another checkout whose `lakestream serve` is loaded in the same run as this tree's "
        "(e.g. `git worktree add /tmp/before REV`)",
    )
    a = p.parse_args(argv)
    variants = parse_variants(a.compare_env) if a.compare_env else None
    intervals = [x.strip() for x in a.freshness_intervals.split(",") if x.strip()]
    try:
        memory_env = env_overrides(a.memory_env, "--memory-env")
    except ValueError as exc:
        p.error(str(exc))
    if a.only == "serve":
        return _serve_only(a)
    try:
        requirements.check(spark=not a.skip_spark)
    except requirements.BenchSetupError as exc:
        print(f"benchmarks: {exc}", file=sys.stderr)
        return 2

    from devtools.kafka_broker import LocalKafka
    from lakestream.config import load_config

    out_dir = Path(a.out)
    work = out_dir / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cfg = load_config(None, environ={})
    modes = [m for m in a.modes.split(",") if m]
    parallelisms = sorted({int(x) for x in a.parallelisms.split(",") if x.strip()})
    base_p = cfg.flink.parallelism
    # A source tree with candidate pipeline fixes (see README bench section) for the thread-mode runs.
    trees = {m: ROOT for m in modes}
    if a.thread_tree:
        trees["thread"] = Path(a.thread_tree).resolve()
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_at_start": os.getloadavg(),
        },
        "settings": {
            "thread_tree": a.thread_tree,
            "events": a.events,
            "repeat": a.repeat,
            "modes": modes,
            "extra_flink": a.set,
            "batch_rows": a.batch_rows,
            "latency": {"rate": a.latency_rate, "seconds": a.latency_seconds, "skipped": a.skip_latency},
            "freshness": {
                "minutes": a.freshness_minutes,
                "orders": a.freshness_orders,
                "intervals": a.freshness_intervals,
            },
            "memory": {"minutes": a.memory_minutes, "rate": a.memory_rate, "ttl": a.memory_ttl},
            "parallelisms": parallelisms,
            "project_parallelism": a.project_parallelism,
            "steady_events": a.steady_events,
            "flink": {k: str(v) for k, v in dataclasses.asdict(cfg.flink).items()},
            "object_store": {"skipped": a.skip_object_store, "checkpoints": a.object_store_checkpoints},
        },
    }
    t_all = time.monotonic()
    with LocalKafka.start(data_dir=work / "kafka", heap="1g") as broker, ExitStack() as services:
        bootstrap = broker.bootstrap_servers
        print(f"kafka at {bootstrap}; producing ~{a.events} events ...", flush=True)
        wl, _events = prepare(bootstrap, cfg, a.events)
        results["workload"] = dataclasses.asdict(wl)
        from sources.flink.kafka_input import snapshot_end_offsets

        # Events per Kafka partition (fresh topics: end offset = count), for the parallelism projection.
        ends = snapshot_end_offsets(bootstrap, sorted(wl.per_topic))
        results["partitions"] = {f"{t}:{part}": n for (t, part), n in sorted(ends.items())}
        topics = sorted(wl.per_topic)
        print(f"  {wl.events} events in {wl.produce_s}s (generated in {wl.generate_s}s)", flush=True)

        if variants:
            results["compare"] = run_variants(
                work,
                bootstrap,
                wl,
                variants,
                repeat=a.repeat,
                mode=modes[0],
                sets=a.set,
                batch_rows=a.batch_rows,
            )
            summary = {k: v for k, v in results["compare"].items() if k not in ("runs", "variants")}
            print(f"  compared: {json.dumps(summary)}", flush=True)
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / "compare-results.json").write_text(
                json.dumps(results, indent=2, default=str), encoding="utf-8"
            )
            return 0
        if a.gold_compare or a.gold_latency_seconds > 0:
            if a.gold_compare:
                results["gold_compare"] = run_gold_compare(
                    work, bootstrap, wl, repeat=a.repeat, mode=modes[0], sets=a.set, batch_rows=a.batch_rows
                )
                cost = {k: v for k, v in results["gold_compare"].items() if k != "runs"}
                print(f"  gold cost: {json.dumps(cost)}", flush=True)
            if a.gold_latency_seconds > 0:
                results["gold_latency"] = run_gold_latency(
                    work,
                    bootstrap,
                    mode=modes[0],
                    rate=a.gold_latency_rate,
                    seconds=a.gold_latency_seconds,
                    checkpoint_interval=str(cfg.flink.checkpoint_interval.total_seconds()) + "s",
                    sets=a.set,
                )
                print(f"  gold freshness: {json.dumps(results['gold_latency'])[:1500]}", flush=True)
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / "gold-results.json").write_text(
                json.dumps(results, indent=2, default=str), encoding="utf-8"
            )
            return 0

        base: dict[str, Any] = {"kafka_python": [], "confluent_kafka": []}
        for _ in range(a.repeat):
            from benchmarks.baselines import consume_confluent, consume_kafka_python

            base["kafka_python"].append(consume_kafka_python(bootstrap, topics, wl.events))
            base["confluent_kafka"].append(consume_confluent(bootstrap, topics, wl.events))
            print(
                f"  consume: kafka-python {base['kafka_python'][-1]['events_per_s']}/s, "
                f"confluent {base['confluent_kafka'][-1]['events_per_s']}/s",
                flush=True,
            )

        store: BenchStore | None = None
        if not a.skip_object_store:
            store = services.enter_context(
                s3_variant.started_store(work, checkpoints_on_store=a.object_store_checkpoints == "store")
            )
            results["object_store"] = {
                **store.settings(),
                "checkpoint_interval_s": cfg.flink.checkpoint_interval.total_seconds(),
                "ingest": [],
            }
            print(f"  S3 server at {store.endpoint.url} for the object-store variant", flush=True)
        ingest: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
        # Runs at the other parallelisms (first mode only), interleaved with the main ones.
        ingest_p: dict[str, list[dict[str, Any]]] = {str(x): [] for x in parallelisms if x != base_p}
        for rep in range(a.repeat):
            for mode in modes:
                extra_p = [x for x in parallelisms if x != base_p] if mode == modes[0] else []
                for par in sorted({base_p, *extra_p}):
                    r = run_ingest(
                        work,
                        bootstrap,
                        wl,
                        label=f"{mode}-{rep}" if par == base_p else f"{mode}-p{par}-{rep}",
                        mode=mode,
                        env_over={} if par == base_p else {"LAKESTREAM__FLINK__PARALLELISM": str(par)},
                        sets=a.set,
                        batch_rows=a.batch_rows,
                        tree=trees[mode],
                        sample_busy=mode == modes[0] and par in parallelisms,
                    )
                    (ingest[mode] if par == base_p else ingest_p[str(par)]).append(r)
                    print(_ingest_line(f"{mode} p={par} #{rep}", r), flush=True)
            if store is not None:
                # Right after the local runs of this repeat, at the configured parallelism: pairs.
                r = run_ingest(
                    work,
                    bootstrap,
                    wl,
                    label=f"{modes[0]}-s3-{rep}",
                    mode=modes[0],
                    env_over={},
                    sets=a.set,
                    batch_rows=a.batch_rows,
                    tree=trees[modes[0]],
                    sample_busy=base_p in parallelisms,
                    store=store,
                )
                results["object_store"]["ingest"].append(r)
                print(
                    _ingest_line(f"{modes[0]} p={base_p} on S3 #{rep}", r)
                    + f"\n    S3 server CPU {r.get('s3_server_cpu_s')}s",
                    flush=True,
                )
        results["ingest"] = ingest
        results["ingest_p"] = ingest_p
        if not a.skip_interval_throughput:
            results["interval_throughput"] = run_interval_throughput(
                work,
                bootstrap,
                wl,
                intervals,
                repeat=a.repeat,
                mode=modes[0],
                sets=a.set,
                batch_rows=a.batch_rows,
            )
            print(f"  sustained by interval: {results['interval_throughput']['sustained_ratio']}", flush=True)
        if a.steady_events > 0:
            results["steady"] = run_steady(
                work,
                bootstrap,
                events=a.steady_events,
                repeat=a.repeat,
                mode=modes[0],
                sets=a.set,
                batch_rows=a.batch_rows,
                tree=trees[modes[0]],
            )

        ok_runs = [r for rs in ingest.values() for r in rs if r.get("exactly_once_ok")]
        base["delta_append"] = []
        if ok_runs:
            src = Path(ok_runs[0]["lakehouse"])
            for rep in range(a.repeat):
                for commits in (1, 10):
                    tgt = work / f"delta-append-{rep}-{commits}"
                    shutil.rmtree(tgt, ignore_errors=True)
                    r = __import__("benchmarks.baselines", fromlist=["delta_append"]).delta_append(
                        src, tgt, batches=commits
                    )
                    base["delta_append"].append(r)
                    print(f"  delta-rs append ({commits} commits): {r['events_per_s']} rows/s", flush=True)

        base["spark"] = []
        if not a.skip_spark:
            for rep in range(a.repeat):
                r = run_spark(
                    work, bootstrap, {s: cfg.kafka.topics[s] for s in cfg.kafka.topics}, label=str(rep)
                )
                if "run_s" in r:
                    r["events_per_s"] = round(wl.events / r["run_s"])
                if r.get("processing_s"):
                    r["sustained_events_per_s"] = round(wl.events / r["processing_s"])
                base["spark"].append(r)
                print(
                    f"  spark: {r.get('events_per_s')} events/s run {r.get('run_s')}s, "
                    f"sustained {r.get('sustained_events_per_s')} events/s, "
                    f"jvm {r.get('jvm_start_s')}s "
                    f"rows {r.get('rows')} peak {r['memory']['peak_mib']}"
                    + (f"\n{r['error']}" if "error" in r else ""),
                    flush=True,
                )
        results["baselines"] = base

        lat: list[dict[str, Any]] = []
        if not a.skip_latency:
            for mode in modes:
                r = run_latency(
                    work,
                    bootstrap,
                    mode=mode,
                    rate=a.latency_rate,
                    seconds=a.latency_seconds,
                    checkpoint_interval=str(cfg.flink.checkpoint_interval.total_seconds()) + "s",
                    sets=a.set,
                    tree=trees[mode],
                )
                lat.append(r)
                print(
                    f"  latency {mode}: {json.dumps({k: v for k, v in r.items() if k != 'memory'})[:600]}",
                    flush=True,
                )
        results["latency"] = lat
        if store is not None and not a.skip_latency:
            r = run_latency(
                work,
                bootstrap,
                mode=modes[0],
                rate=a.latency_rate,
                seconds=a.latency_seconds,
                checkpoint_interval=str(cfg.flink.checkpoint_interval.total_seconds()) + "s",
                sets=a.set,
                tree=trees[modes[0]],
                store=store,
            )
            results["object_store"]["latency"] = r
            print(
                f"  latency {modes[0]} on S3: "
                f"{json.dumps({k: v for k, v in r.items() if k != 'memory'})[:600]}",
                flush=True,
            )
        if a.freshness_minutes > 0:
            from benchmarks import freshness

            results["freshness"] = freshness.sweep(
                work,
                bootstrap,
                freshness.Settings(
                    orders=[a.freshness_orders],
                    intervals=intervals,
                    minutes=a.freshness_minutes,
                    rate=a.latency_rate,
                    sets=a.set,
                ),
            )
        if not a.skip_latency:
            from benchmarks import source_lag

            results["source_lag_flink"] = source_lag.measure_flink(work, bootstrap)
            print(f"  delta source lag through Flink: {results['source_lag_flink']}"[:800], flush=True)
        if a.memory_minutes > 0:
            from benchmarks.memory import run_memory

            print(f"  memory: {a.memory_minutes:g} min at {a.memory_rate}/s ...", flush=True)
            results["memory"] = run_memory(
                work,
                bootstrap,
                mode=modes[0],
                minutes=a.memory_minutes,
                rate=a.memory_rate,
                ttl=a.memory_ttl,
                env=memory_env,
                checkpoint_interval=str(cfg.flink.checkpoint_interval.total_seconds()) + "s",
                sets=a.set,
                tree=trees[modes[0]],
            )
            m = results["memory"]
            d = m.get("dedup")
            print(
                f"  memory: {m.get('verdict')} ({m.get('fit')}), peak {m.get('peak_mib')} MiB "
                f"(under 3 GB: {m.get('under_limit')}), at {m.get('rss_mib_at')}, "
                f"slope {m.get('slope_mib_per_min')} MiB/min, {m.get('distinct_order_keys')} order keys, "
                f"de-dup entries {'n/a' if not d else d['entries']}"
                + (f"\n{m['error']}" if "error" in m else ""),
                flush=True,
            )
    if not a.skip_latency:
        from benchmarks import source_lag

        results["source_lag"] = source_lag.measure(work)
        print(f"  delta source lag: {results['source_lag']}", flush=True)
    if not a.skip_serve:
        results["serve"] = _serve_bench(a)
    results["total_s"] = round(time.monotonic() - t_all, 1)
    results["summary"] = report.summarize(results, spread)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(results, indent=2, default=str), encoding="utf-8")
    md = report.markdown(results)
    (out_dir / "results.md").write_text(md, encoding="utf-8")
    if not a.no_readme:
        report.update_readme(ROOT / "benchmarks" / "RESULTS.md", md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
