"""Turn a run's results into a summary, a markdown table, and the README bench section."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

START = "<!-- bench:start -->"
END = "<!-- bench:end -->"
INTRO = """`make bench` installs the `bench` extra (pyspark 3.5.7, delta-spark 3.3.2, confluent-kafka, psutil,
py-spy), copies the Spark connector jars (Maven profile `spark-bench`, `jvm/target/lib/spark/`) and runs
`python -m benchmarks` (`--events N`, `--skip-spark`, `--out DIR`, `--repeat`, `--modes process,thread`,
`--set flink.key=value`, `--batch-rows`, `--latency-rate`, `--freshness-minutes M` (0: skip),
`--freshness-orders N`, `--freshness-intervals 500ms,1s` (also the bounded runs per interval;
`--skip-interval-throughput`), `--memory-minutes M --memory-rate R`,
`--memory-ttl 2m` (default: the configured `dedup_ttl`), `--parallelisms 1,2`, `--project-parallelism 8`,
`--steady-events N`, `--gold-compare`, `--compare-env LABEL:LAKESTREAM__SECTION__KEY=VALUE` (only paired
bounded runs of two or more variants), `--skip-object-store`, `--object-store-checkpoints store|local`;
`make bench BENCH_ARGS='--events 100000'`). Everything runs on one local KRaft broker with the same
seeded messy events; each lakestream and Spark run is its own process (own JVM), RSS sampled over its
process tree. Full results: `.lakestream/bench/results.json`.
"""


def _rates(runs: list[dict[str, Any]], key: str = "events_per_s") -> list[float]:
    return [float(r[key]) for r in runs if r.get(key)]


def summarize(results: dict[str, Any], spread: Callable[[list[float]], dict[str, float]]) -> dict[str, Any]:
    b = results.get("baselines", {})
    s: dict[str, Any] = {
        "kafka_python_consume": spread(_rates(b.get("kafka_python", []))),
        "confluent_consume": spread(_rates(b.get("confluent_kafka", []))),
        "delta_append_1_commit": spread(_rates([r for r in b.get("delta_append", []) if r["commits"] == 1])),
        "delta_append_10_commits": spread(
            _rates([r for r in b.get("delta_append", []) if r["commits"] == 10])
        ),
        "spark_seed_pipeline": spread(_rates(b.get("spark", []))),
        "spark_seed_pipeline_sustained": spread(_rates(b.get("spark", []), "sustained_events_per_s")),
    }
    for mode, runs in results.get("ingest", {}).items():
        s[f"lakestream_{mode}"] = spread(_rates(runs))
        s[f"lakestream_{mode}_sustained"] = spread(_rates(runs, "sustained_events_per_s"))
        s[f"lakestream_{mode}_to_execute_end"] = spread(_rates(runs, "to_execute_end_events_per_s"))
        s[f"lakestream_{mode}_teardown_s"] = spread([r["teardown_s"] for r in runs if "teardown_s" in r])
        s[f"lakestream_{mode}_startup_s"] = spread([r["startup_s"] for r in runs if "startup_s" in r])
        s[f"lakestream_{mode}_exactly_once"] = all(r.get("exactly_once_ok") for r in runs) if runs else None
        s[f"lakestream_{mode}_jvm_start_s"] = spread([r["jvm_start_s"] for r in runs if "jvm_start_s" in r])
    scaling = _scaling(results, spread)
    if scaling:
        s["scaling"] = scaling
    steady_runs = (results.get("steady") or {}).get("runs", [])
    if steady_runs:
        mode = results["settings"]["modes"][0]
        s[f"lakestream_{mode}_steady"] = spread(
            [float(r["steady"]["events_per_s"]) for r in steady_runs if r.get("steady")]
        )
        s[f"lakestream_{mode}_steady_all_ingested"] = all(r.get("all_ingested") for r in steady_runs)
    from benchmarks import s3_variant

    store = s3_variant.summarize(results, spread)
    if store:
        s["object_store"] = store
    return s


def _median(xs: list[float]) -> float | None:
    import statistics

    return statistics.median(xs) if xs else None


def _scaling(
    results: dict[str, Any], spread: Callable[[list[float]], dict[str, float]]
) -> dict[str, Any] | None:
    """Per parallelism: rates, each vertex's busy ratios (median over runs) and the projection."""
    from benchmarks import busy

    st = results["settings"]
    modes = st.get("modes") or ["process"]
    base_p = int(st["flink"].get("parallelism", 2))
    runs_by_p: dict[int, list[dict[str, Any]]] = {}
    for r in results.get("ingest", {}).get(modes[0], []):
        if r.get("busy"):
            runs_by_p.setdefault(base_p, []).append(r)
    for par, rs in (results.get("ingest_p") or {}).items():
        runs_by_p.setdefault(int(par), []).extend(rs)
    measured = [
        (par, r["busy"]) for par, rs in runs_by_p.items() for r in rs if (r.get("busy") or {}).get("vertices")
    ]
    if not runs_by_p:
        return None
    partition_events = {
        (key.rsplit(":", 1)[0], int(key.rsplit(":", 1)[1])): int(n)
        for key, n in (results.get("partitions") or {}).items()
    }
    fixed = busy.fixed_operators(measured)
    target = int(st.get("project_parallelism") or 8)
    by_p: dict[str, Any] = {}
    for par, rs in sorted(runs_by_p.items()):
        summaries = [r["busy"] for r in rs if (r.get("busy") or {}).get("vertices")]
        projections = [
            busy.project(
                b, job_parallelism=par, target=target, partition_events=partition_events, fixed=fixed
            )
            for b in summaries
        ]
        names: list[str] = []
        for b in summaries:
            names += [v["name"] for v in b["vertices"] if v["name"] not in names]
        vertices = []
        for name in names:
            vs = [v for b in summaries for v in b["vertices"] if v["name"] == name]

            def med(key: str, vs: list[dict[str, Any]] = vs) -> float | None:
                return _median([float(v[key]) for v in vs if v.get(key) is not None])

            vertices.append(
                {
                    "name": name,
                    "parallelism": vs[0]["parallelism"],
                    "busy_mean": med("busy_mean"),
                    "busy_max": med("busy_max"),
                    "backpressured_mean": med("backpressured_mean"),
                    "idle_mean": med("idle_mean"),
                    "ceiling_events_per_s": med("ceiling_events_per_s"),
                    "fixed": bool(fixed & set(busy.operators(name))),
                    "n": len(vs),
                }
            )
        bounds = [pr["bound_by"] for pr in projections if pr.get("bound_by")]
        by_p[str(par)] = {
            "runs": len(rs),
            "events_per_s": spread(_rates(rs)),
            "sustained_events_per_s": spread(_rates(rs, "sustained_events_per_s")),
            "window_events_per_s": spread(
                [float(b["window_events_per_s"]) for b in summaries if b.get("window_events_per_s")]
            ),
            "exactly_once": all(r.get("exactly_once_ok") for r in rs) if rs else None,
            "vertices": vertices,
            "projected_events_per_s": spread(
                [
                    float(pr["projected_events_per_s"])
                    for pr in projections
                    if pr.get("projected_events_per_s")
                ]
            ),
            "bound_by": max(set(bounds), key=bounds.count) if bounds else None,
            "projection": projections[0] if projections else None,
            "errors": [b.get("error") for b in (r.get("busy") or {} for r in rs) if b.get("error")],
        }
    return {"target": target, "fixed_operators": sorted(fixed), "by_parallelism": by_p}


def _fmt(x: Any) -> str:
    if isinstance(x, dict) and "median" in x:
        return f"{x['median']:,.0f} ({x['min']:,.0f}–{x['max']:,.0f}, n={x['n']})"
    return "–" if x in (None, {}) else str(x)


def markdown(results: dict[str, Any]) -> str:
    s = results["summary"]
    wl = results.get("workload", {})
    st = results["settings"]
    load = tuple(round(x, 1) for x in results["machine"]["loadavg_at_start"])
    keys = (
        "parallelism",
        "checkpoint_interval",
        "bundle_size",
        "bundle_time",
        "batch_size",
        "batch_time",
        "python_execution_mode",
        "python_workers",
        "jvm_options",
        "managed_memory",
        "network_buffer_size",
    )
    flink = {k: st["flink"][k] for k in keys if k in st["flink"]}
    lines = [
        f"Run {results['started']}: {wl.get('events', '?'):,} events (4 topics x 2 partitions), "
        f"{results['machine']['cpus']} cores, load at start {load}; "
        f"repeat {st['repeat']}; flink {json.dumps(flink)}"
        + (f"; extra {st['extra_flink']}" if st["extra_flink"] else "")
        + (f"; batch_rows {st['batch_rows']}" if st["batch_rows"] else ""),
        "",
        "| pipeline | events/s end to end, median (min–max, n) | vs confluent consume | vs Spark | "
        "sustained events/s | sustained vs Spark | notes |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    conf = s.get("confluent_consume", {}).get("median")
    spark = s.get("spark_seed_pipeline", {}).get("median")
    spark_sustained = s.get("spark_seed_pipeline_sustained", {}).get("median")

    def ratio(x: dict[str, float], ref: float | None) -> str:
        return f"{x['median'] / ref:.2f}x" if x and ref else "–"

    rows = [
        ("raw consume, kafka-python", "kafka_python_consume", "bytes only"),
        ("raw consume, confluent-kafka", "confluent_consume", "bytes only"),
        ("raw delta-rs append, 1 commit", "delta_append_1_commit", "bronze rows as Arrow (write limit)"),
        ("raw delta-rs append, 10 commits", "delta_append_10_commits", "same rows, 10 commits"),
        (
            "Spark seed pipeline",
            "spark_seed_pipeline",
            "foreachBatch bronze append + per-field guarded MERGE",
        ),
    ]
    for mode in st["modes"]:
        runs = results.get("ingest", {}).get(mode, [])
        peak = max((r["memory"]["peak_mib"].get("total", 0) for r in runs), default=0)
        jvm = s.get(f"lakestream_{mode}_jvm_start_s", {})
        startup = s.get(f"lakestream_{mode}_startup_s", {})
        to_end = s.get(f"lakestream_{mode}_to_execute_end", {})
        teardown = s.get(f"lakestream_{mode}_teardown_s", {})
        rows.append(
            (
                f"**lakestream ingest, {mode} mode**",
                f"lakestream_{mode}",
                f"exactly once verified: {s.get(f'lakestream_{mode}_exactly_once')}; JVM start "
                f"{jvm.get('median', '–')} s (excluded); deploy + Python workers until the first read "
                f"{startup.get('median', '–')} s; first read -> end of `execute()` (job teardown "
                f"{teardown.get('median', '–')} s included) {_fmt(to_end)} events/s; "
                f"peak RSS {peak:,.0f} MiB" + _cpu_note(runs),
            )
        )
    for name, key, note in rows:
        x = s.get(key, {})
        sus = s.get(f"{key}_sustained", {})
        lines.append(
            f"| {name} | {_fmt(x)} | {ratio(x, conf)} | {ratio(x, spark)} | {_fmt(sus)} | "
            f"{ratio(sus, spark_sustained)} | {note} |"
        )
    lines += _steady_lines(results, spark_sustained)
    lines += _scaling_lines(results, spark_sustained)
    sp = results.get("baselines", {}).get("spark", [])
    if sp:
        peak = max((r["memory"]["peak_mib"].get("total", 0) for r in sp), default=0)
        lines.append(
            f"\nSpark: JVM start {sp[0].get('jvm_start_s')} s (excluded), peak RSS {peak:,.0f} MiB, "
            f"rows {sp[0].get('rows')}, micro-batches {sp[0].get('batches')}."
        )
    lat = results.get("latency", [])
    if lat:
        lines += [
            "",
            "| visibility (unbounded) | target rate | sent | visible | p50 s | p95 s | p99 s | max s | "
            "checkpoint | RSS MiB over time |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in lat:
            series = " ".join(str(v) for _, v in r.get("memory", {}).get("total_mib_over_time", []))
            lines.append(
                f"| {r['mode']} | {r.get('rate_target', '–')}/s "
                f"(achieved {r.get('achieved_send_rate', '–')}) | "
                f"{r.get('sent', '–')} | {r.get('visible', '–')} | {r.get('p50_s', '–')} | "
                f"{r.get('p95_s', '–')} | "
                f"{r.get('p99_s', '–')} | {r.get('max_s', '–')} | {r['checkpoint_interval']} | {series} |"
            )
            if "error" in r:
                lines.append(f"| {r['mode']} failed: see results.json | | | | | | | | | |")
        lines.append(
            "\nVisibility: Kafka send time -> the silver row readable (silver's Delta version polled every "
            "100 ms); input is one `orders_db` create per new order id at a fixed rate, so every "
            "checkpoint's MERGE inserts new keys (updates of old orders would make each MERGE rewrite "
            "the files holding them)."
        )
    lines += _freshness_lines(results.get("freshness"))
    lines += _interval_throughput_lines(results.get("interval_throughput"))
    lines += _object_store_lines(results)
    lines += _memory_lines(results.get("memory"))
    lines += _source_lag_lines(results.get("source_lag"), results.get("source_lag_flink"))
    lines.append("")
    lines.append(
        "End to end = events / wall time of `env.execute()` (lakestream: deploy, Python worker start and "
        "the final commit included) or of the streaming query (Spark: query start included); JVM start "
        "excluded for both. Sustained = events / (first record read -> everything committed): lakestream "
        "from the earliest bronze `ingest_time` to the newest commit of its tables (the end-of-input "
        "silver MERGE; Flink's job teardown after it is shown in the notes), Spark the summed micro-batch "
        "durations (query start and stop excluded). Ratios are against baselines of the same run. "
        "CPU: user + system seconds of lakestream's processes (JVM, Python workers, client; not the Kafka "
        "broker) over the sustained part, per event."
    )
    return "\n".join(lines) + "\n"


#: How the CPU note names the sampler's kinds of process (a bounded run does not tell workers apart).
_CPU_KIND_NAMES = {
    "jvm": "JVM",
    "other workers": "Python workers",
    "slot workers": "Python workers",
    "standardise workers": "Python workers",
    "resolve workers": "Python workers",
}


def _cpu_note(runs: list[dict[str, Any]]) -> str:
    """The runs' CPU over their sustained part: median µs per event, split by kind of process by the
    median run's shares, and the cores that kept busy (empty without the measurement)."""
    measured = sorted(
        (r for r in runs if r.get("cpu_us_per_event") and r.get("sustained_cpu_s")),
        key=lambda r: float(r["cpu_us_per_event"]),
    )
    if not measured:
        return ""
    mid = measured[len(measured) // 2]
    us = float(mid["cpu_us_per_event"])
    by_kind: dict[str, float] = {}
    for kind, seconds in mid["sustained_cpu_s"].items():
        name = _CPU_KIND_NAMES.get(kind, kind)
        by_kind[name] = by_kind.get(name, 0.0) + float(seconds)
    total = sum(by_kind.values()) or 1.0
    kinds = ", ".join(
        f"{kind} {us * seconds / total:.1f}"
        for kind, seconds in sorted(by_kind.items(), key=lambda kv: -kv[1])
        if us * seconds / total >= 0.05
    )
    return f"; CPU {us:.1f} µs/event over the sustained part ({kinds}; {mid.get('cores_busy')} cores busy)"


def _steady_lines(results: dict[str, Any], spark_sustained: float | None) -> list[str]:
    """The steady-state sentence: checkpoint-to-checkpoint rate over a long backlog."""
    st = results.get("steady") or {}
    runs = st.get("runs", [])
    if not runs:
        return []
    mode = results["settings"]["modes"][0]
    x = results["summary"].get(f"lakestream_{mode}_steady", {})
    spans = ", ".join(
        f"checkpoints {r['steady']['from_checkpoint']}->{r['steady']['to_checkpoint']} "
        f"{r['steady']['events']:,} events in {r['steady']['seconds']} s"
        for r in runs
        if r.get("steady")
    )
    vs = f"{x['median'] / spark_sustained:.2f}x Spark sustained" if x and spark_sustained else "–"
    return [
        "",
        f"**Steady state** ({mode} mode, bounded runs over a backlog of {st.get('events', 0):,} fresh-keyed "
        f"events, rate from the first to the last checkpoint committed before the end of input: every "
        f"table's commit and the silver MERGE inside the interval): {_fmt(x)} events/s ({vs}); "
        f"all events ingested: {results['summary'].get(f'lakestream_{mode}_steady_all_ingested')}; "
        f"{spans or 'no run had two mid-run checkpoints'}.",
    ]


def _pct(x: Any) -> str:
    return "–" if x is None else f"{float(x):.0%}"


def _num(x: Any) -> str:
    return "–" if x is None else f"{float(x):,.0f}"


def _scaling_lines(results: dict[str, Any], spark_sustained: float | None) -> list[str]:
    """Throughput at each parallelism, every vertex's busy ratio and ceiling, the projection."""
    sc = results["summary"].get("scaling")
    if not sc:
        return []
    mode = results["settings"]["modes"][0]
    target = sc["target"]
    events = results.get("workload", {}).get("events", 0)
    lines = [
        "",
        f"**Throughput by parallelism** ({mode} mode, bounded ingest of the same {events:,} events at each "
        f"`flink.parallelism`; busy ratios from Flink's REST API over the run's steady part):",
        "",
        "| parallelism | events/s end to end | sustained events/s | sustained vs Spark | events/s in the "
        f"busy window | busiest vertex: busy max subtask (ceiling events/s) | projected events/s at "
        f"p={target} (bound by) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    vertex_rows = []
    for par, x in sc["by_parallelism"].items():
        sus = x["sustained_events_per_s"]
        vs_spark = f"{sus['median'] / spark_sustained:.2f}x" if sus and spark_sustained else "–"
        bounded = [v for v in x["vertices"] if v.get("ceiling_events_per_s")]
        busiest = max(bounded, key=lambda v: v["busy_max"]) if bounded else None
        busiest_text = (
            f"{busiest['name']}: {_pct(busiest['busy_max'])} ({_num(busiest['ceiling_events_per_s'])})"
            if busiest
            else "–"
        )
        proj = x["projected_events_per_s"]
        lines.append(
            f"| {par} | {_fmt(x['events_per_s'])} | {_fmt(sus)} | {vs_spark} | "
            f"{_fmt(x['window_events_per_s'])} | {busiest_text} | "
            f"{_fmt(proj)} ({x.get('bound_by') or '–'}) |"
        )
        for v in x["vertices"]:
            fixed = " (fixed parallelism)" if v.get("fixed") else ""
            vertex_rows.append(
                f"| {par} | {v['name']}{fixed} | {v['parallelism']} | "
                f"{_pct(v['busy_mean'])} | {_pct(v['busy_max'])} | {_pct(v['backpressured_mean'])} | "
                f"{_pct(v['idle_mean'])} | {_num(v['ceiling_events_per_s'])} |"
            )
        for err in x.get("errors") or []:
            vertex_rows.append(f"| {par} | busy sampling failed: {err} | | | | | | |")
    lines += [
        "",
        "| parallelism | vertex (operator chain) | subtasks | busy mean | busy max subtask | "
        "back-pressured mean | idle mean | ceiling events/s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *vertex_rows,
    ]
    proj_text = []
    kafka = None
    if results["settings"].get("flink", {}).get("python_workers", "operator") == "slot":
        workers = "one Python worker per slot"
        shared = (
            ' The Python operators of a slot share its worker (`flink.python_workers = "slot"`): each '
            "such vertex's busy time includes waiting while the worker runs another's bundle, so each one's "
            "ceiling approximates what that slot's worker sustains for all of them together."
        )
    else:
        workers, shared = "one worker per Python operator", ""
    for par, x in sc["by_parallelism"].items():
        pr = x.get("projection") or {}
        kafka = kafka or pr.get("kafka")
        if pr.get("vertices"):
            hows = "; ".join(f"{v['name']}: {_num(v['projected'])} ({v['how']})" for v in pr["vertices"])
            proj_text.append(f"from the p={par} run {_fmt(x['projected_events_per_s'])} events/s ({hows})")
    lines += [
        "",
        f"Projection to p={target} (assumption: {target} cores, one per subtask, each subtask as fast as "
        f"measured here; every vertex that follows `flink.parallelism` runs {target} subtasks: keyed or "
        f"rebalanced vertices scale linearly, vertices with the Kafka source in their chain by the share of "
        f"the events their busiest reader gets under Flink's partition-to-reader assignment, vertices with "
        f"an operator at a fixed parallelism not at all; the lowest projected ceiling is the rate): "
        + ("; ".join(proj_text) or "–")
        + f". The p=1 run has about as many processes per core (JVM + {workers} on 2 cores) as p={target} on "
        f"{target} cores; the p=2 run has more, so its per-subtask speed includes waiting for a core."
        + shared,
    ]
    if kafka:
        even = 1 / max(1, kafka["partitions"])
        lines.append(
            f"\nKafka caps it: the input has {kafka['partitions']} partitions; at {target} source readers "
            f"{kafka['readers_with_work']} get work and the busiest reads "
            f"{kafka['busiest_reader_share']:.1%} of the events (even: {even:.1%}); more source subtasks "
            "than partitions add nothing, so the source stages' ceiling stops at the partition count."
        )
    if sc.get("fixed_operators"):
        lines.append(f"\nOperators at a fixed parallelism in these runs: {', '.join(sc['fixed_operators'])}.")
    lines.append(
        "\nBusy ratio of a subtask = its busy ms / (busy + back-pressured + idle ms) between the first and "
        "the last REST poll (one a second) inside the run's steady part: from when standardise had stamped "
        "10 % of bronze's rows (`ingest_time`) to when it had stamped 90 % (a run too short for two polls "
        "in there: its sustained span); Flink's `accumulateBusyTimeMs`, `accumulateBackPressuredTimeMs`, "
        "`accumulateIdleTimeMs`, or the 60 s `busyTimeMsPerSecond` gauges if those are missing. Events/s in "
        "the window = 80 % of the input / the window's length. A vertex is one chain of operators in one "
        "task; a Python operator's task counts as busy while it waits for its worker. Ceiling of a vertex = "
        "events/s in the window / its busiest subtask's busy ratio (shown for busy ratios of 5 % and more)."
    )
    return lines


def _freshness_lines(runs: list[dict[str, Any]] | None) -> list[str]:
    """The freshness sweep (``benchmarks.freshness``): one row per checkpoint interval."""
    if not runs:
        return []
    from benchmarks.freshness import markdown as freshness_table

    return [
        "",
        "Freshness at size (`benchmarks.freshness`): merge-on-read silver seeded with "
        f"{runs[0]['orders']:,} orders, half the events updates spread over them, the rest new orders; "
        "visible = the bronze commit passing the record's offset, and the first silver commit of that "
        "checkpoint or a later one (silver's read path); target: silver p99 <= 2 s.",
        "",
        freshness_table(runs).rstrip("\n"),
    ]


def _ratio(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"


def _interval_throughput_lines(r: dict[str, Any] | None) -> list[str]:
    """Sustained ingest rate at each checkpoint interval, as a ratio of the longest interval's."""
    if not r or not r.get("sustained_ratio"):
        return []
    rates, ratios, base = r["sustained_events_per_s"], r["sustained_ratio"], r["base"]
    runs = max((len(rs) for rs in r["runs"].values()), default=0)
    once = all(r["exactly_once_ok"].values())
    head = "| checkpoint interval | " + " | ".join(rates) + " |"
    return [
        "",
        f"Sustained ingest by checkpoint interval (bounded, merge-on-read silver, paired runs, medians of "
        f"{runs}; exactly once in every run: {once}); target: 1 s costs at most 20 % of the {base} rate.",
        "",
        head,
        "|---|" + "---|" * len(rates),
        "| events/s | " + " | ".join(f"{v:,.0f}" for v in rates.values()) + " |",
        f"| ratio to {base} | " + " | ".join(_ratio(v) for v in ratios.values()) + " |",
    ]


def _verdict(passed: bool | None) -> str:
    return "–" if passed is None else ("**pass**" if passed else "**fail**")


def _object_store_lines(results: dict[str, Any]) -> list[str]:
    """The object-store variant: local folder vs S3 sustained rate, their ratio, visibility p99 on S3."""
    o = (results.get("summary") or {}).get("object_store")
    if not o:
        return []
    store = results["object_store"]
    sus, e2e, cpu = o["sustained"], o["end_to_end"], o["cpu_us_per_event"]
    once = o["exactly_once"]
    checkpoints = (
        "Flink's checkpoints on it too (`s3://`)"
        if store.get("checkpoints_on_store")
        else "checkpoints local"
    )
    mode = results["settings"]["modes"][0]
    events = results.get("workload", {}).get("events", 0)
    target = f">= {sus['target_ratio']:.1f}x"

    def ratio(x: dict[str, Any]) -> str:
        pairs = ", ".join(f"{v:.2f}" for v in x["pair_ratios"])
        return "–" if x["ratio"] is None else f"{x['ratio']:.2f}x (pairs {pairs or '–'})"

    lines = [
        "",
        f"**Object store** ({mode} mode, bounded ingest of the same {events:,} events with the lakehouse on "
        f"a local S3 server (S3Proxy over HTTP on this machine, started by the bench), {checkpoints}; one "
        f"S3 run right after each repeat's local run at the configured parallelism):",
        "",
        "| lakehouse | sustained events/s | events/s end to end | CPU µs/event (job) | exactly once |",
        "| --- | --- | --- | --- | --- |",
        *(
            f"| {name} | {_fmt(sus[k])} | {_fmt(e2e[k])} | {_fmt(cpu[k])} | {once[k]} |"
            for name, k in (("local folder", "local"), ("`s3://`", "s3"))
        ),
        f"| S3 / local (medians) | {ratio(sus)}, target {target}: {_verdict(sus['passed'])} | {ratio(e2e)} | "
        "| |",
    ]
    v = o.get("visibility")
    if v:
        failed = f" (the run failed: {str(v['error'])[:200]})" if v.get("error") else ""
        lines += [
            "",
            f"Visibility on S3 (unbounded, silver polled through the S3 API): p50 {v.get('p50_s', '–')} s, "
            f"p99 **{v.get('p99_s', '–')} s** (local folder in this bench: {v.get('local_p99_s', '–')} s), "
            f"max {v.get('max_s', '–')} s, {v.get('visible', '–')} of {v.get('sent', '–')} events visible; "
            f"target checkpoint interval + {v['slack_s']:g} s = {v['target_s']:g} s: "
            f"{_verdict(v['passed'])}{failed}.",
        ]
    server, per_event = o.get("s3_server_cpu_s") or {}, cpu.get("s3_server") or {}
    if server:
        sustained = f"{per_event['median']:g} µs per event over the sustained part, " if per_event else ""
        lines.append(
            f"\nThe local S3 server's JVM runs on the same cores as the job and is not in its CPU per event: "
            f"{sustained}{server['median']:g} CPU seconds per S3 run (medians)."
        )
    lines.append(
        "\nWhere an S3 run's time goes, request by request: `python -m benchmarks.s3_trace` (the visibility "
        "run behind a recording proxy: requests by process and kind, each checkpoint's commits from the "
        "Delta logs next to a local-folder run)."
    )
    return lines


def _source_lag_lines(sl: dict[str, Any] | None, sf: dict[str, Any] | None) -> list[str]:
    """The Delta source lag sentences: the reader alone, then through the Flink changefeed job."""
    lines: list[str] = []
    if sl:
        lines.append(
            f"\nDelta source lag (commit -> rows out of `DeltaStreamReader`, "
            f"poll every {sl['poll_interval_s']} s, "
            f"no Flink hop): p50 {sl.get('p50_ms')} ms, p95 {sl.get('p95_ms')} ms, p99 {sl.get('p99_ms')} ms "
            f"over {sl['commits']} commits."
        )
    if sf and "error" not in sf:
        lines.append(
            f"\nDelta source lag through Flink (commit -> change row readable on Kafka: the `changefeed` "
            f"job's Delta source operator, poll every {sf['poll_interval']}, the Python hop and KafkaSink "
            f"at least once): p50 {sf.get('p50_ms')} ms, p95 {sf.get('p95_ms')} ms, "
            f"p99 {sf.get('p99_ms')} ms, max {sf.get('max_ms')} ms over {sf['commits_seen']} of "
            f"{sf['commits']} commits (one every {sf['commit_every_s']} s; run {sf.get('started', '?')})."
        )
    elif sf:
        lines.append("\nDelta source lag through Flink: the run failed, see results.json.")
    return lines


def _mib(x: Any) -> str:
    return "n/a" if x is None else f"{float(x) / (1024 * 1024):,.1f}"


def _opt_mib(x: Any) -> str:
    """A MiB figure already in MiB, or n/a."""
    return "n/a" if x is None else f"{float(x):,.0f}"


def _heap(h: dict[str, Any] | None) -> str:
    if not h or h.get("heap_used") is None:
        return "n/a"
    return f"{_mib(h['heap_used'])} / {_mib(h.get('heap_committed'))}"


def _per_entry(x: Any) -> str:
    return "n/a" if x is None else f"{float(x):,.0f} B"


def _memory_lines(m: dict[str, Any] | None) -> list[str]:
    """The memory-flat run (``--memory-minutes``): RSS per process kind over time, de-dup state, verdicts."""
    if not m:
        return []
    from benchmarks.procs import KINDS

    at = m.get("rss_mib_at", {})
    keys = m.get("distinct_order_keys")
    # results.json files written before the fit-after-TTL rule name the slope after the second half
    slope = m.get("slope_mib_per_min", m.get("second_half_slope_mib_per_min", "–"))
    growth = m.get("growth_pct_per_min", m.get("second_half_growth_pct_per_min", "–"))
    fit = m.get("fit", "second half")
    under = m.get("under_limit")
    limit = m.get("limit_mib")
    lines = [
        "",
        "| memory (unbounded, steady input) | rate | order keys | state TTLs | peak MiB "
        f"| RSS MiB at 25/50/75/100 % | slope MiB/min (%/min), {fit} | verdict | peak under 3 GB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| {m['mode']}, {m['minutes']:g} min | {m['rate_target']}/s "
        f"(achieved {m.get('achieved_send_rate', '–')}) | {'–' if keys is None else f'{keys:,}'} | "
        f"{', '.join(f'{k} {v}' for k, v in m['ttl'].items())} | {m.get('peak_mib', '–')} | "
        + " / ".join(str(at.get(q, "–")) for q in ("25%", "50%", "75%", "100%"))
        + f" | {slope} ({growth}) | **{m.get('verdict', '–')}** | "
        + ("–" if under is None else f"**{'yes' if under else 'no'}**")
        + " |",
    ]
    rows = m.get("timeline") or []
    if rows:
        present = {k for r in rows for k in r["rss_mib"]}
        kinds = [k for k in KINDS if k in present] + sorted(present - set(KINDS))
        lines += [
            "",
            "| % of run | min | "
            + " | ".join(f"{k} MiB" for k in kinds)
            + " | total MiB | total PSS MiB | JVM heap used / committed MiB | de-dup entries "
            "| RocksDB memory MiB | live data MiB | SST files MiB | local dir MiB |",
            "| " + " | ".join(["---"] * (len(kinds) + 10)) + " |",
        ]
        for r in rows:
            d = r.get("dedup")
            b = (d or {}).get("bytes", {})
            entries = "n/a" if d is None else f"{d['entries']:,}"
            lines.append(
                f"| {r['pct']} % | {r['t_s'] / 60:.1f} | "
                + " | ".join(f"{r['rss_mib'].get(k, 0):,.0f}" for k in kinds)
                + f" | {r['total_mib']:,.0f} | {_opt_mib(r.get('pss_total_mib'))} "
                f"| {_heap(r.get('jvm_heap'))} | {entries} | "
                f"{_mib(b.get('memory'))} | {_mib(b.get('live_data'))} | {_mib(b.get('sst_files'))} | "
                f"{_mib(r.get('local_dir_bytes'))} |"
            )
    d = m.get("dedup")
    ckpt = m.get("checkpoint") or {}
    if d:
        per = d["bytes_per_entry"]
        full = ckpt.get("state_size")
        per_ckpt = f"{full / d['entries']:,.0f} B" if full and d["entries"] else "n/a"
        lines.append(
            f"\nDe-dup state at the end ({', '.join(d['operators'])}, RocksDB estimates): {d['entries']:,} "
            f"entries; per entry in memory {_per_entry(per['memory'])} (block cache with the memtables "
            f"charged to it, plus index/filter readers), live data {_per_entry(per['live_data'])}, on disk "
            f"{_per_entry(per['sst_files'])} in SST files and {_per_entry(per['local_dir'])} of the RocksDB "
            f"local directory (`du`); latest checkpoint {_mib(full)} MiB full state "
            f"({per_ckpt} per entry, all operators), {_mib(ckpt.get('checkpointed_size'))} MiB uploaded."
        )
    else:
        lines.append(
            "\nDe-dup entries and bytes per entry: n/a (no RocksDB metrics of a de-dup operator: the job "
            "keeps its de-dup state elsewhere); RocksDB local directory "
            + (
                "n/a (not created)"
                if m.get("local_dir_bytes") is None
                else f"{_mib(m['local_dir_bytes'])} MiB"
            )
            + (f", latest checkpoint {_mib(ckpt.get('state_size'))} MiB full state." if ckpt else ".")
        )
    pss = m.get("pss")
    if pss:
        at_p = pss.get("pss_mib_at", {})
        lines.append(
            f"\nPSS (each shared page counted once across the tree, what the processes cost the machine): "
            f"peak {pss['peak_mib']:,.0f} MiB (under 3 GB: **{'yes' if pss['under_limit'] else 'no'}**), "
            "at 25/50/75/100 % "
            + " / ".join(_opt_mib(at_p.get(q)) for q in ("25%", "50%", "75%", "100%"))
            + " MiB; peak per kind "
            + ", ".join(f"{k} {v:,.0f}" for k, v in pss.get("peak_mib_by_kind", {}).items())
            + " MiB."
        )
    heap = m.get("jvm_heap_peak") or {}
    if heap.get("heap_used") is not None:
        lines.append(
            f"\nFlink JVM (REST gauges): heap used at most {_mib(heap.get('heap_used'))} MiB of "
            f"{_mib(heap.get('heap_committed'))} MiB committed at most; non-heap "
            f"{_mib(heap.get('nonheap_used'))} MiB, direct buffers {_mib(heap.get('direct_used'))} MiB."
        )
    workers = (
        "one per task slot, each running every Python operator of its slot"
        if m.get("python_workers") == "slot"
        else "told apart by their stacks, `py-spy dump`; 'other workers' until one is caught in a bundle"
    )
    lines += [
        "",
        f"Memory rules: {m.get('rule', '–')}; peak total RSS under 3 GB (3 * 10^9 bytes = "
        f"{'–' if limit is None else f'{limit:,.0f}'} MiB). RSS = client + Flink JVM + Python workers "
        f"({workers}) + their wrappers (other), sampled every {m.get('sample_every_s')} s; rows at 10 % "
        "steps of the run. De-dup "
        f"entries = RocksDB `estimate-num-keys` of the de-dup operator's state (expired entries count until "
        f"compaction drops them), polled every {m.get('rest_every_s', '–')} s over Flink's REST API. "
        f"Ingested (bronze + quarantine) {m.get('ingested_after_drain', '–')} of {m.get('sent', '–')} sent.",
    ]
    if "error" in m:
        lines.append("Memory run failed: see results.json.")
    return lines


def update_readme(readme: Path, md: str) -> None:
    """Replace the text between the bench markers (appended at the very end when absent)."""
    text = readme.read_text(encoding="utf-8")
    body = f"{START}\n## Benchmark (latest `make bench`)\n\n{INTRO}\n{md}{END}\n"
    if START in text and END in text:
        head, rest = text.split(START, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        text = head + body + tail
    else:
        text = text.rstrip("\n") + "\n\n" + body
    readme.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.report [results.json]``: re-render results.md and the README section."""
    import argparse

    from lakestream import paths

    p = argparse.ArgumentParser(prog="python -m benchmarks.report")
    p.add_argument("results", nargs="?", default=str(paths.STATE_DIR / "bench" / "results.json"))
    p.add_argument(
        "--no-readme", action="store_true", help="leave the generated block of benchmarks/RESULTS.md as it is"
    )
    a = p.parse_args(argv)
    path = Path(a.results)
    results = json.loads(path.read_text(encoding="utf-8"))
    md = markdown(results)
    (path.parent / "results.md").write_text(md, encoding="utf-8")
    if not a.no_readme:
        update_readme(paths.PROJECT_ROOT / "benchmarks" / "RESULTS.md", md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
