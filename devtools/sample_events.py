"""A seeded generator of messy source events, and the ground truth they must resolve to.

Used by the demo, the integration tests and the benchmarks. It speaks each raw source's own dialect
(local-time strings, fen, epoch millis, ISO with offsets) and adds the mess lakestream exists for:
duplicate deliveries, out-of-order arrival, events hours late, malformed payloads and suspicious
values. Each event records what it sets on its order (``SourceEvent.sets``), the generator's own model,
from which the tests' oracle derives the expected silver table.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

SOURCES = ("orders_db", "payments", "logistics", "behaviour")
STATUSES = ("created", "pending", "shipped", "delivered", "completed")
ADDRESSES = ("Chaoyang", "Haidian", "Xicheng", "Dongcheng", "Fengtai", "Tongzhou", "Shunyi")
LOGISTICS_STATES = ("picked_up", "in_transit", "out_for_delivery", "delivered")
MALFORMED = (b'{"op": "u", "order_id": "1', b"\x00\xff\xfe garbage \x81", b"[1, 2, 3]", b"")


@dataclass(frozen=True, slots=True)
class SourceEvent:
    """One payload as its source would publish it, with what the generator knows about it."""

    source: str
    key: bytes | None
    value: bytes
    #: True event time (UTC) when the payload has one; None for malformed payloads.
    event_time: datetime | None
    order_id: str | None
    #: "field -> value" this event sets on the order's silver row (per the resolution rules).
    sets: dict[str, Any] = field(default_factory=dict)
    duplicate: bool = False
    malformed: bool = False
    late: bool = False
    #: An update of an order created earlier in the stream (``SampleSettings.update_share``).
    revisit: bool = False


@dataclass(frozen=True, slots=True)
class SampleSettings:
    """Shape of a generated stream."""

    orders: int = 200
    start: datetime = datetime(2024, 6, 1, 4, 0, tzinfo=timezone.utc)
    source_zone: str = "Asia/Shanghai"
    duplicate_ratio: float = 0.05
    shuffle_window: int = 8
    late_ratio: float = 0.02
    late_by: timedelta = timedelta(hours=2)
    malformed_ratio: float = 0.01
    behaviour_per_order: int = 1
    seed: int = 7
    #: "sequential" (100000, 100001, ...) or "random" (32-hex-char hashes: keys spread over a table's
    #: files as production ids do, so a MERGE of any checkpoint touches most of them).
    order_ids: str = "sequential"
    #: Share of the events (before duplicates and malformed ones are added) that are updates of an
    #: order chosen uniformly among those created before; 0 keeps the stream of earlier releases.
    update_share: float = 0.0

    def __post_init__(self) -> None:
        if self.order_ids not in ("sequential", "random"):
            raise ValueError(f"order_ids must be 'sequential' or 'random', got {self.order_ids!r}")
        if not 0.0 <= self.update_share < 1.0:
            raise ValueError(f"update_share must be in [0, 1), got {self.update_share}")


def _local(ts: datetime, zone: str) -> str:
    return ts.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M:%S")


def _db_event(
    oid: str,
    uid: str,
    amount: Decimal,
    op: str,
    status: str,
    addr: str | None,
    at: datetime,
    s: SampleSettings,
    *,
    revisit: bool = False,
) -> SourceEvent:
    """One orders_db change event (c/u/d) and what it sets."""
    payload = {
        "op": op,
        "order_id": oid,
        "user_id": uid,
        "amount": str(amount),
        "status": status,
        "address": addr,
        "updated_at": _local(at, s.source_zone),
    }
    sets: dict[str, Any] = {"user_id": uid, "amount": amount, "status": status, "deleted": op == "d"}
    if addr is not None:
        sets["address"] = addr
    if op == "c":
        sets["created_time"] = at
    return SourceEvent(
        "orders_db", oid.encode(), json.dumps(payload).encode(), at, oid, sets, revisit=revisit
    )


def order_id(i: int, s: SampleSettings) -> str:
    """The id of the i-th order: sequential digits, or a 32-hex-char hash of (seed, i)."""
    if s.order_ids == "random":
        return hashlib.blake2b(f"{s.seed}:{i}".encode(), digest_size=16).hexdigest()
    return f"{100000 + i}"


def _order_events(
    oid: str, uid: str, t0: datetime, rng: random.Random, s: SampleSettings
) -> list[SourceEvent]:
    """One order's life: create, updates, payment, logistics, sometimes a delete; event times increase."""
    events: list[SourceEvent] = []
    t = t0
    amount = Decimal(rng.randint(100, 99_999)) / 100
    address = rng.choice(ADDRESSES)

    def db(op: str, status: str, addr: str | None, at: datetime) -> SourceEvent:
        return _db_event(oid, uid, amount, op, status, addr, at, s)

    events.append(db("c", "created", None if rng.random() < 0.3 else address, t))
    for _ in range(rng.randint(0, 2)):
        t += timedelta(seconds=rng.randint(5, 600))
        events.append(db("u", rng.choice(STATUSES), rng.choice(ADDRESSES), t))
    if rng.random() < 0.8:
        t += timedelta(seconds=rng.randint(5, 600))
        fen = int(amount * 100)
        pay = {"payId": f"P{oid}", "orderId": oid, "payMoney": fen, "paidAt": int(t.timestamp() * 1000)}
        sets = {"paid_amount": Decimal(fen) / 100, "status": "paid"}
        events.append(SourceEvent("payments", oid.encode(), json.dumps(pay).encode(), t, oid, sets))
        for state in LOGISTICS_STATES[: rng.randint(0, len(LOGISTICS_STATES))]:
            t += timedelta(seconds=rng.randint(60, 3600))
            push = {"trackingNo": f"T{oid}", "order": oid, "state": state, "ts": t.isoformat()}
            events.append(
                SourceEvent(
                    "logistics", oid.encode(), json.dumps(push).encode(), t, oid, {"logistics_state": state}
                )
            )
    if rng.random() < 0.05:
        t += timedelta(seconds=rng.randint(5, 600))
        events.append(db("d", "cancelled", None, t))
    for _ in range(s.behaviour_per_order):
        bt = t0 + timedelta(seconds=rng.randint(0, 900))
        log: dict[str, Any] = {
            "uid": uid,
            "event": rng.choice(["view", "click", "add_cart"]),
            "ts": int(bt.timestamp() * 1000),
        }
        if rng.random() < 0.7:
            log["orderId"] = oid
        events.append(
            SourceEvent("behaviour", uid.encode(), json.dumps(log).encode(), bt, log.get("orderId"))
        )
    return events


def generate(settings: SampleSettings | None = None) -> list[SourceEvent]:
    """The whole stream in arrival order (per source), deterministic for a given seed."""
    s = settings or SampleSettings()
    rng = random.Random(s.seed)
    produced: list[SourceEvent] = []
    created: list[SourceEvent] = []  # each order's create event (its id, user and amount)
    owed = 0.0  # updates of earlier orders due, so that they are update_share of the events
    for i in range(s.orders):
        t0 = s.start + timedelta(seconds=i * 3)
        life = _order_events(order_id(i, s), f"U{rng.randint(1, max(2, s.orders // 4))}", t0, rng, s)
        produced.extend(life)
        if s.update_share > 0:
            owed += len(life) * s.update_share / (1 - s.update_share)
            while owed >= 1 and created:
                owed -= 1
                old = created[rng.randrange(len(created))]
                assert old.order_id is not None
                at = t0 + timedelta(seconds=rng.randint(0, 900))
                status, addr = rng.choice(STATUSES), rng.choice(ADDRESSES)
                uid, amount = old.sets["user_id"], old.sets["amount"]
                produced.append(_db_event(old.order_id, uid, amount, "u", status, addr, at, s, revisit=True))
            created.append(life[0])
    produced.sort(key=lambda e: e.event_time or s.start)
    # Out of order: shuffle inside small windows.
    arrival: list[SourceEvent] = []
    for i in range(0, len(produced), max(1, s.shuffle_window)):
        window = produced[i : i + s.shuffle_window]
        rng.shuffle(window)
        arrival.extend(window)
    # Late: move some events far towards the end, beyond any watermark bound.
    late_n = int(len(arrival) * s.late_ratio)
    for _ in range(late_n):
        idx = rng.randrange(len(arrival) // 2)
        ev = arrival.pop(idx)
        arrival.append(_replace(ev, late=True))
    # Duplicates: the same bytes delivered again a little later.
    for _ in range(int(len(arrival) * s.duplicate_ratio)):
        idx = rng.randrange(len(arrival))
        ev = arrival[idx]
        arrival.insert(min(len(arrival), idx + rng.randint(1, 20)), _replace(ev, duplicate=True))
    for _ in range(int(len(arrival) * s.malformed_ratio)):
        src = rng.choice(SOURCES)
        arrival.insert(
            rng.randrange(len(arrival)),
            SourceEvent(src, None, rng.choice(MALFORMED), None, None, malformed=True),
        )
    return arrival


def _replace(ev: SourceEvent, **changes: Any) -> SourceEvent:
    data = {f: getattr(ev, f) for f in SourceEvent.__dataclass_fields__}
    data.update(changes)
    return SourceEvent(**data)


def by_source(events: list[SourceEvent]) -> dict[str, list[SourceEvent]]:
    """Split the stream per source, keeping arrival order (one topic per source)."""
    out: dict[str, list[SourceEvent]] = {name: [] for name in SOURCES}
    for ev in events:
        out[ev.source].append(ev)
    return out


def produce(bootstrap_servers: str, topics: dict[str, str], events: list[SourceEvent]) -> dict[str, int]:
    """Send events to their source topics with kafka-python (acks=all, in order per source)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap_servers, acks="all", linger_ms=5, max_in_flight_requests_per_connection=1
    )
    counts: dict[str, int] = {}
    try:
        for ev in events:
            producer.send(topics[ev.source], key=ev.key, value=ev.value)
            counts[ev.source] = counts.get(ev.source, 0) + 1
        producer.flush()
    finally:
        producer.close()
    return counts
