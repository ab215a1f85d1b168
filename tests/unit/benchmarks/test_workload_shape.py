"""The benchmark workload's production shape: random-looking order ids and updates of old orders."""

from __future__ import annotations

import re
import statistics

import pytest

from benchmarks.workload import make_events
from devtools.sample_events import SampleSettings, generate


def test_defaults_keep_the_sequential_stream_without_revisits() -> None:
    events = make_events(3000)
    ids = {e.order_id for e in events if e.order_id is not None}
    assert all(i.isdigit() for i in ids)
    assert not any(e.revisit for e in events)
    assert generate(SampleSettings(orders=50)) == generate(SampleSettings(orders=50, update_share=0.0))


def test_random_ids_are_32_hex_chars_distinct_and_unordered() -> None:
    events = make_events(3000, order_ids="random")
    creates = [e.order_id for e in events if "created_time" in e.sets and not e.duplicate]
    assert creates and all(re.fullmatch(r"[0-9a-f]{32}", i or "") for i in creates)
    assert len(set(creates)) == len(creates)
    # Not sorted in creation order: about half of neighbouring pairs are descending.
    generated = generate(SampleSettings(orders=400, order_ids="random"))
    firsts = (e for e in generated if "created_time" in e.sets and not e.duplicate)
    by_time = sorted(firsts, key=lambda e: e.sets["created_time"])
    pairs = list(zip(by_time, by_time[1:], strict=False))
    descending = sum(1 for a, b in pairs if (a.order_id or "") > (b.order_id or ""))
    assert 0.35 < descending / len(pairs) < 0.65


@pytest.mark.parametrize("share", [0.2, 0.5])
def test_update_share_of_old_orders_holds(share: float) -> None:
    events = generate(SampleSettings(orders=3000, order_ids="random", update_share=share))
    clean = [e for e in events if not e.duplicate and not e.malformed]
    revisits = [e for e in clean if e.revisit]
    assert len(revisits) / len(clean) == pytest.approx(share, abs=0.01)
    # make_events cuts the stream at n events (late ones were moved to its end): still about the share.
    cut = [e for e in make_events(20000, order_ids="random", update_share=share) if not e.duplicate]
    assert sum(e.revisit for e in cut) / len(cut) == pytest.approx(share, abs=0.05)
    assert all(
        e.source == "orders_db" and e.sets["status"] and "created_time" not in e.sets for e in revisits
    )
    # Each revisit updates an order created before it, chosen over all of them (not just recent ones).
    created_at = {e.order_id: e.sets["created_time"] for e in clean if "created_time" in e.sets}
    assert all(created_at[e.order_id] <= e.event_time for e in revisits if e.event_time is not None)
    start = min(created_at.values())
    # Uniform over the orders so far: the order's age over the stream's age is uniform, median ~ 1/2.
    ages = [
        (e.event_time - created_at[e.order_id]) / (e.event_time - start)
        for e in revisits
        if e.event_time is not None and e.event_time > start
    ]
    assert 0.4 < statistics.median(ages) < 0.6


def test_shape_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="order_ids"):
        SampleSettings(order_ids="uuid")
    with pytest.raises(ValueError, match="update_share"):
        SampleSettings(update_share=1.0)
