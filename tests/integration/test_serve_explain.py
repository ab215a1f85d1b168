"""``lakestream serve``'s explanations over real HTTP: ``/api/explain/order/{order_id}`` and
``/api/explain/window/{time}`` answer what ``lakestream explain ... --format json`` prints.

The lakehouse is small and real, written with delta-rs as the jobs write it (no Kafka, no Flink): bronze
and late rows of standard events, silver folded from bronze by ``silver_source`` and ``SILVER_MERGE``
(one version before an update, one after), gold aggregated from bronze.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from lakestream.adapters import orders_db, payments
from lakestream.config import Config, LakehouseConfig, ServeConfig
from lakestream.gold import GoldSettings, aggregate, ensure_gold_table, gold_inputs, gold_rows
from lakestream.progress import kafka_key, progress_app_id
from lakestream.silver import SILVER_MERGE, SILVER_SCHEMA, silver_source
from lakestream.standard import StandardEvent, bronze_batch, late_batch
from lakestream.table_names import BRONZE_TABLE, LATE_TABLE, SILVER_TABLE
from lakestream.time import iso_utc, utc_from_ms
from serving.explain_format import order_json, window_json
from serving.explain_read import read_order, read_window
from serving.http_server import HttpServer
from serving.openapi import EXPLAIN_ORDER, EXPLAIN_WINDOW
from sinks.ownership import EOI_CHECKPOINT_ID
from storage.delta_log import DeltaLog
from tests.integration.test_serve_hostile import Reply

pytestmark = pytest.mark.integration
UTC = timezone.utc
T0 = datetime(2024, 6, 1, 4, 0, tzinfo=UTC)
#: An order id that needs URL-encoding: a "/", a space and a "?".
ODD_ID = "A/1 x?"


def event(
    event_id: str, order_id: str, kind: str, minute: float, offset: int, **fields: Any
) -> StandardEvent:
    """A VALID standard event at T0 + ``minute``: an order change (c/u) from orders_db, or a payment."""
    is_payment = kind == "payment"
    return StandardEvent(
        event_id=event_id,
        order_id=order_id,
        user_id=fields.get("user_id"),
        event_type="payment" if is_payment else {"c": "order_created", "u": "order_updated"}[kind],
        event_time=T0 + timedelta(minutes=minute),
        amount=fields.get("amount"),
        status="paid" if is_payment else fields.get("status"),
        address=fields.get("address"),
        logistics_state=None,
        op=None if is_payment else kind,  # type: ignore[arg-type]
        source=payments.SOURCE if is_payment else orders_db.SOURCE,
        raw=b"{}",
        topic="payments" if is_payment else "orders",
        partition=0,
        offset=offset,
    )


CREATED = event("e1", "1001", "c", 0, 0, user_id="u1", amount=Decimal("99.00"), address="朝阳区")
OTHER = event("e2", "1003", "c", 1, 1, user_id="u2", amount=Decimal("5.00"), address="A")
ODD = event("e3", ODD_ID, "c", 2, 2, user_id="u3", amount=Decimal("1.00"), address="B")
PAID = event("e4", "1001", "payment", 3, 0, amount=Decimal("99.00"))
PAID_AGAIN = event("e4", "1001", "payment", 3, 1, amount=Decimal("99.00"))  # a re-delivery
MOVED = event("e5", "1001", "u", 4, 3, address="海淀区")
#: Stamped an hour before the others, it arrives with them: late, older than the address it offers.
STALE = event("e6", "1001", "u", -60, 4, address="西城区")
FIRST = [CREATED, OTHER, ODD, PAID, PAID_AGAIN]
SECOND = [MOVED, STALE]


_last_commit_ms = [0]


def _commit(write: Any, uri: str, *args: Any, **kwargs: Any) -> None:
    """One commit, in a later millisecond than the one before (the tables are read as of commit times):
    it starts once the clock has passed the previous commit's own timestamp."""
    while time.time() * 1000 <= _last_commit_ms[0]:
        pass
    write(uri, *args, **kwargs)
    dt = DeltaTable(uri)
    commit = DeltaLog(uri).read_commit(dt.version())
    assert commit is not None
    _last_commit_ms[0] = commit.timestamp_ms


def _progress(events: Sequence[StandardEvent]) -> CommitProperties:
    """The progress a bronze commit of the ingest job records: per Kafka partition the next offset."""
    nexts: dict[tuple[str, int], int] = {}
    for e in events:
        nexts[(e.topic, e.partition)] = max(nexts.get((e.topic, e.partition), 0), e.offset + 1)
    app = "job/" + BRONZE_TABLE
    return CommitProperties(
        app_transactions=[
            Transaction(progress_app_id(app, kafka_key(t, p)), n) for (t, p), n in nexts.items()
        ]
    )


def _silver(uri: str, events: Sequence[StandardEvent], ingest: datetime) -> None:
    """Silver as the ingest job leaves it after ``events``: ``silver_source`` folded by ``SILVER_MERGE``."""
    offers = silver_source(pa.Table.from_batches([bronze_batch(events, ingest_time=ingest)]))
    rows = SILVER_MERGE.fold_rows(offers.to_pylist(), SILVER_SCHEMA)
    table = pa.Table.from_pylist(list(rows.values()), schema=SILVER_SCHEMA)
    _commit(write_deltalake, uri, table, mode="overwrite")


def build(root: Path) -> Config:
    """bronze v0, silver v0 (before the update), bronze v1 and late v0 (the update and the late event),
    silver v1, gold v1 (realtime rows of bronze's windows)."""
    cfg = Config(lakehouse=LakehouseConfig(root=str(root)), serve=ServeConfig(port=0))
    bronze, late, silver = (cfg.lakehouse.table_uri(t) for t in (BRONZE_TABLE, LATE_TABLE, SILVER_TABLE))
    first_ingest, second_ingest = T0 + timedelta(minutes=5), T0 + timedelta(minutes=6)
    first = pa.Table.from_batches([bronze_batch(FIRST, ingest_time=first_ingest)])
    _commit(write_deltalake, bronze, first, commit_properties=_progress(FIRST))
    _silver(silver, FIRST, first_ingest)
    batch = bronze_batch(SECOND, ingest_time=second_ingest)
    _commit(
        write_deltalake,
        bronze,
        pa.Table.from_batches([batch]),
        mode="append",
        commit_properties=_progress(SECOND),
    )
    stale = late_batch([STALE], watermark=T0 + timedelta(minutes=4), ingest_time=second_ingest)
    _commit(write_deltalake, late, pa.Table.from_batches([stale]))
    _silver(silver, FIRST + SECOND, second_ingest)
    gold = cfg.lakehouse.table_uri(cfg.gold.table)
    ensure_gold_table(gold)
    metrics = aggregate(gold_inputs(DeltaTable(bronze).to_pyarrow_table()), GoldSettings.from_config(cfg))
    rows = gold_rows(
        metrics, layer="realtime", data_time=second_ingest, source_version=1, updated_at=second_ingest
    )
    _commit(write_deltalake, gold, rows, mode="append")
    return cfg


@dataclass
class Served:
    cfg: Config
    server: HttpServer

    def get(self, path: str, *, method: str = "GET", headers: Mapping[str, str] | None = None) -> Reply:
        """One request with ``path`` sent as given (percent-encoding and all); header names lower case."""
        host, port = self.server.address
        conn = http.client.HTTPConnection(host, port, timeout=30)
        try:
            conn.request(method, path, headers=dict(headers or {}))
            resp = conn.getresponse()
            return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
        finally:
            conn.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    cfg = build(tmp_path_factory.mktemp("explain") / "lakehouse")
    server = HttpServer(cfg, quiet=True).start()
    try:
        yield Served(cfg, server)
    finally:
        server.stop()


def _as_json(document: dict[str, Any]) -> Any:
    """A document as a client reads it back (tuples become lists)."""
    return json.loads(json.dumps(document))


def _field(body: Any, name: str) -> Any:
    return next(f for f in body["fields"] if f["field"] == name)


# -- orders ---------------------------------------------------------------------------------------------


def test_an_order_is_what_explain_order_prints_and_names_each_fields_winner(served: Served) -> None:
    reply = served.get("/api/explain/order/1001")
    assert reply.status == 200 and reply.headers["content-type"] == "application/json"
    assert reply.headers["cache-control"] == "no-cache" and reply.headers["etag"].startswith('W/"explain-')
    body = reply.json()
    assert body == _as_json(order_json(*read_order(served.cfg, "1001", None)))
    assert body["read"]["from"] == SILVER_TABLE and body["read"]["version"] == 1
    assert body["read"]["tables"][BRONZE_TABLE] == 1 and body["read"]["tables"][LATE_TABLE] == 0
    address = _field(body, "address")
    assert (address["value"], address["event_id"]) == ("海淀区", "e5")
    assert address["set_by"]["coordinates"] == "orders/0@3" and address["set_by"]["bronze_version"] == 1
    assert {(o["event"]["event_id"], o["value"], o["outcome"]) for o in address["others"]} == {
        ("e1", "朝阳区", "older"),
        ("e6", "西城区", "older"),
    }
    paid = _field(body, "paid_amount")
    assert (paid["value"], paid["event_id"]) == ("99.00", "e4")
    stale = next(e for e in body["timeline"] if e["event"]["event_id"] == "e6")
    assert stale["tables"] == ["bronze", "late"] and stale["late_watermark"] == "2024-06-01T04:04:00Z"
    assert body["problems"] == []


def test_as_of_an_older_silver_version_gives_the_older_value(served: Served) -> None:
    old = served.get("/api/explain/order/1001?as_of=0")
    assert old.status == 200
    body = old.json()
    assert body == _as_json(order_json(*read_order(served.cfg, "1001", 0)))
    assert body["read"]["version"] == 0 and body["read"]["tables"][BRONZE_TABLE] == 0
    address = _field(body, "address")
    assert (address["value"], address["event_id"]) == ("朝阳区", "e1")
    assert "e5" not in {e["event"]["event_id"] for e in body["timeline"]}  # not in bronze yet then
    assert old.headers["etag"] != served.get("/api/explain/order/1001").headers["etag"]

    # As of a time: silver v0's commit time reads the same versions (every table as of that time).
    silver = served.cfg.lakehouse.table_uri(SILVER_TABLE)
    committed = next(h["timestamp"] for h in DeltaTable(silver).history() if h["version"] == 0)
    at = iso_utc(utc_from_ms(committed))
    by_time = served.get("/api/explain/order/1001?as_of=" + quote(at, safe=""))
    assert by_time.status == 200
    assert by_time.json()["read"]["tables"] == body["read"]["tables"]
    assert _field(by_time.json(), "address") == address


def test_an_unknown_order_is_a_404_naming_the_ids_nearby(served: Served) -> None:
    reply = served.get("/api/explain/order/1002")
    assert reply.status == 404 and reply.headers["content-type"] == "application/json"
    body = reply.json()
    assert "order '1002'" in body["error"] and "existing order ids nearby: 1001, 1003" in body["error"]
    assert reply.headers["cache-control"] == "no-store"


def test_order_ids_are_url_decoded_and_compared_exactly(served: Served) -> None:
    reply = served.get("/api/explain/order/" + quote(ODD_ID, safe=""))
    assert reply.status == 200, reply.body[:300]
    body = reply.json()
    assert body["order_id"] == ODD_ID and _field(body, "address")["value"] == "B"
    assert body == _as_json(order_json(*read_order(served.cfg, ODD_ID, None)))
    assert served.get("/api/explain/order/" + quote(ODD_ID.lower(), safe="")).status == 404
    assert served.get("/api/explain/order/%201001").status == 404  # " 1001" is another id


@pytest.mark.parametrize("landed", [2, EOI_CHECKPOINT_ID], ids=["skipped-commit", "end-of-input"])
def test_a_bronze_commit_of_two_checkpoints_names_the_silver_version_of_each_change(
    tmp_path: Path, landed: int
) -> None:
    """Bronze landed checkpoints 1 and 2 in one commit (a skipped COMMIT, or the end of a bounded input)
    while silver committed each: the order's creation was applied by silver's first commit, the move by
    its second; the bronze commit's own checkpoint names only the second."""
    cfg = Config(lakehouse=LakehouseConfig(root=str(tmp_path / "lakehouse")))
    bronze, silver = cfg.lakehouse.table_uri(BRONZE_TABLE), cfg.lakehouse.table_uri(SILVER_TABLE)
    ingest = datetime.now(UTC)
    both = [CREATED, MOVED]
    progress = _progress(both).app_transactions or []
    bronze_txn = CommitProperties(
        app_transactions=[*progress, Transaction(f"job/{BRONZE_TABLE}:run1:0", landed)]
    )
    _commit(
        write_deltalake,
        bronze,
        pa.Table.from_batches([bronze_batch(both, ingest_time=ingest)]),
        commit_properties=bronze_txn,
    )
    for checkpoint, events in ((1, [CREATED]), (landed, both)):
        offers = silver_source(pa.Table.from_batches([bronze_batch(events, ingest_time=ingest)]))
        rows = SILVER_MERGE.fold_rows(offers.to_pylist(), SILVER_SCHEMA)
        table = pa.Table.from_pylist(list(rows.values()), schema=SILVER_SCHEMA)
        txn = CommitProperties(app_transactions=[Transaction(f"job/{SILVER_TABLE}:run1:0", checkpoint)])
        _commit(write_deltalake, silver, table, mode="overwrite", commit_properties=txn)

    explained, _ = read_order(cfg, "1001")
    assert [
        (c.event.event_id, c.event.bronze_version, c.silver_table, c.silver_version)
        for c in explained.history
    ] == [("e1", 0, SILVER_TABLE, 0), ("e5", 0, SILVER_TABLE, 1)]


# -- windows --------------------------------------------------------------------------------------------


def test_a_window_gives_its_gold_row_and_what_it_counted_by_kind(served: Served) -> None:
    reply = served.get("/api/explain/window/2024-06-01T04:02:30Z")
    assert reply.status == 200 and reply.headers["x-gold-version"] == "1"
    body = reply.json()
    assert body == _as_json(window_json(*read_window(served.cfg, T0 + timedelta(seconds=150), None)))
    assert (body["window_start"], body["window_end"]) == ("2024-06-01T04:00:00Z", "2024-06-01T04:05:00Z")
    row = body["row"]
    assert (row["layer"], row["gmv"], row["orders_created"], row["payments"]) == ("realtime", "99.00", 3, 1)
    assert body["counted_by_kind"] == {"order_created": 3, "payment": 1, "other": 1}
    assert body["bronze_rows"] == 6 and [d["event_id"] for d in body["duplicates_left_out"]] == ["e4"]
    # The same window, the time written with an offset ('+' is literal in a path) or percent-encoded.
    for path in ("2024-06-01T12:04:59+08:00", "2024-06-01T04%3A00%3A00Z"):
        again = served.get("/api/explain/window/" + path)
        assert again.status == 200 and again.json()["window_start"] == "2024-06-01T04:00:00Z", path


def test_a_window_gold_has_no_row_for_is_a_404_naming_the_nearest(served: Served) -> None:
    reply = served.get("/api/explain/window/2024-06-01T05:00:00Z")
    assert reply.status == 404
    assert "the nearest windows it has start at 2024-06-01T04:00:00Z" in reply.json()["error"]


# -- bad input, caching, description --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "parameter", "message"),
    [
        ("/api/explain/order/1001?as_of=yesterday", "as_of", "as_of 'yesterday': expected a table version"),
        ("/api/explain/order/1001?as_of=-1", "as_of", "as_of '-1'"),
        ("/api/explain/order/1001?as_of=99", "as_of", "as_of 99: cannot load"),
        ("/api/explain/order/1001?as_of=2020-01-01", "as_of", "as_of 2020-01-01T00:00:00Z"),
        ("/api/explain/order/1001?as_of=0&as_of=1", "as_of", "given 2 times"),
        ("/api/explain/order/1001?order_id=1001", "order_id", "order_id: in the path"),
        ("/api/explain/order/", "order_id", "order_id is empty"),
        ("/api/explain/window/2024-06-01T04:00Z?as_of=soon", "as_of", "expected a table version"),
        ("/api/explain/window/2024-06-01T04:00Z?as_of=7", "as_of", "as_of 7: cannot load"),
        ("/api/explain/window/soon", "time", "time 'soon': not an ISO 8601 date or time"),
        ("/api/explain/window/06/01/2024", "time", "time '06/01/2024'"),
        ("/api/explain/window/9999-12-31T23:59Z", "time", "give a time from 1678-01-01T00:00:00Z"),
        ("/api/explain/window/2024-06-01T04:00Z?asof=1", "asof", "takes as_of in the query (time: in"),
    ],
)
def test_bad_input_is_a_400_naming_the_parameter(
    served: Served, path: str, parameter: str, message: str
) -> None:
    reply = served.get(path)
    assert reply.status == 400 and reply.headers["content-type"] == "application/json", reply.body[:300]
    body = reply.json()
    assert body["parameter"] == parameter and message in body["error"], body


def test_an_unchanged_explanation_revalidates_to_304_and_head_has_no_body(served: Served) -> None:
    for path in ("/api/explain/order/1001?as_of=1", "/api/explain/window/2024-06-01T04:00Z"):
        first = served.get(path)
        again = served.get(path, headers={"If-None-Match": first.headers["etag"]})
        assert (again.status, again.body, again.headers["etag"]) == (304, b"", first.headers["etag"]), path
        head = served.get(path, method="HEAD")
        assert head.status == 200 and head.body == b"" and head.headers["etag"] == first.headers["etag"]
        packed = served.get(path, headers={"Accept-Encoding": "gzip"})
        assert packed.headers.get("content-encoding") == "gzip", path  # the answers are over 1 KiB


def test_the_openapi_description_has_both_endpoints_with_their_path_parameter(served: Served) -> None:
    doc = served.get("/openapi.json").json()
    for path, name in ((EXPLAIN_ORDER, "order_id"), (EXPLAIN_WINDOW, "time")):
        op = doc["paths"][path]["get"]
        where = {p["name"]: (p["in"], p["required"]) for p in op["parameters"]}
        assert where == {name: ("path", True), "as_of": ("query", False)}
        assert (
            "nearest" in op["responses"]["404"]["description"]
            or "nearby" in op["responses"]["404"]["description"]
        )
