"""The memory-flat benchmark's pure parts: slope, verdict, fresh keys per input chunk, report section."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

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
    assert out["verdict"] == "flat"
    assert out["second_half_slope_mib_per_min"] == pytest.approx(1.0, abs=0.01)
    assert out["peak_mib"] == pytest.approx(1305.0)
    assert out["rss_mib_at"]["25%"] == pytest.approx(1150.0)
    assert out["rss_mib_at"]["100%"] == pytest.approx(1305.0)
    assert "2.0%" in out["rule"]


def test_growing_when_second_half_slope_exceeds_the_threshold() -> None:
    out = memory.analyse(series(1000, 40), 600)  # 40 MiB/min on ~1,300 MiB: about 3 %/min
    assert out["verdict"] == "growing"
    assert out["second_half_growth_pct_per_min"] > 2.0
    assert memory.analyse(series(1000, 40), 600, threshold_pct_per_min=5.0)["verdict"] == "flat"


def test_shrinking_memory_is_flat_and_too_few_samples_is_unknown() -> None:
    assert memory.analyse(series(2000, -30), 600)["verdict"] == "flat"
    out = memory.analyse([(0.0, 100.0), (400.0, 110.0)], 600)
    assert out["verdict"].startswith("unknown")
    assert out["second_half_slope_mib_per_min"] is None
    assert memory.analyse([], 600)["rss_mib_at"]["50%"] is None


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
    m = {
        "mode": "process",
        "minutes": 10,
        "rate_target": 2000,
        "achieved_send_rate": 1998,
        "distinct_order_keys": 185_000,
        "ttl": {"dedup_ttl": "2m"},
        "sample_every_s": 5.0,
        "sent": 1_200_000,
        "ingested_after_drain": 1_200_000,
        **memory.analyse(series(1000, 1), 600),
    }
    assert report._memory_lines(None) == []
    text = "\n".join(report._memory_lines(m))
    assert "**flat**" in text and "185,000" in text and "Memory rule: flat if" in text


def test_ttl_overrides_cover_the_state_ttls_the_config_has() -> None:
    from lakestream.config import load_config

    env = memory.ttl_overrides("2m")
    assert "LAKESTREAM__EVENT_TIME__DEDUP_TTL" in env
    cfg = load_config(None, environ=env)
    assert cfg.event_time.dedup_ttl.total_seconds() == 120
