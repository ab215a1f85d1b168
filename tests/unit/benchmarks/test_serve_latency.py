"""The serving benchmark's percentiles and its README block (replaced in place, once)."""

from __future__ import annotations

from pathlib import Path

from benchmarks import serve_latency


def _result() -> dict[str, object]:
    return {
        "started": "2026-12-01T16:00:00+0000",
        "table": {"rows": 105120, "commits": 390},
        "days": 365,
        "requests_per_kind": 200,
        "repeat": 3,
        "summary": {
            "day": {"p50_ms": 3.1, "p99_ms": 9.5, "p99_range_ms": [8.0, 12.0]},
            "year": {"p50_ms": 290.0, "p99_ms": 410.0, "p99_range_ms": [380.0, 520.0]},
        },
        "cold_ms": 4000.0,
        "new_version_ms": 320.0,
        "year_bytes": 37_822_053,
        "server_rss_mib": 600.0,
    }


def test_percentiles_are_nearest_rank() -> None:
    xs = [float(x) for x in range(1, 101)]
    assert serve_latency._pct(xs, 0.5) == 51.0  # index round(0.5 * 99) = 50
    assert serve_latency._pct(xs, 0.99) == 99.0
    assert serve_latency._pct([7.0], 0.99) == 7.0


def test_the_readme_block_goes_after_the_bench_section_and_is_replaced_in_place(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# x\n<!-- bench:start -->\ntable\n<!-- bench:end -->\n\n## after\n", encoding="utf-8")
    md = serve_latency.markdown(_result())  # type: ignore[arg-type]
    assert "| day | 288 | 3.1 | 9.5 (8.0–12.0) |" in md
    assert "| year | 105,120 | 290.0 | 410.0 (380.0–520.0) |" in md
    serve_latency.update_readme(readme, md)
    once = readme.read_text(encoding="utf-8")
    assert once.index("<!-- bench:end -->") < once.index(serve_latency.START) < once.index("## after")
    serve_latency.update_readme(readme, md.replace("410.0", "411.0"))
    twice = readme.read_text(encoding="utf-8")
    assert twice.count(serve_latency.START) == 1 and "411.0 (380.0" in twice and "410.0 (380.0" not in twice
