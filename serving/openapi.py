"""What ``lakestream serve`` answers, in one table: each endpoint's parameters (which the service checks
requests against) and the OpenAPI 3.1 description served at ``/openapi.json``, built from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lakestream.config import Config
from lakestream.time import format_duration


@dataclass(frozen=True)
class Param:
    """One query parameter: its name, whether it must be given, what it is, an example value."""

    name: str
    required: bool
    description: str
    example: str


@dataclass(frozen=True)
class Endpoint:
    """One path: what it returns, its query parameters, the media type of a 200."""

    path: str
    summary: str
    params: tuple[Param, ...] = ()
    media_type: str = "application/json"

    def names(self) -> tuple[str, ...]:
        """The parameter names it takes."""
        return tuple(p.name for p in self.params)

    def required(self) -> tuple[str, ...]:
        """The parameter names it requires."""
        return tuple(p.name for p in self.params if p.required)


_AS_OF = Param(
    "as_of",
    False,
    "Read gold as it was: a table version (an integer) or a time (ISO 8601, the newest version committed "
    "at or before it). Default: the latest version.",
    "12",
)
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
    Endpoint("/openapi.json", "This description."),
)
BY_PATH = {e.path: e for e in ENDPOINTS}

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {"type": "string", "description": "What is wrong and how to fix it."},
        "parameter": {"type": "string", "description": "The query parameter at fault."},
        "header": {"type": "string", "description": "The request header at fault."},
    },
}


def openapi_document(cfg: Config) -> dict[str, Any]:
    """The OpenAPI 3.1 description of the endpoints, with this server's limits filled in."""
    paths: dict[str, Any] = {}
    for e in ENDPOINTS:
        responses: dict[str, Any] = {
            "200": {
                "description": "OK; ETag names the gold version it was read from",
                "content": {e.media_type: {}},
            },
            "304": {"description": "Not modified: If-None-Match named the current ETag"},
            "400": {
                "description": "A bad parameter or Host header, named in the answer",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            },
        }
        if e.path.startswith("/api/"):
            responses["404"] = {
                "description": "No gold table yet",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            }
        op = {
            "summary": e.summary,
            "parameters": [
                {
                    "name": p.name,
                    "in": "query",
                    "required": p.required,
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
                "Requests must name an allowed Host (loopback names and serve.allowed_hosts)."
            ),
        },
        "paths": paths,
        "components": {"schemas": {"Error": _ERROR}},
    }
