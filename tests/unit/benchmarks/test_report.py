"""The benchmark report's source-lag sentences (the numbers in the README come from these)."""

from __future__ import annotations

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
