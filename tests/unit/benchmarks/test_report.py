"""The benchmark report's sentences and tables (the numbers in the README come from these)."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import report


def test_source_lag_lines_name_both_measurements_and_a_failed_flink_run() -> None:
    reader = {"poll_interval_s": 1.0, "p50_ms": 480, "p95_ms": 960, "p99_ms": 1000, "commits": 75}
    flink = {
        "started": "2026-11-30T02:00:00+00:00",
        "poll_interval": "1s",
        "commit_every_s": 0.37,
        "rows_per_commit": 100,
        "commits": 120,
        "commits_seen": 119,
        "p50_ms": 700,
        "p95_ms": 1200,
        "p99_ms": 1300,
        "max_ms": 1400,
    }
    assert report._source_lag_lines(None, None) == []
    text = "\n".join(report._source_lag_lines(reader, flink))
    assert "no Flink hop): p50 480 ms" in text
    assert "through Flink" in text and "p99 1300 ms, max 1400 ms over 119 of 120 commits" in text
    failed = "\n".join(report._source_lag_lines(reader, {"error": "boom"}))
    assert "the run failed" in failed and "p50 480 ms" in failed


def test_freshness_lines_give_the_sweep_with_its_seeded_size() -> None:
    from tests.unit.benchmarks.test_freshness import REPORTED_RUN

    assert report._freshness_lines(None) == [] and report._freshness_lines([]) == []
    text = "\n".join(report._freshness_lines([REPORTED_RUN]))
    assert "seeded with 1,000,000 orders" in text and "target: silver p99 <= 2 s" in text
    assert "| 1,000,000 | mor | 1s | 9,996.1 |" in text


def scaling_results() -> dict[str, Any]:
    """A results.json of a p=1/p=2 run, with the recorded busy summaries (test_busy's data)."""
    from tests.unit.benchmarks.test_busy import DATA, recorded

    def run(p: str, events_per_s: int) -> dict[str, Any]:
        return {
            "events_per_s": events_per_s,
            "sustained_events_per_s": DATA["runs"][p]["sustained_events_per_s"],
            "exactly_once_ok": True,
            "busy": recorded(p),
        }

    return {
        "settings": {"modes": ["process"], "flink": {"parallelism": "2"}, "project_parallelism": 8},
        "workload": {"events": DATA["events"]},
        "partitions": DATA["partitions"],
        "ingest": {"process": [run("2", 4177)]},
        "ingest_p": {"1": [run("1", 6564)]},
    }


def test_scaling_summary_per_parallelism_with_the_projection() -> None:
    from benchmarks.__main__ import spread

    results = scaling_results()
    sc = report._scaling(results, spread)
    assert sc is not None and sc["target"] == 8
    assert list(sc["by_parallelism"]) == ["1", "2"]
    p1, p2 = sc["by_parallelism"]["1"], sc["by_parallelism"]["2"]
    assert p1["events_per_s"]["median"] == 6564 and p2["sustained_events_per_s"]["median"] == 21881
    assert [v["parallelism"] for v in p2["vertices"]] == [2, 1]
    assert [v["fixed"] for v in p2["vertices"]] == [False, True]
    assert p2["projection"]["kafka"]["readers_with_work"] == 6
    assert p2["bound_by"] == p2["vertices"][0]["name"]  # the source chain: two partitions on one reader
    # runs without busy samples (busy sampling off): no section
    assert (
        report._scaling({**results, "ingest": {"process": [{"events_per_s": 1}]}, "ingest_p": {}}, spread)
        is None
    )


def test_scaling_lines_render_rates_vertices_projection_and_rules() -> None:
    from benchmarks.__main__ import spread

    results = scaling_results()
    results["summary"] = {"scaling": report._scaling(results, spread)}
    text = "\n".join(report._scaling_lines(results, spark_sustained=10_000.0))
    assert "**Throughput by parallelism**" in text and "same 96,497 events" in text
    assert "| 1 | 6,564 (6,564–6,564, n=1) | 32,822 (32,822–32,822, n=1) | 3.28x |" in text
    assert "| 2 | Source: kafka source records" in text and "| 2 | 70% | 99% | 30% | 0% |" in text
    assert "(fixed parallelism) | 1 |" in text
    assert "Projection to p=8 (assumption: 8 cores" in text
    assert "Kafka caps it: the input has 8 partitions; at 8 source readers 6 get work" in text
    assert "Busy ratio of a subtask" in text and "10 % of bronze's rows" in text
    assert "JVM + one worker per Python operator on 2 cores" in text and "share its worker" not in text
    assert report._scaling_lines({"summary": {}, "settings": {"modes": ["process"]}}, None) == []
    results["settings"]["flink"]["python_workers"] = "slot"
    text = "\n".join(report._scaling_lines(results, spark_sustained=10_000.0))
    assert "JVM + one Python worker per slot on 2 cores" in text
    assert "The Python operators of a slot share its worker" in text


def test_compare_env_variants_are_grouped_by_label_and_checked() -> None:
    from benchmarks.__main__ import parse_variants

    v = parse_variants(
        [
            'heap1g:LAKESTREAM__FLINK__JVM_OPTIONS=["-Xmx1g"]',
            'heap512m:LAKESTREAM__FLINK__JVM_OPTIONS=["-Xmx512m"]',
            "heap512m:LAKESTREAM__GOLD__ENABLED=false",
        ]
    )
    assert list(v) == ["heap1g", "heap512m"]
    assert v["heap512m"] == {
        "LAKESTREAM__FLINK__JVM_OPTIONS": '["-Xmx512m"]',
        "LAKESTREAM__GOLD__ENABLED": "false",
    }
    for bad in (
        ["x=1", "y:LAKESTREAM__A__B=2"],
        ["a:FOO=1", "b:LAKESTREAM__A__B=2"],
        ["a:LAKESTREAM__A__B=1"],
    ):
        with pytest.raises(SystemExit):
            parse_variants(bad)


def test_cpu_note_takes_the_median_run_and_splits_it_by_process() -> None:
    runs = [
        {"cpu_us_per_event": 70.0, "sustained_cpu_s": {"jvm": 30.0, "slot workers": 40.0}, "cores_busy": 1.7},
        {
            "cpu_us_per_event": 60.0,
            "sustained_cpu_s": {"jvm": 24.0, "slot workers": 36.0, "client": 0.0},
            "cores_busy": 1.8,
        },
        {"cpu_us_per_event": 50.0, "sustained_cpu_s": {"jvm": 25.0, "slot workers": 25.0}, "cores_busy": 1.9},
        {"error": "failed"},
    ]
    assert report._cpu_note(runs) == (
        "; CPU 60.0 µs/event over the sustained part (Python workers 36.0, JVM 24.0; 1.8 cores busy)"
    )
    assert report._cpu_note([{"error": "failed"}]) == ""


def test_interval_throughput_lines_give_each_rate_and_its_ratio_to_the_longest_interval() -> None:
    assert report._interval_throughput_lines(None) == []
    r = {
        "base": "10s",
        "runs": {"1s": [{}, {}, {}], "10s": [{}, {}, {}]},
        "sustained_events_per_s": {"1s": 32_000.0, "10s": 40_000.0},
        "sustained_ratio": {"1s": 0.8, "10s": 1.0},
        "exactly_once_ok": {"1s": True, "10s": True},
    }
    text = "\n".join(report._interval_throughput_lines(r))
    assert "medians of 3" in text and "exactly once in every run: True" in text
    assert "| checkpoint interval | 1s | 10s |" in text
    assert "| events/s | 32,000 | 40,000 |" in text and "| ratio to 10s | 0.80 | 1.00 |" in text


def test_interval_ratios_are_to_the_base_and_missing_rates_stay_missing() -> None:
    from benchmarks.__main__ import interval_ratios

    assert interval_ratios({"500ms": 30_000.0, "1s": 36_000.0, "10s": 40_000.0}, "10s") == {
        "500ms": 0.75,
        "1s": 0.9,
        "10s": 1.0,
    }
    assert interval_ratios({"1s": 0.0, "10s": 40_000.0}, "10s") == {"1s": None, "10s": 1.0}
    assert interval_ratios({"1s": 36_000.0, "10s": 0.0}, "10s") == {"1s": None, "10s": None}
