"""Busy ratios per job vertex, ceilings and the parallelism projection, on recorded REST polls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import busy

DATA = json.loads((Path(__file__).parent / "data" / "busy_runs.json").read_text(encoding="utf-8"))
PARTITIONS = {(k.rsplit(":", 1)[0], int(k.rsplit(":", 1)[1])): int(n) for k, n in DATA["partitions"].items()}
SOURCE = (
    "Source: kafka source records -> kafka batches + standardise markers -> "
    "standardise + bronze/review/quarantine writers"
)
RESOLVE = (
    "event-time gate -> resolve markers -> resolve orders + late/silver writers -> resolve reports: Writer"
)


def recorded(p: str) -> dict[str, Any]:
    """``busy.summarize`` of one recorded run, with its steady span and the sustained fallback."""
    run = DATA["runs"][p]
    (s0, s1), (f0, f1) = run["steady"], run["sustained"]
    return busy.summarize(
        run["samples"],
        run["vertex_meta"],
        steady=(s0, s1, 0.8 * DATA["events"] / (s1 - s0)),
        sustained=(f0, f1, DATA["events"] / (f1 - f0)),
    )


def test_the_sampler_polls_task_time_metrics_only() -> None:
    assert busy.selects("0.accumulateBusyTimeMs") and busy.selects("1.idleTimeMsPerSecond")
    assert busy.selects("12.backPressuredTimeMsPerSecond")
    assert not busy.selects("0.Source__kafka_source_records.numRecordsOut")
    assert not busy.selects("0.numRecordsIn") and not busy.selects("accumulateBusyTimeMs")


def test_poll_window_is_the_first_and_last_poll_inside_the_span() -> None:
    samples = [{"epoch": e} for e in (10.0, 11.0, 12.0, 13.0, 14.0)]
    assert busy.poll_window(samples, 10.5, 13.5) == (1, 3)
    assert busy.poll_window(samples, 10.5, 11.5) is None  # one poll is no window
    assert busy.poll_window([], 0, 1) is None


def test_busy_ratios_of_the_recorded_p2_run_from_accumulated_times() -> None:
    out = recorded("2")
    assert out["window_rule"].startswith("bronze ingest_time")
    assert out["window_polls"] == 2
    src, res = out["vertices"]
    assert (src["name"], src["parallelism"], res["name"], res["parallelism"]) == (SOURCE, 2, RESOLVE, 1)
    assert src["basis"] == res["basis"] == "accumulated"
    # Between the two polls subtask 0 was busy 571 ms and back-pressured 810 ms, subtask 1 busy 1,377 ms
    # and back-pressured 10 ms; the resolve task busy 840 ms and idle 543 ms.
    assert src["subtask_busy"] == [pytest.approx(0.413, abs=1e-3), pytest.approx(0.993, abs=1e-3)]
    assert src["busy_max"] == pytest.approx(0.993, abs=1e-3)
    assert src["busy_mean"] == pytest.approx((0.413 + 0.993) / 2, abs=2e-3)
    assert src["backpressured_mean"] == pytest.approx(0.297, abs=1e-3)
    assert res["busy_max"] == pytest.approx(0.607, abs=1e-3) and res["idle_mean"] == pytest.approx(
        0.393, abs=1e-3
    )
    for v in (src, res):
        assert v["busy_mean"] + v["backpressured_mean"] + v["idle_mean"] == pytest.approx(1.0, abs=2e-3)
    rate = out["window_events_per_s"]
    assert src["ceiling_events_per_s"] == pytest.approx(rate / src["busy_max"], rel=1e-3)
    assert out["busiest"] == SOURCE


def test_a_steady_span_with_one_poll_falls_back_to_the_sustained_span() -> None:
    out = recorded("1")  # the p=1 run's steady part held a single poll
    assert out["window_rule"].startswith("sustained span")
    run = DATA["runs"]["1"]
    f0, f1 = run["sustained"]
    assert out["window_events_per_s"] == round(DATA["events"] / (f1 - f0))
    (only,) = out["vertices"]  # at p=1 every operator is chained into one task
    assert only["parallelism"] == 1 and only["busy_max"] == pytest.approx(1.0, abs=1e-3)


def test_no_window_is_an_error_not_a_ratio() -> None:
    run = DATA["runs"]["2"]
    out = busy.summarize(run["samples"], run["vertex_meta"], steady=(0.0, 1.0, 5.0), sustained=None)
    assert "error" in out and "vertices" not in out


def test_gauges_stand_in_when_the_accumulated_times_are_missing() -> None:
    meta = {"v": {"name": "Source: x -> y", "parallelism": 1}}
    samples = [
        {
            "t": float(i),
            "epoch": 100.0 + i,
            "vertices": {"v": {"0.busyTimeMsPerSecond": b, "0.idleTimeMsPerSecond": 1000 - b}},
        }
        for i, b in enumerate((400.0, 600.0, 800.0))
    ]
    out = busy.summarize(samples, meta, steady=(100.0, 102.0, 1000.0))
    (v,) = out["vertices"]
    assert v["basis"].startswith("gauge")
    assert v["busy_mean"] == pytest.approx(0.6) and v["idle_mean"] == pytest.approx(0.4)
    assert v["ceiling_events_per_s"] == round(1000 / 0.6)


def test_java_string_hash_matches_java() -> None:
    assert busy.java_string_hash("") == 0
    assert busy.java_string_hash("hello") == 99162322
    assert busy.java_string_hash("polygenelubricants") == -(2**31)  # overflows to Integer.MIN_VALUE


def test_kafka_readers_get_partitions_by_flinks_rule() -> None:
    # start = (hash * 31 & 0x7FFFFFFF) % readers, then consecutive partitions of a topic
    owners = {tp: busy.split_owner(*tp, 8) for tp in PARTITIONS}
    for topic in {t for t, _ in PARTITIONS}:
        assert (owners[(topic, 1)] - owners[(topic, 0)]) % 8 == 1
    assert busy.reader_shares(PARTITIONS, 1) == [pytest.approx(1.0)]
    eight = busy.reader_shares(PARTITIONS, 8)
    assert sum(eight) == pytest.approx(1.0)
    assert sum(1 for s in eight if s > 0) == len(set(owners.values())) == 6  # two readers get nothing
    # reader 5 reads logistics.pushes:0 and orders.db.changes:1
    assert owners[("logistics.pushes", 0)] == owners[("orders.db.changes", 1)] == 5
    assert max(eight) == pytest.approx((14164 + 18210) / DATA["events"])


def test_projection_keeps_fixed_operators_and_scales_the_source_by_reader_share() -> None:
    p1, p2 = recorded("1"), recorded("2")
    fixed = busy.fixed_operators([(1, p1), (2, p2)])
    assert fixed == set(busy.operators(RESOLVE))  # p=1 in the p=2 run
    proj2 = busy.project(p2, job_parallelism=2, target=8, partition_events=PARTITIONS, fixed=fixed)
    src, res = proj2["vertices"]
    share2, share8 = max(busy.reader_shares(PARTITIONS, 2)), max(busy.reader_shares(PARTITIONS, 8))
    assert src["projected"] == round(src["ceiling_now"] * share2 / share8)
    assert res["projected"] == res["ceiling_now"] and "fixed" in res["how"]
    assert proj2["projected_events_per_s"] == min(src["projected"], res["projected"])
    assert proj2["kafka"] == {
        "partitions": 8,
        "readers_with_work": 6,
        "busiest_reader_share": pytest.approx(share8, abs=1e-4),
    }
    # The p=1 run's one chained task holds the fixed resolve operators: it does not scale.
    proj1 = busy.project(p1, job_parallelism=1, target=8, partition_events=PARTITIONS, fixed=fixed)
    assert proj1["projected_events_per_s"] == p1["vertices"][0]["ceiling_events_per_s"]


def test_projection_scales_keyed_vertices_linearly_and_caps_sources_at_the_partitions() -> None:
    run = {
        "vertices": [
            {
                "name": "Source: k -> standardise + w -> event-time gate",
                "parallelism": 2,
                "ceiling_events_per_s": 40_000,
            },
            {
                "name": "de-dup by event id + resolve markers -> resolve orders",
                "parallelism": 2,
                "ceiling_events_per_s": 30_000,
            },
        ]
    }
    even = {(f"t{i}", 0): 100 for i in range(4)}
    out = busy.project(run, job_parallelism=2, target=8, partition_events={}, fixed=set())
    src, keyed = out["vertices"]
    assert keyed["projected"] == 120_000 and "linear" in keyed["how"]
    assert src["projected"] == 160_000  # no partition counts known: linear
    assert out["bound_by"] == keyed["name"]
    capped = busy.project(run, job_parallelism=2, target=8, partition_events=even, fixed=set())
    # four partitions: at most four readers ever get work, whatever the parallelism
    assert capped["vertices"][0]["projected"] <= 40_000 * 4 / 2
    assert capped["kafka"]["readers_with_work"] <= 4
