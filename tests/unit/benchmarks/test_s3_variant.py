"""The object-store variant's places, verdicts and report: S3 vs local medians, visibility target."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks import report, s3_variant
from benchmarks.__main__ import spread
from benchmarks.unbounded import ingest_run_cmd
from devtools.s3_server import S3Endpoint

ENDPOINT = S3Endpoint("http://127.0.0.1:9000", "LSKACCESS", "s3cret")


def run(
    sustained: float | None, *, e2e: float = 1000.0, cpu: float = 30.0, ok: bool = True
) -> dict[str, Any]:
    out: dict[str, Any] = {"events_per_s": e2e, "cpu_us_per_event": cpu, "exactly_once_ok": ok}
    if sustained is not None:
        out["sustained_events_per_s"] = sustained
    return out


def test_local_place_is_the_run_folder_and_the_command_says_so(tmp_path: Path) -> None:
    place = s3_variant.local_place(tmp_path / "ingest-a")
    assert place.lakehouse_view == tmp_path / "ingest-a" / "lakehouse"
    assert place.table("silver/orders") == str(tmp_path / "ingest-a" / "lakehouse" / "silver" / "orders")
    assert place.env == {} and place.options == {}
    default = ingest_run_cmd("k:1", tmp_path / "ingest-a", group_id="g", mode="process", sets=[])
    assert default == ingest_run_cmd(
        "k:1", tmp_path / "ingest-a", group_id="g", mode="process", sets=[], place=place
    )


def test_store_place_puts_tables_and_checkpoints_under_one_prefix_per_run(tmp_path: Path) -> None:
    store = s3_variant.BenchStore(ENDPOINT, tmp_path / "buckets" / "bench", pid=1, checkpoints_on_store=True)
    place = store.place(tmp_path / "work" / "ingest-process-s3-0")
    assert place.lakehouse == "s3://bench/ingest-process-s3-0/lakehouse"
    assert place.checkpoints == "s3://bench/ingest-process-s3-0/checkpoints"
    assert place.checkpoints_view == tmp_path / "buckets" / "bench" / "ingest-process-s3-0" / "checkpoints"
    assert place.env["LAKESTREAM__STORAGE__ENDPOINT"] == ENDPOINT.url
    assert place.env["LAKESTREAM__STORAGE__PATH_STYLE"] == "true"
    assert place.env["AWS_SECRET_ACCESS_KEY"] == "s3cret" and place.options == ENDPOINT.storage_options()
    cmd = ingest_run_cmd("k:1", tmp_path / "r", group_id="g", mode="process", sets=[], place=place)
    assert cmd[cmd.index("--lakehouse") + 1] == place.lakehouse
    assert cmd[cmd.index("--checkpoint-dir") + 1] == place.checkpoints
    # the key pair travels to the child only: neither the place's repr nor the recorded settings hold it
    assert "s3cret" not in repr(place) and "s3cret" not in repr(store.settings())

    local_ckpt = s3_variant.BenchStore(ENDPOINT, tmp_path / "b", pid=1, checkpoints_on_store=False)
    p2 = local_ckpt.place(tmp_path / "work" / "x")
    assert p2.lakehouse.startswith("s3://") and p2.checkpoints == str(tmp_path / "work" / "x" / "checkpoints")


def test_throughput_ratio_is_of_the_medians_with_the_pairs_beside_it() -> None:
    local = [run(100.0), run(120.0), run(80.0)]
    s3 = [run(90.0), run(84.0), run(None)]
    t = s3_variant.throughput(local, s3, spread)
    assert t["local"]["median"] == 100.0 and t["s3"]["median"] == 87.0
    assert t["ratio"] == 0.87 and t["passed"] is True
    assert t["pair_ratios"] == [0.9, 0.7]  # the third S3 run measured nothing
    assert s3_variant.throughput(local, [run(79.0)], spread)["passed"] is False
    assert s3_variant.throughput(local, [run(80.0)], spread)["passed"] is True  # at the target
    empty = s3_variant.throughput(local, [{"error": "boom"}], spread)
    assert empty["ratio"] is None and empty["passed"] is None


def test_visibility_target_is_interval_plus_three_seconds_and_every_event_seen() -> None:
    s3 = {"sent": 100, "visible": 100, "p50_s": 6.0, "p99_s": 12.9, "max_s": 13.5}
    v = s3_variant.visibility(s3, {"p99_s": 12.1}, checkpoint_interval_s=10.0)
    assert v is not None and v["target_s"] == 13.0 and v["passed"] is True and v["local_p99_s"] == 12.1
    assert s3_variant.visibility({**s3, "p99_s": 13.1}, None, checkpoint_interval_s=10.0)["passed"] is False  # type: ignore[index]
    missing = s3_variant.visibility({**s3, "visible": 99}, None, checkpoint_interval_s=10.0)
    assert missing is not None and missing["passed"] is False
    failed = s3_variant.visibility({"error": "died"}, None, checkpoint_interval_s=10.0)
    assert failed is not None and failed["passed"] is None and failed["error"] == "died"
    assert s3_variant.visibility(None, None, checkpoint_interval_s=10.0) is None


def bench_results() -> dict[str, Any]:
    return {
        "settings": {"modes": ["process"]},
        "workload": {"events": 200_000},
        "ingest": {"process": [run(60_000.0), run(64_000.0)]},
        "latency": [{"mode": "process", "p99_s": 12.2}],
        "object_store": {
            "checkpoints_on_store": True,
            "checkpoint_interval_s": 10.0,
            "ingest": [
                run(45_000.0) | {"s3_server_cpu_s": 4.0, "s3_server_cpu_us_per_event": 7.0},
                run(47_000.0) | {"s3_server_cpu_s": 6.0, "s3_server_cpu_us_per_event": 8.0},
            ],
            "latency": {
                "mode": "process",
                "sent": 10,
                "visible": 10,
                "p50_s": 7.0,
                "p99_s": 13.4,
                "max_s": 14.0,
            },
        },
    }


def test_report_shows_both_rates_the_ratio_and_the_verdicts() -> None:
    results = bench_results()
    results["summary"] = {"object_store": s3_variant.summarize(results, spread)}
    text = "\n".join(report._object_store_lines(results))
    assert "**Object store** (process mode, bounded ingest of the same 200,000 events" in text
    assert "Flink's checkpoints on it too" in text
    assert "| local folder | 62,000 (60,000–64,000, n=2) |" in text
    assert "| `s3://` | 46,000 (45,000–47,000, n=2) |" in text
    assert "0.74x (pairs 0.75, 0.73), target >= 0.8x: **fail**" in text
    assert "p99 **13.4 s** (local folder in this bench: 12.2 s)" in text
    assert "target checkpoint interval + 3 s = 13 s: **fail**" in text
    assert "7.5 µs per event over the sustained part, 5 CPU seconds per S3 run (medians)" in text
    # a bench without the variant: no section, and the summary leaves it out
    assert s3_variant.summarize({**results, "object_store": None}, spread) is None
    assert report._object_store_lines({"summary": {}}) == []
