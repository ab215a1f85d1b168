"""``lakestream serve``: the served gold metrics as JSON and a live page, over HTTP.

  GET /                                   the page: today's GMV and orders per window, running totals,
                                          "data as of", late and quarantined counts; refreshes itself
  GET /api/metrics?from=T1&to=T2[&as_of=V|T]   the windows of [T1, T2) (at most serve.max_range), as
                                          `lakestream query metrics --format json` prints them
  GET /api/today[?day=YYYY-MM-DD]         one UTC day (default: today) for the page
  GET /api/explain/order/ID[?as_of=V|T]   why the order's fields are what they are, as
                                          `lakestream explain order --format json` prints it
  GET /api/explain/window/T[?as_of=V|T]   why the gold window holding T has its figures, as
                                          `lakestream explain window --format json` prints it
  GET /openapi.json                       the OpenAPI description of the above

HEAD too; answers carry an ETag per gold version (If-None-Match: 304) and are gzip-compressed when the
client accepts it; an explanation is read at each request and its ETag is a digest of it. Requests must
name an allowed Host (loopback names, ``serve.allowed_hosts``). Loopback only unless
``serve.allow_remote`` (``--allow-remote``): there is no authentication. The gold table is read once per
version (``serving.gold_cache.GoldCache``); a request slices prepared JSON.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from lakestream.config import Config
from lakestream.time import (
    TimeArgError,
    format_duration,
    iso_utc,
    parse_as_of,
    parse_range,
    parse_time,
    utc_day,
)
from serving.explain_format import order_json, window_json
from serving.explain_read import EXPLAIN_TIMES, read_order, read_window
from serving.gold_cache import GoldCache, GoldSnapshot
from serving.gold_read import (
    LATE_TABLE,
    QUARANTINE_TABLE,
    DayCounts,
    GoldMissingError,
    GoldReadError,
)
from serving.openapi import BY_PATH, EXPLAIN_ORDER, EXPLAIN_WINDOW
from storage.time_travel import OutOfReachError


class BadRequest(ValueError):
    """A query parameter is missing, unknown or malformed (HTTP 400); the message names it.

    Not a ``LakestreamError``: the request handler turns it into a 400 response, it never ends a command.
    """

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


def _params(query: str, path: str) -> dict[str, str]:
    """The query string's parameters for ``path``: each at most once, all known, the required ones there."""
    endpoint = BY_PATH[path]
    known, required = endpoint.query_names(), endpoint.required()
    raw = parse_qs(query, keep_blank_values=True)
    unknown = sorted(set(raw) - set(known))
    if unknown:
        takes = f"takes {', '.join(known)}" if known else "takes no parameters"
        if endpoint.path_names():
            takes += f" in the query ({', '.join(endpoint.path_names())}: in the path)"
        raise BadRequest(unknown[0], f"unknown parameter {unknown[0]!r}; this endpoint {takes}")
    for name, values in raw.items():
        if len(values) > 1:
            raise BadRequest(name, f"parameter {name!r} is given {len(values)} times; give it once")
    for name in required:
        if name not in raw or not raw[name][0].strip():
            raise BadRequest(
                name, f"parameter {name!r} is required (an ISO 8601 time such as 2024-06-01T04:00Z)"
            )
    return {name: values[0] for name, values in raw.items()}


@dataclass(frozen=True)
class Answer:
    """What an endpoint answers: its validator, how to build the body (only when it is sent), headers."""

    etag: str
    build: Callable[[], bytes]
    headers: Mapping[str, str] = field(default_factory=dict)


def _digest(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:16]


def _explain_as_of(text: str | None) -> int | datetime | None:
    """An explanation's ``as_of``: None (the latest versions), a version or a time; else 400."""
    if text is None:
        return None
    try:
        return parse_as_of(text, name="as_of")
    except TimeArgError as exc:
        raise BadRequest("as_of", str(exc)) from None


def _out_of_reach(exc: OutOfReachError) -> BadRequest:
    """An ``as_of`` no table read can reach, as a 400 naming ``as_of`` (the reader says ``--as-of``)."""
    message = str(exc)
    if message.startswith("--as-of"):
        message = "as_of" + message[len("--as-of") :]
    return BadRequest("as_of", message)


def _explained(document: dict[str, Any], headers: Mapping[str, str] | None = None) -> Answer:
    """An explanation's answer: its JSON, validated by a digest of it (the read decides what changes)."""
    body = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()
    etag = f'W/"explain-{hashlib.sha256(body).hexdigest()[:16]}"'
    return Answer(etag=etag, build=lambda: body, headers=headers or {})


class MetricsService:
    """What the endpoints answer, independent of HTTP: gold read through per-version caches,
    explanations read from the tables at each request."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.gold = GoldCache(cfg.lakehouse.table_uri(cfg.gold.table), cfg.gold.window)
        self.late = DayCounts(cfg.lakehouse.table_uri(LATE_TABLE), "event_time")
        self.quarantine = DayCounts(cfg.lakehouse.table_uri(QUARANTINE_TABLE), "ingest_time")

    def check(self, path: str, query: str) -> None:
        """``BadRequest`` unless ``query`` has only ``path``'s parameters, each once, the required ones."""
        _params(query, path)

    def metrics(self, query: str) -> Answer:
        """``/api/metrics``: the JSON array of the windows of ``[from, to)``, validated by gold version.

        A range longer than ``serve.max_range`` is refused (one answer stays a bounded size).
        """
        p = _params(query, "/api/metrics")
        for name in ("from", "to"):
            try:
                parse_time(p[name], name=name)
            except TimeArgError as exc:
                raise BadRequest(name, str(exc)) from None
        try:
            start, end = parse_range(p["from"], p["to"], names=("from", "to"))
        except TimeArgError as exc:
            raise BadRequest("to", str(exc)) from None
        limit = self.cfg.serve.max_range
        if end - start > limit:
            raise BadRequest(
                "to",
                f"from {iso_utc(start)} to {iso_utc(end)} spans {format_duration(end - start)}; one request "
                f"covers at most {format_duration(limit)} (serve.max_range): ask for from={iso_utc(start)}"
                f"&to={iso_utc(start + limit)}, then go on from its end",
            )
        snap = self._snapshot(p.get("as_of"))
        return Answer(
            etag=f'W/"gold-{snap.version}-{_digest(start, end)}"',
            build=lambda: snap.json_array(start, end),
            headers={"X-Gold-Version": str(snap.version)},
        )

    def _snapshot(self, as_of: str | None) -> GoldSnapshot:
        if as_of is None:
            return self.gold.latest()
        try:
            at = parse_as_of(as_of, name="as_of")
            return self.gold.at(at)
        except GoldMissingError:
            raise
        except (TimeArgError, GoldReadError) as exc:
            raise BadRequest("as_of", str(exc)) from None

    def today(self, query: str, now: datetime | None = None) -> Answer:
        """``/api/today``: one UTC day's windows, totals, data time, the day's late events (by event time)
        and quarantined records (by ingest time: they have no event time to trust).

        Its ETag is weak: it names the versions of gold, late and quarantine the numbers come from, and
        a 304 leaves the client its older ``generated_at``.
        """
        p = _params(query, "/api/today")
        when = now or datetime.now(timezone.utc)
        if "day" in p:
            try:
                when = parse_time(p["day"], name="day")
            except TimeArgError as exc:
                raise BadRequest("day", str(exc)) from None
        start, end = utc_day(when)
        head: dict[str, Any] = {
            "day": start.strftime("%Y-%m-%d"),
            "window_seconds": int(self.cfg.gold.window / timedelta(seconds=1)),
            "generated_at": iso_utc(datetime.now(timezone.utc)),
            "refresh_ms": int(self.cfg.serve.refresh.total_seconds() * 1000),
            "late": self.late.count(start, end),
            "late_counted_by": self.late.column,
            "quarantined": self.quarantine.count(start, end),
            "quarantined_counted_by": self.quarantine.column,
        }
        try:
            snap = self.gold.latest()
        except GoldMissingError as exc:
            head.update(gold_version=None, note=str(exc), batch_through=None, data_time=None, totals=None)
            missing = json.dumps({**head, "windows": []}).encode()
            return Answer(etag=self._today_tag(head["day"], None), build=lambda: missing)
        served = snap.between(start, end)
        through = snap.batch_through
        times = [s.row.data_time for s in served if s.row.data_time is not None]
        last = served[-1].day if served else None
        head.update(
            gold_version=snap.version,
            batch_through=None if through is None else iso_utc(through),
            data_time=iso_utc(max(times)) if times else None,
            totals=None
            if last is None
            else {
                "events": last.events,
                "orders_created": last.orders_created,
                "payments": last.payments,
                "gmv": f"{last.gmv:.2f}",
            },
        )
        body = json.dumps(head, separators=(",", ":")).encode()
        whole = body[:-1] + b',"windows":' + snap.json_array(start, end) + b"}"
        return Answer(
            etag=self._today_tag(head["day"], snap.version),
            build=lambda: whole,
            headers={"X-Gold-Version": str(snap.version)},
        )

    def explain_order(self, order_id: str, query: str) -> Answer:
        """``/api/explain/order/{order_id}``: what ``lakestream explain order --format json`` prints.

        Read from the tables at each request (not cached: it reads the order's bronze files, few and
        pruned by statistics). 404 (``ExplainError``) when neither silver nor bronze has the order.
        """
        p = _params(query, EXPLAIN_ORDER)
        if not order_id:
            raise BadRequest("order_id", "order_id is empty: give the order id after /api/explain/order/")
        at = _explain_as_of(p.get("as_of"))
        try:
            explanation, versions = read_order(self.cfg, order_id, at)
        except OutOfReachError as exc:
            if at is None:
                raise
            raise _out_of_reach(exc) from None
        return _explained(order_json(explanation, versions))

    def explain_window(self, time: str, query: str) -> Answer:
        """``/api/explain/window/{time}``: what ``lakestream explain window --format json`` prints for
        the gold window holding ``time``, read at each request; header ``X-Gold-Version``. 404
        (``ExplainError``) when gold has no row for that window."""
        p = _params(query, EXPLAIN_WINDOW)
        try:
            when = parse_time(time, name="time")
        except TimeArgError as exc:
            raise BadRequest("time", str(exc)) from None
        low, high = EXPLAIN_TIMES
        if not low <= when < high:
            raise BadRequest(
                "time", f"time {time!r}: give a time from {iso_utc(low)} to before {iso_utc(high)}"
            )
        at = _explain_as_of(p.get("as_of"))
        try:
            explanation, facts, versions = read_window(self.cfg, when, at)
        except OutOfReachError as exc:
            if at is None:
                raise
            raise _out_of_reach(exc) from None
        return _explained(
            window_json(explanation, facts, versions),
            {"X-Gold-Version": str(versions.point.version)},
        )

    def _today_tag(self, day: str, gold_version: int | None) -> str:
        versions = (gold_version, self.late.version, self.quarantine.version)
        return f'W/"today-{day}-{_digest(*versions)}"'


def page(cfg: Config) -> bytes:
    """The live page (``serving/serve_page.html``), with the refresh interval filled in."""
    text = resources.files("serving").joinpath("serve_page.html").read_text(encoding="utf-8")
    return text.replace("__REFRESH_MS__", str(int(cfg.serve.refresh.total_seconds() * 1000))).encode()
