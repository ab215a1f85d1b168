"""The memory-flat benchmark's pure parts: slope, verdicts, de-dup state from REST metrics, the timeline,
fresh keys per input chunk, the report section."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from devtools.sample_events import generate

# ``benchmarks`` is not an installed package: importable from the project root (``python -m pytest`` adds
# the working directory, a bare ``pytest`` does not).
ROOT = str(Path(__file__).resolve().parents[3])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import memory, report  # noqa: E402


def test_slope_of_a_line_and_degenerate_inputs() -> None:
    assert memory.slope([(0, 1.0), (1, 3.0), (2, 5.0)]) == pytest.approx(2.0)
    assert memory.slope([(0, 4.0), (1, 2.0), (2, 4.0), (3, 2.0)]) == pytest.approx(-0.4)
    assert memory.slope([(1, 5.0)]) == 0.0
    assert memory.slope([(1, 5.0), (1, 9.0)]) == 0.0


def series(start: float, per_min: float, minutes: int = 10, every_s: int = 5) -> list[tuple[float, float]]:
    return [(float(t), start + per_min * t / 60) for t in range(0, minutes * 60 + 1, every_s)]


def test_flat_when_second_half_grows_slower_than_the_threshold() -> None:
    # Warm-up: steep first half, then +1 MiB/min on ~1,500 MiB (0.07 %/min).
    samples = [(t, 1000 + t) if t < 300 else (t, 1300 + (t - 300) / 60) for t, _ in series(0, 0)]
    out = memory.analyse(samples, 600)
    assert out["verdict"] == "flat" and out["fit"] == "second half" and out["fit_from_s"] == 300
    assert out["slope_mib_per_min"] == pytest.approx(1.0, abs=0.01)
    assert out["peak_mib"] == pytest.approx(1305.0)
    assert out["rss_mib_at"]["25%"] == pytest.approx(1150.0)
    assert out["rss_mib_at"]["100%"] == pytest.approx(1305.0)
    assert "2.0%" in out["rule"] and "second half" in out["rule"]


def test_growing_when_second_half_slope_exceeds_the_threshold() -> None:
    out = memory.analyse(series(1000, 40), 600)  # 40 MiB/min on ~1,300 MiB: about 3 %/min
    assert out["verdict"] == "growing"
    assert out["growth_pct_per_min"] > 2.0
    assert memory.analyse(series(1000, 40), 600, threshold_pct_per_min=5.0)["verdict"] == "flat"


def test_shrinking_memory_is_flat_and_too_few_samples_is_unknown() -> None:
    assert memory.analyse(series(2000, -30), 600)["verdict"] == "flat"
    out = memory.analyse([(0.0, 100.0), (400.0, 110.0)], 600)
    assert out["verdict"].startswith("unknown")
    assert out["slope_mib_per_min"] is None
    empty = memory.analyse([], 600)
    assert empty["rss_mib_at"]["50%"] is None and empty["under_limit"] is None


def filling_then_flat(ttl_min: int, minutes: int, *, after_per_min: float = 0.5) -> list[tuple[float, float]]:
    """RSS climbing 40 MiB/min while the state fills up to its TTL, then ``after_per_min``."""
    out = []
    for t in range(0, minutes * 60 + 1, 5):
        m = t / 60
        out.append((float(t), 1200 + 40 * min(m, ttl_min) + after_per_min * max(0.0, m - ttl_min)))
    return out


def test_slope_after_the_first_ttl_when_the_run_is_longer_than_it() -> None:
    # A 40-minute run at the default 30-minute TTL: the fill-up is no growth, the last 10 minutes count.
    samples = filling_then_flat(30, 40)
    out = memory.analyse(samples, 2400, ttl_s=1800)
    assert out["fit"] == "after first TTL" and out["fit_from_s"] == 1800
    assert out["slope_mib_per_min"] == pytest.approx(0.5, abs=0.01)
    assert out["verdict"] == "flat"
    assert "after the first dedup_ttl (30 min)" in out["rule"]
    # The second-half rule would fit the last 10 minutes of the fill-up too.
    assert memory.analyse(samples, 2400)["slope_mib_per_min"] > 10 * out["slope_mib_per_min"]
    # Still climbing after the TTL (80 MiB/min on ~2,800 MiB, about 3 %/min): growing.
    assert (
        memory.analyse(filling_then_flat(30, 40, after_per_min=80), 2400, ttl_s=1800)["verdict"] == "growing"
    )


def test_a_run_no_longer_than_the_ttl_keeps_the_second_half_rule() -> None:
    out = memory.analyse(series(1000, 1), 600, ttl_s=1800)
    assert out["fit"] == "second half" and out["fit_from_s"] == 300
    assert memory.analyse(series(1000, 1), 600, ttl_s=600)["fit"] == "second half"


def test_total_under_3_gb() -> None:
    assert memory.LIMIT_MIB == pytest.approx(2861.0, abs=0.1)  # 3 * 10**9 bytes
    assert memory.analyse(series(2000, 1), 600)["under_limit"] is True
    over = memory.analyse([(0.0, 2000.0), (300.0, 2900.0), (600.0, 2000.0)], 600)
    assert over["under_limit"] is False and over["limit_mib"] == pytest.approx(2861.0, abs=0.1)


#: RocksDB metric ids as Flink's REST API lists them for a keyed ``MapState`` operator (recorded; the
#: operator renamed to the ingest job's de-dup operator, whose state is ``lakestream-dedup-ids``).
OP = "de-dup_by_event_id_+_resolve_markers"
CF = "lakestream-dedup-ids"


def rocksdb_metrics(subtask: int, **values: float | None) -> dict[str, float | None]:
    return {f"{subtask}.{OP}.{CF}.rocksdb_{k.replace('_', '-')}": v for k, v in values.items()}


DEDUP_VERTICES: dict[str, dict[str, float | None]] = {
    "source": {"0.busyTimeMsPerSecond": 500.0},
    "dedup": {
        **rocksdb_metrics(
            0,
            estimate_num_keys=100_000,
            estimate_live_data_size=3_000_000,
            total_sst_files_size=4_000_000,
            live_sst_files_size=3_500_000,
            size_all_mem_tables=2_000_000,
            estimate_table_readers_mem=100_000,
            block_cache_usage=2_600_000,
        ),
        **rocksdb_metrics(
            1,
            estimate_num_keys=50_000,
            estimate_live_data_size=1_500_000,
            total_sst_files_size=2_000_000,
            live_sst_files_size=2_000_000,
            size_all_mem_tables=1_000_000,
            estimate_table_readers_mem=50_000,
            block_cache_usage=None,  # not reported this poll
        ),
        # the shared block cache seen from a second column family of subtask 0: counted once
        f"0.{OP}.other-state.rocksdb_block-cache-usage": 2_600_000,
        f"0.{OP}.other-state.rocksdb_estimate-num-keys": 0,
        # a keyed operator that is not the de-dup one
        "0.some_window.window-contents.rocksdb_estimate-num-keys": 7.0,
    },
}


def test_rocksdb_state_per_operator_from_rest_metric_ids() -> None:
    state = memory.rocksdb_state(DEDUP_VERTICES)
    assert set(state) == {OP, "some_window"}
    d = state[OP]
    assert d["entries"] == 150_000
    assert d["live_data"] == 4_500_000 and d["sst_files"] == 6_000_000
    assert d["memtables"] == 3_000_000 and d["table_readers"] == 150_000
    assert d["block_cache"] == 2_600_000  # once per subtask, not per column family
    assert d["memory"] == 3_000_000 + 150_000  # memtables larger than the reported cache here


def test_dedup_state_bytes_per_entry_and_na_without_rocksdb() -> None:
    d = memory.dedup_state(DEDUP_VERTICES, local_dir_bytes=9_000_000)
    assert d is not None
    assert d["operators"] == [OP] and d["entries"] == 150_000
    assert d["bytes_per_entry"] == {"memory": 21.0, "live_data": 30.0, "sst_files": 40.0, "local_dir": 60.0}
    assert memory.is_dedup_operator("de-dup_by_event_id_+_resolve_markers")
    assert memory.is_dedup_operator("ingest_dedup") and not memory.is_dedup_operator("resolve_markers")
    # The job before de-dup moved into keyed state: no RocksDB metrics at all.
    assert memory.dedup_state({"v": {"0.busyTimeMsPerSecond": 1.0}}) is None
    empty = memory.dedup_state({"v": rocksdb_metrics(0, estimate_num_keys=0)})
    assert empty is not None and empty["bytes_per_entry"]["live_data"] is None


def test_dir_bytes_counts_allocated_blocks(tmp_path: Path) -> None:
    assert memory.dir_bytes(tmp_path / "missing") is None
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "000001.sst").write_bytes(b"x" * 10_000)
    used = memory.dir_bytes(tmp_path)
    assert used is not None and used >= 10_000


def test_timeline_rows_at_10_percent_steps_per_kind() -> None:
    mib = memory.MIB
    rss = [(float(t), {"client": 180 * mib, "jvm": (600 + t) * mib}) for t in range(0, 601, 5)]
    dedup = [(float(t), {"entries": t * 10}) for t in range(0, 601, 15)]
    local_dir = [(float(t), t * 1000) for t in range(0, 601, 15)]
    rows = memory.timeline(rss, 600, dedup=dedup, local_dir=local_dir)
    assert [r["pct"] for r in rows] == list(range(0, 101, 10))
    half = rows[5]
    assert half["t_s"] == 300 and half["rss_mib"] == {"client": 180.0, "jvm": 900.0}
    assert half["total_mib"] == 1080.0
    assert half["dedup"] == {"entries": 3000} and half["local_dir_bytes"] == 300_000
    assert half["pss_total_mib"] is None and half["jvm_heap"] is None  # not sampled
    # no REST sample within a minute of a row: n/a rather than a stale one
    far = memory.timeline(rss, 600, dedup=[(0.0, {"entries": 1})])
    assert far[0]["dedup"] == {"entries": 1} and far[-1]["dedup"] is None


def test_pss_and_jvm_heap_in_the_timeline_and_the_pss_check() -> None:
    mib = memory.MIB
    rss = [(float(t), {"client": 180 * mib, "jvm": 1000 * mib}) for t in range(0, 601, 5)]
    pss = [(float(t), {"client": 100 * mib, "jvm": (900 + t) * mib}) for t in range(0, 601, 5)]
    jvm = [(float(t), {"heap_used": t * mib, "heap_committed": 512 * mib}) for t in range(0, 601, 15)]
    rows = memory.timeline(rss, 600, pss=pss, jvm=jvm)
    assert rows[5]["pss_total_mib"] == 1300.0
    assert rows[5]["jvm_heap"] == {"heap_used": 300 * mib, "heap_committed": 512 * mib}
    summary = memory.pss_summary(pss, 600)
    assert summary is not None
    assert summary["peak_mib"] == 1600.0 and summary["peak_mib_by_kind"] == {"client": 100.0, "jvm": 1500.0}
    assert summary["pss_mib_at"]["50%"] == 1300.0 and summary["under_limit"] is True
    over = memory.pss_summary([(0.0, {"jvm": 3000 * mib})], 600)
    assert over is not None and over["under_limit"] is False  # 3,000 MiB > 3 * 10^9 bytes
    assert memory.pss_summary([], 600) is None


def test_chunks_bring_fresh_order_ids_everywhere_and_continue_in_event_time() -> None:
    topics = {s: f"t.{s}" for s in ("orders_db", "payments", "logistics", "behaviour")}
    first = memory.chunk_messages(0, 300, topics)
    second = memory.chunk_messages(1, 300, topics)
    ids0 = {oid for _, oid in first if oid}
    ids1 = {oid for _, oid in second if oid}
    assert len(ids0) == len(ids1) == 300
    assert not ids0 & ids1
    for (topic, key, value, partition), oid in second:
        assert partition is None
        if oid is None:
            continue
        body = json.loads(value)
        referenced = {str(body.get(f)) for f in ("order_id", "orderId", "order") if f in body}
        referenced |= {body[f][1:] for f in ("payId", "trackingNo") if f in body}
        assert referenced <= ids1, (topic, body)
        if not topic.endswith("behaviour"):
            assert key == oid.encode()

    # Chunk 1's orders start after chunk 0's, so event time moves on (nothing is late by construction).
    def created(k: int) -> list[datetime]:
        events = generate(memory.chunk_settings(k, 300))
        return [e.event_time for e in events if e.sets.get("created_time") and e.event_time is not None]

    assert min(created(1)) > max(created(0))


def test_chunk_size_keeps_generated_ids_recognisable() -> None:
    with pytest.raises(ValueError):
        memory.chunk_settings(0, 100_001)


def test_report_has_a_memory_section_only_when_measured() -> None:
    mib = memory.MIB
    rss = [
        (float(t), {"client": 180 * mib, "jvm": 650 * mib, "resolve workers": 400 * mib})
        for t in range(0, 601, 5)
    ]
    dedup = memory.dedup_state(DEDUP_VERTICES, local_dir_bytes=9_000_000)
    m = {
        "mode": "process",
        "minutes": 10,
        "rate_target": 2000,
        "achieved_send_rate": 1998,
        "distinct_order_keys": 185_000,
        "ttl": {"dedup_ttl": "2m"},
        "sample_every_s": 5.0,
        "rest_every_s": 15.0,
        "sent": 1_200_000,
        "ingested_after_drain": 1_200_000,
        "timeline": memory.timeline(rss, 600, dedup=[(300.0, dedup)]),
        "dedup": dedup,
        "checkpoint": {"id": 7, "state_size": 3_000_000, "checkpointed_size": 500_000},
        **memory.analyse(series(1000, 1), 600, ttl_s=120),
    }
    assert report._memory_lines(None) == []
    text = "\n".join(report._memory_lines(m))
    assert "**flat**" in text and "185,000" in text and "Memory rules: flat if" in text
    assert "after the first dedup_ttl (2 min)" in text and "| **yes** |" in text
    assert "| client MiB | jvm MiB | resolve workers MiB | total MiB | total PSS MiB |" in text
    assert "| 50 % | 5.0 | 180 | 650 | 400 | 1,230 | n/a | n/a | 150,000 |" in text
    assert "PSS (" not in text and "Flink JVM (REST gauges)" not in text  # not measured: not shown
    pss = [(float(t), {"client": 100 * mib, "jvm": 600 * mib}) for t in range(0, 601, 5)]
    jvm = [(float(t), {"heap_used": 200.0 * mib, "heap_committed": 400.0 * mib}) for t in range(0, 601, 15)]
    measured = {
        **m,
        "timeline": memory.timeline(rss, 600, dedup=[(300.0, dedup)], pss=pss, jvm=jvm),
        "pss": memory.pss_summary(pss, 600),
        "jvm_heap_peak": {"heap_used": 200.0 * mib, "heap_committed": 400.0 * mib},
    }
    text = "\n".join(report._memory_lines(measured))
    assert "| 50 % | 5.0 | 180 | 650 | 400 | 1,230 | 700 | 200.0 / 400.0 | 150,000 |" in text
    assert "PSS (each shared page counted once" in text and "peak 700 MiB (under 3 GB: **yes**)" in text
    assert "heap used at most 200.0 MiB of 400.0 MiB committed" in text
    assert "150,000 entries; per entry in memory 21 B" in text and "40 B in SST files" in text
    assert "20 B per entry" in text  # 3 MB checkpoint / 150,000 entries
    # The job without RocksDB de-dup state: n/a, and a results.json from before the TTL rule still renders.
    old = {k: v for k, v in m.items() if k not in ("timeline", "dedup", "fit", "slope_mib_per_min")}
    old["second_half_slope_mib_per_min"] = 1.5
    text = "\n".join(report._memory_lines(old))
    assert "De-dup entries and bytes per entry: n/a" in text and "| 1.5 (" in text


def test_ttl_overrides_cover_the_state_ttls_the_config_has() -> None:
    from lakestream.config import load_config

    env = memory.ttl_overrides("2m")
    assert "LAKESTREAM__EVENT_TIME__DEDUP_TTL" in env
    cfg = load_config(None, environ=env)
    assert cfg.event_time.dedup_ttl.total_seconds() == 120


def _poll(t: float, busy_ms: float, bp_ms: float, idle_ms: float) -> dict[str, Any]:
    times = {"0.accumulateBusyTimeMs": busy_ms, "0.accumulateBackPressuredTimeMs": bp_ms}
    return {"t": t, "vertices": {"v": {**times, "0.accumulateIdleTimeMs": idle_ms}}}


def test_busy_per_minute_shows_when_a_stage_starts_to_bound_the_job() -> None:
    from benchmarks.memory import busy_between, busy_line, busy_per_minute

    vertices = {"v": {"name": "GlobalGroupAggregate[6] -> Calc[7]", "parallelism": 1}}
    # minute 1: busy 15 of 60 s; minute 2: busy the whole minute
    samples = [_poll(0, 0, 0, 0), _poll(60, 15_000, 0, 45_000), _poll(61, 16_000, 0, 45_000)]
    samples.append(_poll(120, 75_000, 0, 45_000))
    minutes = busy_per_minute(samples, vertices, 125.0)
    assert [m["minute"] for m in minutes] == [1, 2]
    assert minutes[0]["vertices"]["GlobalGroupAggregate[6] -> Calc[7]"]["busy_max"] == 0.25
    assert minutes[1]["vertices"]["GlobalGroupAggregate[6] -> Calc[7]"]["busy_max"] == 1.0
    assert busy_between(samples, vertices, 100.0, 130.0) == {}  # one poll only: no ratio
    assert busy_line(minutes[1]["vertices"]) == "GlobalGroupAggregate[6] busy 1.00 bp 0.00"


def test_chunk_ids_keep_seven_digits_so_string_order_is_creation_order() -> None:
    topics = {s: f"t.{s}" for s in ("orders_db", "payments", "logistics", "behaviour")}
    ids = [oid for k in (0, 1, 45) for _, oid in memory.chunk_messages(k, 300, topics) if oid]
    assert all(len(oid) == 7 for oid in ids)
    created = sorted({int(oid) for oid in ids})
    assert sorted(map(str, created)) == [str(i) for i in created]
    with pytest.raises(ValueError, match="eight digits"):
        memory.chunk_messages(30_000, 300, topics)
