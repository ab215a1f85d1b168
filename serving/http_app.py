"""The HTTP face of ``lakestream serve``: a Starlette app over :class:`serving.serve.MetricsService`.

Starlette routes (``GET``, and ``HEAD`` with it), compresses (``GZipMiddleware``) and runs the reads in
its thread pool; uvicorn (``serving.http_server``) is the server. Written here: the ``Host`` check,
because the refusal must name the host and the setting that admits it (Starlette's
``TrustedHostMiddleware`` answers a bare "Invalid host header"), and the validators (``ETag`` per gold
version, ``If-None-Match`` answered 304), because they come from the table's version, not the body
(an explanation's: a digest of its body). The tags are weak: the gzip and the identity body of one
answer share them. Every error is JSON ``{"error": ..., "parameter" | "header": ...}``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Collection

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from lakestream.config import Config
from serving.explain_read import ExplainError
from serving.gold_read import GoldMissingError, GoldReadError
from serving.metrics_view import GoldDataError
from serving.openapi import ENDPOINTS, EXPLAIN_ORDER, EXPLAIN_WINDOW, openapi_document
from serving.serve import Answer, BadRequest, MetricsService, page

log = logging.getLogger(__name__)

#: Host names a loopback server always answers to.
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
#: Bodies smaller than this go out uncompressed.
GZIP_MIN_BYTES = 1024
#: Clients revalidate every time (the numbers change with every commit), with the ETag to answer 304.
REVALIDATE = "no-cache"


def error(status: int, message: str, **named: str) -> JSONResponse:
    """``{"error": message, ...named}`` with ``status``; ``named`` says which parameter or header."""
    return JSONResponse(
        {"error": message, **named}, status_code=status, headers={"Cache-Control": "no-store"}
    )


def host_name(header: str) -> str | None:
    """The host of a ``Host`` header (``name``, ``name:port``, ``[v6]:port``), lower case; None: malformed."""
    value = header.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or (value[end + 1 :] and not _is_port(value[end + 1 :])):
            return None
        return value[1:end] or None
    name, colon, port = value.partition(":")
    if colon and not _is_port(":" + port):
        return None
    name = name.rstrip(".")
    if not name or any(c in name for c in " /\\@?#%\t"):
        return None
    return name


def _is_port(text: str) -> bool:
    return text.startswith(":") and text[1:].isdigit() and len(text) <= 6


def host_allowed(name: str, allowed: Collection[str]) -> bool:
    """``name`` is one of ``allowed`` or under one of its ``*.domain`` entries."""
    for entry in allowed:
        if entry.startswith("*."):
            if name.endswith(entry[1:]) and len(name) > len(entry) - 1:
                return True
        elif name == entry:
            return True
    return False


class HostCheck:
    """Answers only requests whose ``Host`` is an allowed name: a page on another site that resolves its
    own name to 127.0.0.1 (DNS rebinding) sends its own name, and is refused."""

    def __init__(self, app: ASGIApp, allowed: Collection[str]) -> None:
        self.app = app
        self.allowed = tuple(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse a request with a foreign or malformed ``Host`` (400, JSON), pass the others on."""
        if scope["type"] == "http":
            raw = Headers(scope=scope).get("host", "")
            name = host_name(raw)
            if name is None or not host_allowed(name, self.allowed):
                shown = f"Host {raw!r}" if raw else "no Host header"
                response = error(
                    400,
                    f"{shown}: this server answers to {', '.join(self.allowed)}; to reach it under "
                    "another name, add that name to serve.allowed_hosts",
                    header="Host",
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def allowed_hosts(cfg: Config) -> tuple[str, ...]:
    """Loopback names, the address the server listens on, and ``serve.allowed_hosts``."""
    names = [*LOOPBACK_NAMES, cfg.serve.host.strip("[]").lower(), *cfg.serve.allowed_hosts]
    return tuple(dict.fromkeys(n for n in names if n not in ("0.0.0.0", "::")))


def matches(if_none_match: str | None, etag: str) -> bool:
    """``If-None-Match`` names ``etag`` (weak comparison, as RFC 9110 has it for GET) or is ``*``."""
    if not if_none_match:
        return False
    bare = etag.removeprefix("W/")
    for tag in if_none_match.split(","):
        tag = tag.strip()
        if tag == "*" or tag.removeprefix("W/") == bare:
            return True
    return False


def conditional(request: Request, answer: Answer, media_type: str) -> Response:
    """304 when the client holds ``answer.etag``, else the body (built only then)."""
    headers = {"ETag": answer.etag, "Cache-Control": REVALIDATE, **answer.headers}
    if matches(request.headers.get("if-none-match"), answer.etag):
        return Response(status_code=304, headers=headers)
    return Response(answer.build(), media_type=media_type, headers=headers)


def guarded(endpoint: Callable[[Request], Response]) -> Callable[[Request], Response]:
    """The service's errors as JSON: 400 naming the parameter, 404 no gold table or nothing to explain
    there (the message names what exists nearby), 500 unreadable."""

    def run(request: Request) -> Response:
        try:
            return endpoint(request)
        except BadRequest as exc:
            return error(400, str(exc), parameter=exc.parameter)
        except (GoldMissingError, ExplainError) as exc:
            return error(404, str(exc))
        except (GoldReadError, GoldDataError) as exc:
            return error(500, str(exc))

    run.__name__ = endpoint.__name__
    return run


def route_path(path: str) -> str:
    """Starlette's pattern of an endpoint's path: a ``{name}`` takes the rest of the path, ``/`` included,
    so an order id with an encoded ``/`` (%2F, decoded before routing) is that id, not another path."""
    return re.sub(r"\{(\w+)\}", r"{\1:path}", path)


def build_app(cfg: Config, service: MetricsService | None = None) -> Starlette:
    """The app: ``/``, ``/api/metrics``, ``/api/today``, ``/api/explain/order/{order_id}``,
    ``/api/explain/window/{time}``, ``/openapi.json``; see ``serving.openapi``.

    The endpoints are plain functions: Starlette runs them in its thread pool, off the event loop.
    """
    svc = service or MetricsService(cfg)
    page_body = page(cfg)
    page_answer = Answer(
        etag=f'W/"page-{hashlib.sha256(page_body).hexdigest()[:16]}"', build=lambda: page_body
    )
    spec = json.dumps(openapi_document(cfg), indent=1).encode()

    def index(request: Request) -> Response:
        svc.check("/", request.url.query)
        return conditional(request, page_answer, "text/html; charset=utf-8")

    def metrics(request: Request) -> Response:
        return conditional(request, svc.metrics(request.url.query), "application/json")

    def today(request: Request) -> Response:
        return conditional(request, svc.today(request.url.query), "application/json")

    def explain_order(request: Request) -> Response:
        answer = svc.explain_order(str(request.path_params["order_id"]), request.url.query)
        return conditional(request, answer, "application/json")

    def explain_window(request: Request) -> Response:
        answer = svc.explain_window(str(request.path_params["time"]), request.url.query)
        return conditional(request, answer, "application/json")

    def openapi(request: Request) -> Response:
        svc.check("/openapi.json", request.url.query)
        return Response(spec, media_type="application/json")

    handlers: dict[str, Callable[[Request], Response]] = {
        "/": index,
        "/api/metrics": metrics,
        "/api/today": today,
        EXPLAIN_ORDER: explain_order,
        EXPLAIN_WINDOW: explain_window,
        "/openapi.json": openapi,
    }
    assert set(handlers) == {e.path for e in ENDPOINTS}, "serving.openapi.ENDPOINTS and the routes differ"
    routes = [
        Route(route_path(path), guarded(handler), methods=["GET"]) for path, handler in handlers.items()
    ]
    routes.append(Route("/index.html", guarded(index), methods=["GET"], include_in_schema=False))
    paths = ", ".join(e.path for e in ENDPOINTS)

    async def not_found(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 405:
            return error(405, f"{request.method} {request.url.path}: only GET and HEAD are served")
        return error(exc.status_code, f"no such path {request.url.path}; try {paths}")

    return Starlette(
        routes=routes,
        middleware=[
            Middleware(HostCheck, allowed=allowed_hosts(cfg)),
            Middleware(GZipMiddleware, minimum_size=GZIP_MIN_BYTES),
        ],
        exception_handlers={404: not_found, 405: not_found, Exception: _internal_error},
    )


async def _internal_error(_request: Request, exc: Exception) -> Response:
    """A bug: answer 500 saying what, keep serving, log the traceback."""
    log.error("internal error", exc_info=exc)
    return error(500, f"internal error: {type(exc).__name__}: {exc}")
