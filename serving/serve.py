"""``lakestream serve``: the served gold metrics as JSON and a live page, over HTTP (standard library).

  GET /                                   the page: today's GMV and orders per window, running totals,
                                          "data as of", late and quarantined counts; refreshes itself
  GET /api/metrics?from=T1&to=T2[&as_of=V|T]   the windows of [T1, T2), as `lakestream query metrics
                                          --format json` prints them
  GET /api/today[?day=YYYY-MM-DD]         one UTC day (default: today) for the page

Loopback only unless ``serve.allow_remote`` (``--allow-remote``): there is no authentication. The gold
table is read once per version (``serving.gold_read.GoldCache``); a request slices prepared JSON.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from lakestream.config import Config, ConfigError
from lakestream.time import TimeArgError, iso_utc, parse_as_of, parse_range, parse_time, utc_day
from serving.gold_cache import GoldCache, GoldSnapshot
from serving.gold_read import (
    LATE_TABLE,
    QUARANTINE_TABLE,
    DayCounts,
    GoldMissingError,
    GoldReadError,
)
from serving.metrics_view import GoldDataError


class BadRequest(ValueError):
    """A query parameter is missing, unknown or malformed (HTTP 400); the message names it.

    Not a ``LakestreamError``: the request handler turns it into a 400 response, it never ends a command.
    """

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


def _params(query: str, known: tuple[str, ...], required: tuple[str, ...] = ()) -> dict[str, str]:
    """The query string's parameters, each at most once, all of them known, the required ones there."""
    raw = parse_qs(query, keep_blank_values=True)
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise BadRequest(
            unknown[0], f"unknown parameter {unknown[0]!r}; this endpoint takes {', '.join(known)}"
        )
    for name, values in raw.items():
        if len(values) > 1:
            raise BadRequest(name, f"parameter {name!r} is given {len(values)} times; give it once")
    for name in required:
        if name not in raw or not raw[name][0].strip():
            raise BadRequest(
                name, f"parameter {name!r} is required (an ISO 8601 time such as 2024-06-01T04:00Z)"
            )
    return {name: values[0] for name, values in raw.items()}


class MetricsService:
    """What the endpoints answer, independent of HTTP: reads through per-version caches."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.gold = GoldCache(cfg.lakehouse.table_uri(cfg.gold.table), cfg.gold.window)
        self.late = DayCounts(cfg.lakehouse.table_uri(LATE_TABLE))
        self.quarantine = DayCounts(cfg.lakehouse.table_uri(QUARANTINE_TABLE))

    def metrics(self, query: str) -> tuple[bytes, int]:
        """``/api/metrics``: the JSON array of the windows of ``[from, to)`` and the gold version."""
        p = _params(query, ("from", "to", "as_of"), required=("from", "to"))
        for name in ("from", "to"):
            try:
                parse_time(p[name], name=name)
            except TimeArgError as exc:
                raise BadRequest(name, str(exc)) from None
        try:
            start, end = parse_range(p["from"], p["to"], names=("from", "to"))
        except TimeArgError as exc:
            raise BadRequest("to", str(exc)) from None
        snap = self._snapshot(p.get("as_of"))
        return snap.json_array(start, end), snap.version

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

    def today(self, query: str, now: datetime | None = None) -> bytes:
        """``/api/today``: one UTC day's windows, totals, data time, late and quarantined counts."""
        p = _params(query, ("day",))
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
            "quarantined": self.quarantine.count(start, end),
        }
        try:
            snap = self.gold.latest()
        except GoldMissingError as exc:
            head.update(gold_version=None, note=str(exc), batch_through=None, data_time=None, totals=None)
            return json.dumps({**head, "windows": []}).encode()
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
        return body[:-1] + b',"windows":' + snap.json_array(start, end) + b"}"


def page(cfg: Config) -> bytes:
    """The live page (``serving/serve_page.html``), with the refresh interval filled in."""
    text = resources.files("serving").joinpath("serve_page.html").read_text(encoding="utf-8")
    return text.replace("__REFRESH_MS__", str(int(cfg.serve.refresh.total_seconds() * 1000))).encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    service: MetricsService
    page: bytes
    quiet: bool


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def _send(self, status: int, body: bytes, kind: str, headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str, parameter: str | None = None) -> None:
        body: dict[str, Any] = {"error": message}
        if parameter is not None:
            body["parameter"] = parameter
        self._send(status, json.dumps(body).encode(), "application/json")

    def do_GET(self) -> None:  # noqa: N802 - the name http.server dispatches to
        """Route ``/``, ``/api/metrics`` and ``/api/today``; errors as JSON ``{"error": ...}``."""
        url = urlsplit(self.path)
        service = self.server.service
        try:
            if url.path in ("/", "/index.html"):
                self._send(HTTPStatus.OK, self.server.page, "text/html; charset=utf-8")
            elif url.path == "/api/metrics":
                body, version = service.metrics(url.query)
                self._send(HTTPStatus.OK, body, "application/json", {"X-Gold-Version": str(version)})
            elif url.path == "/api/today":
                self._send(HTTPStatus.OK, service.today(url.query), "application/json")
            else:
                self._error(
                    HTTPStatus.NOT_FOUND, f"no such path {url.path}; try /, /api/metrics or /api/today"
                )
        except BadRequest as exc:
            self._error(HTTPStatus.BAD_REQUEST, str(exc), exc.parameter)
        except GoldMissingError as exc:
            self._error(HTTPStatus.NOT_FOUND, str(exc))
        except (GoldReadError, GoldDataError) as exc:
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, str(exc))
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as exc:  # a bug: keep serving, say so, log the traceback
            traceback.print_exc(file=sys.stderr)
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"internal error: {type(exc).__name__}: {exc}")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        """One line per request on stderr unless the server is quiet."""
        if not self.server.quiet:
            super().log_message(format, *args)


def make_server(cfg: Config, *, quiet: bool = False) -> ThreadingHTTPServer:
    """A bound (not yet serving) server on ``serve.host``:``serve.port`` (port 0: a free one)."""
    try:
        server = _Server((cfg.serve.host, cfg.serve.port), _Handler)
    except OSError as exc:
        raise ConfigError(
            f"serve.host/serve.port: cannot listen on {cfg.serve.host}:{cfg.serve.port} ({exc.strerror}); "
            "pass another --port (0: a free one) or --host"
        ) from None
    server.service = MetricsService(cfg)
    server.page = page(cfg)
    server.quiet = quiet
    return server
