"""What ``lakestream serve`` answers, in one table: each endpoint's parameters (which the service checks
requests against) and the OpenAPI 3.1 description served at ``/openapi.json``, built from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from lakestream.config import Config
from lakestream.time import format_duration


@dataclass(frozen=True)
class Param:
    """One parameter: its name, whether it must be given, what it is, an example value, and where it
    goes: the query string, or the path (``{name}`` in the endpoint's path; always given)."""

    name: str
    required: bool
    description: str
    example: str
    location: Literal["query", "path"] = "query"


@dataclass(frozen=True)
class Endpoint:
    """One path: what it returns, its parameters, the media type of a 200, what its 200 and 404 mean."""

    path: str
    summary: str
    params: tuple[Param, ...] = ()
    media_type: str = "application/json"
    ok: str = "OK; ETag names the gold version it was read from"
    not_found: str = "No gold table yet"

    def names(self) -> tuple[str, ...]:
        """The parameter names it takes, in the path and in the query."""
        return tuple(p.name for p in self.params)

    def query_names(self) -> tuple[str, ...]:
        """The query parameter names it takes."""
        return tuple(p.name for p in self.params if p.location == "query")

    def path_names(self) -> tuple[str, ...]:
        """The path parameter names (``{name}`` in its path)."""
        return tuple(p.name for p in self.params if p.location == "path")

    def required(self) -> tuple[str, ...]:
        """The query parameter names it requires (path parameters are there when the path matches)."""
        return tuple(p.name for p in self.params if p.required and p.location == "query")


_AS_OF = Param(
    "as_of",
    False,
    "Read gold as it was: a table version (an integer) or a time (ISO 8601, the newest version committed "
    "at or before it). Default: the latest version.",
    "12",
)
#: The explanations of ``lakestream explain order`` / ``explain window``, as JSON.
EXPLAIN_ORDER = "/api/explain/order/{order_id}"
EXPLAIN_WINDOW = "/api/explain/window/{time}"
_EXPLAIN_AS_OF = Param(
    "as_of",
    False,
    "Read as of a version of the table the answer starts from (silver/orders, or silver/orders_changes "
    "in the merge-on-read layout, for an order; the gold table for a window; the other tables as of that "
    "version's commit time) or a time (ISO 8601: every table as of it). Default: the latest versions.",
    "3",
)
_EXPLAINED = "OK; ETag is a digest of the answer (it changes when a table read changes)"
ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(
        "/",
        "The live page: the day's GMV and orders per window, totals, data as of.",
        (Param("day", False, "The UTC day to show, YYYY-MM-DD. Default: today.", "2024-06-01"),),
        "text/html",
    ),
    Endpoint(
        "/api/metrics",
        "The gold windows whose start is in [from, to), as `lakestream query metrics --format json` "
        "prints them; the range is at most serve.max_range.",
        (
            Param(
                "from",
                True,
                "Start of the range (inclusive), ISO 8601; a time without offset is UTC.",
                "2024-06-01T00:00:00Z",
            ),
            Param("to", True, "End of the range (exclusive), ISO 8601, after from.", "2024-06-02T00:00:00Z"),
            _AS_OF,
        ),
    ),
    Endpoint(
        "/api/today",
        "One UTC day for the page: its windows, totals, data time, late events (by event time) and "
        "quarantined records (by ingest time).",
        (Param("day", False, "The UTC day, YYYY-MM-DD (or any time in it). Default: today.", "2024-06-01"),),
    ),
    Endpoint(
        EXPLAIN_ORDER,
        "Why an order's silver fields are what they are, as `lakestream explain order --format json` "
        "prints it: per field its value, the event that set it and the events that lost, with why; the "
        "order's timeline across bronze, late, review and quarantine; the table versions read.",
        (
            Param(
                "order_id",
                True,
                "The order id, exactly as silver holds it (compared as text; URL-encode it: a '/' is %2F).",
                "1001",
                "path",
            ),
            _EXPLAIN_AS_OF,
        ),
        ok=_EXPLAINED,
        not_found="No such order (no silver row, no bronze event; the answer names existing ids nearby), "
        "or no silver table yet",
    ),
    Endpoint(
        EXPLAIN_WINDOW,
        "Why the gold window holding a time has its figures, as `lakestream explain window --format json` "
        "prints it: the gold row, the realtime and batch figures, what it counted by kind, the events "
        "left out and why, the backfills and reconcile runs that touched it; the table versions read.",
        (
            Param(
                "time",
                True,
                "A time in the window, ISO 8601 (an offset such as +08:00 is taken as written); a time "
                "without offset is UTC.",
                "2024-06-01T04:05:00Z",
                "path",
            ),
            _EXPLAIN_AS_OF,
        ),
        ok=_EXPLAINED,
        not_found="Gold has no row for that window (the answer names the nearest windows it has), or no "
        "gold table yet",
    ),
    Endpoint("/openapi.json", "This description."),
)
BY_PATH = {e.path: e for e in ENDPOINTS}

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {"type": "string", "description": "What is wrong and how to fix it."},
        "parameter": {"type": "string", "description": "The query or path parameter at fault."},
        "header": {"type": "string", "description": "The request header at fault."},
    },
}


def openapi_document(cfg: Config) -> dict[str, Any]:
    """The OpenAPI 3.1 description of the endpoints, with this server's limits filled in."""
    paths: dict[str, Any] = {}
    for e in ENDPOINTS:
        responses: dict[str, Any] = {
            "200": {"description": e.ok, "content": {e.media_type: {}}},
            "304": {"description": "Not modified: If-None-Match named the current ETag"},
            "400": {
                "description": "A bad parameter or Host header, named in the answer",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            },
        }
        if e.path.startswith("/api/"):
            responses["404"] = {
                "description": e.not_found,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            }
        op = {
            "summary": e.summary,
            "parameters": [
                {
                    "name": p.name,
                    "in": p.location,
                    "required": p.required or p.location == "path",
                    "description": p.description,
                    "schema": {"type": "string"},
                    "example": p.example,
                }
                for p in e.params
            ],
            "responses": responses,
        }
        paths[e.path] = {"get": op, "head": {**op, "summary": "As GET, without the body."}}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "lakestream serve",
            "version": "1",
            "description": (
                "Gold metrics per event-time window, served from the Delta table "
                f"{cfg.gold.table}. One /api/metrics request covers at most "
                f"{format_duration(cfg.serve.max_range)} (serve.max_range); page through longer ranges. "
                "/api/explain/... say why an order's fields or a window's figures are what they are "
                "(read from the tables at each request). Requests must name an allowed Host (loopback "
                "names and serve.allowed_hosts)."
            ),
        },
        "paths": paths,
        "components": {"schemas": {"Error": _ERROR}},
    }
