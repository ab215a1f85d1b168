"""``lakestream serve`` against what a hostile or careless client sends: foreign Host names (DNS
rebinding), path traversal, bad and absurd parameters, hundreds of idle connections; and what a careful
client uses: HEAD, ETag / If-None-Match, gzip, a bounded range, the OpenAPI description."""

from __future__ import annotations

import gzip
import http.client
import json
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from lakestream.config import Config, LakehouseConfig, ServeConfig
from serving.http_server import HttpServer
from serving.openapi import ENDPOINTS
from tests.support import gold_scenario
from tests.support.gold_tables import row, upsert_realtime

pytestmark = pytest.mark.integration
SECRET = "lakestream-must-not-serve-this-file"


@dataclass
class Reply:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def request(
    server: HttpServer, path: str, *, method: str = "GET", headers: Mapping[str, str] | None = None
) -> Reply:
    """One request as given (path unnormalised, headers as set; Host defaults to the server's address)."""
    host, port = server.address
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        sent = {"Host": f"{host}:{port}", **(headers or {})}
        for name, value in sent.items():
            conn.putheader(name, value)
        conn.endheaders()
        resp = conn.getresponse()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    finally:
        conn.close()


def start(root: Path, **serve: Any) -> HttpServer:
    cfg = Config(lakehouse=LakehouseConfig(root=str(root)), serve=ServeConfig(port=0, **serve))
    return HttpServer(cfg, quiet=True).start()


def scenario(folder: Path) -> Path:
    """The gold scenario under ``folder/lakehouse``, with a file beside the tables and one above them
    that a traversal would reach."""
    root = folder / "lakehouse"
    gold_scenario.write(root)
    (folder / "secret.txt").write_text(SECRET)
    (root / "secret.txt").write_text(SECRET)
    return root


@pytest.fixture(scope="module")
def lakehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One scenario for the tests that only read it."""
    return scenario(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def server(lakehouse: Path) -> Iterator[HttpServer]:
    s = start(lakehouse)
    try:
        yield s
    finally:
        s.stop()


METRICS = "/api/metrics?from=2024-06-01T00:00Z&to=2024-06-01T01:10Z"


# -- Host -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:8000",
        "127.0.0.1.evil.example",
        "localhost.evil.example",
        "[::2]:80",
        "",
        "127.0.0.1:notaport",
        "a b",
        "user@127.0.0.1",
    ],
)
def test_a_foreign_or_malformed_host_is_refused_naming_the_setting(server: HttpServer, host: str) -> None:
    for path in ("/", METRICS, "/api/today?day=2024-06-01", "/openapi.json"):
        reply = request(server, path, headers={"Host": host})
        assert reply.status == 400, (host, path, reply)
        body = reply.json()
        assert body["header"] == "Host" and "serve.allowed_hosts" in body["error"]
        assert b"window_start" not in reply.body and b"<html" not in reply.body.lower()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "LOCALHOST:1234", "[::1]:8000", "localhost."])
def test_loopback_names_are_served(server: HttpServer, host: str) -> None:
    assert request(server, METRICS, headers={"Host": host}).status == 200


def test_allowed_hosts_admit_more_names(lakehouse: Path) -> None:
    s = start(lakehouse, allowed_hosts=("metrics.example.com", "*.lake.example"))
    try:
        for host, status in [
            ("metrics.example.com", 200),
            ("metrics.example.com:8443", 200),
            ("a.lake.example", 200),
            ("b.a.lake.example", 200),
            ("lake.example", 400),
            ("evilmetrics.example.com", 400),
        ]:
            assert request(s, METRICS, headers={"Host": host}).status == status, host
    finally:
        s.stop()


# -- paths ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/../secret.txt",
        "/../../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E%2Fsecret.txt",
        "/..%2fsecret.txt",
        "/api/../secret.txt",
        "/api/metrics/../../secret.txt",
        "//secret.txt",
        "/secret.txt",
        "/lakehouse/secret.txt",
        "/gold/order_metrics_5m/_delta_log/00000000000000000000.json",
        "/serving/serve_page.html",
        "/index.html/../secret.txt",
        "/%00",
        "/api/metrics%00",
        "/" + "a/" * 2000,
    ],
)
def test_traversal_variants_get_a_json_404_and_nothing_else(server: HttpServer, path: str) -> None:
    reply = request(server, path)
    assert reply.status in (400, 404), (path, reply.status)
    assert SECRET.encode() not in reply.body and b'"add"' not in reply.body
    if reply.status == 404:
        assert "no such path" in reply.json()["error"]


def test_other_methods_get_405(server: HttpServer) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
        reply = request(server, METRICS, method=method)
        assert reply.status == 405 and "only GET and HEAD" in reply.json()["error"], method


# -- parameters -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("from=99999-01-01&to=2024-06-02", "from"),
        ("from=-1&to=2024-06-02", "from"),
        ("from=2024-13-45&to=2024-06-02", "from"),
        ("from=2024-06-01&to=" + "9" * 5000, "to"),
        ("from=2024-06-01&to=2024-06-02&as_of=-5", "as_of"),
        ("from=2024-06-01&to=2024-06-02&as_of=1e100", "as_of"),
        ("from=2024-06-01&to=2024-06-02&as_of=" + "9" * 400, "as_of"),
        ("from=2024-06-01%00&to=2024-06-02", "from"),
        ("from=%F0%9F%92%A5&to=2024-06-02", "from"),
        ("from=%ff%fe&to=2024-06-02", "from"),
        ("from=&to=2024-06-02", "from"),
        ("from=2024-06-01&to=2024-06-02&" + "&".join(f"p{i}=1" for i in range(500)), "p0"),
        ("from=2024-06-01&to=2024-06-02&from=2024-06-01", "from"),
        ("from=0001-01-01&to=9999-12-31", "to"),  # beyond serve.max_range
    ],
)
def test_bad_and_absurd_parameters_get_a_400_naming_them(
    server: HttpServer, query: str, parameter: str
) -> None:
    reply = request(server, "/api/metrics?" + query)
    assert reply.status == 400, (query[:80], reply.status, reply.body[:300])
    assert reply.headers["content-type"] == "application/json"
    assert reply.json()["parameter"] == parameter


@pytest.mark.parametrize("day", ["0000-00-00", "tomorrow", "2024-06-01T25:00", "9" * 300, "%00"])
def test_bad_days_get_a_400_naming_day(server: HttpServer, day: str) -> None:
    reply = request(server, f"/api/today?day={day}")
    assert reply.status == 400 and reply.json()["parameter"] == "day", day


def test_a_range_beyond_max_range_says_the_limit_and_how_to_page(lakehouse: Path) -> None:
    s = start(lakehouse, max_range=timedelta(hours=1))
    try:
        reply = request(s, "/api/metrics?from=2024-06-01T00:00Z&to=2024-06-01T01:10Z")
        assert reply.status == 400
        error = reply.json()["error"]
        assert "serve.max_range" in error and "1h" in error
        assert "from=2024-06-01T00:00:00Z&to=2024-06-01T01:00:00Z" in error
        # Paging as told gives every window, once.
        first = request(s, "/api/metrics?from=2024-06-01T00:00:00Z&to=2024-06-01T01:00:00Z").json()
        rest = request(s, "/api/metrics?from=2024-06-01T01:00:00Z&to=2024-06-01T01:10:00Z").json()
        whole = [(r["window_start"], r["gmv"]) for r in first + rest]
        assert whole == [(w, g) for w, _, _, g, _ in gold_scenario.expected_v2(0, 14)]
    finally:
        s.stop()


def test_an_oversized_request_line_is_refused_and_the_server_goes_on(server: HttpServer) -> None:
    # The server answers 400 and closes while the client still sends: the client may see the 400 or,
    # its unread bytes making the close a reset, the reset.
    try:
        reply = request(server, "/api/metrics?from=" + "1" * 200_000 + "&to=2024-06-02")
        assert reply.status in (400, 414, 431)
    except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected):
        pass
    assert request(server, METRICS).status == 200


# -- idle connections -----------------------------------------------------------------------------------


def test_hundreds_of_idle_connections_do_not_keep_a_request_waiting(server: HttpServer) -> None:
    host, port = server.address
    idle: list[socket.socket] = []
    try:
        for i in range(400):
            sock = socket.create_connection((host, port), timeout=10)
            if i % 2:  # half of them start a request and never finish it (slowloris)
                sock.sendall(b"GET /api/today HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            idle.append(sock)
        for _ in range(3):
            reply = request(server, METRICS)
            assert reply.status == 200 and len(reply.json()) == 14
    finally:
        for sock in idle:
            sock.close()


# -- validators, HEAD, gzip -----------------------------------------------------------------------------


def test_etag_per_gold_version_answers_304_until_a_new_commit(tmp_path: Path) -> None:
    lakehouse = scenario(tmp_path)  # this test commits to gold
    server = start(lakehouse)
    try:
        check_etags(server, lakehouse)
    finally:
        server.stop()


def check_etags(server: HttpServer, lakehouse: Path) -> None:
    first = request(server, METRICS)
    etag = first.headers["etag"]
    assert first.status == 200 and first.headers["cache-control"] == "no-cache"
    again = request(server, METRICS, headers={"If-None-Match": etag})
    assert (again.status, again.body, again.headers["etag"]) == (304, b"", etag)
    assert request(server, METRICS, headers={"If-None-Match": f'"other", {etag}'}).status == 304
    assert request(server, METRICS, headers={"If-None-Match": '"other"'}).status == 200
    # Another range of the same version is another representation.
    other = request(server, "/api/metrics?from=2024-06-01T00:00Z&to=2024-06-01T00:30Z")
    assert other.headers["etag"] != etag

    upsert_realtime(lakehouse / "gold/order_metrics_5m", [row(gold_scenario.DAY + 13 * gold_scenario.WINDOW)])
    after = request(server, METRICS, headers={"If-None-Match": etag})
    assert after.status == 200 and after.headers["etag"] != etag and after.headers["x-gold-version"] == "3"


def test_today_and_the_page_revalidate_too(server: HttpServer) -> None:
    for path in ("/api/today?day=2024-06-01", "/"):
        first = request(server, path)
        assert first.status == 200
        again = request(server, path, headers={"If-None-Match": first.headers["etag"]})
        assert again.status == 304 and again.body == b"", path


def test_head_answers_the_headers_of_get_without_a_body(server: HttpServer) -> None:
    for path in ("/", METRICS, "/api/today?day=2024-06-01", "/openapi.json"):
        get, head = request(server, path), request(server, path, method="HEAD")
        assert head.status == get.status == 200 and head.body == b"", path
        for name in ("content-type", "content-length", "etag"):
            assert head.headers.get(name) == get.headers.get(name), (path, name)
    assert request(server, "/api/metrics?from=x&to=y", method="HEAD").status == 400


def test_gzip_when_accepted(server: HttpServer) -> None:
    plain = request(server, "/api/metrics?from=2024-05-31&to=2024-06-02")
    packed = request(
        server, "/api/metrics?from=2024-05-31&to=2024-06-02", headers={"Accept-Encoding": "gzip"}
    )
    assert "content-encoding" not in plain.headers
    assert (
        packed.headers["content-encoding"] == "gzip" and "accept-encoding" in packed.headers["vary"].lower()
    )
    assert gzip.decompress(packed.body) == plain.body and len(packed.body) < len(plain.body) / 3


# -- OpenAPI --------------------------------------------------------------------------------------------


def test_the_openapi_description_is_what_the_server_takes(server: HttpServer) -> None:
    doc = request(server, "/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    assert set(doc["paths"]) == {e.path for e in ENDPOINTS}
    for e in ENDPOINTS:
        documented = {p["name"] for p in doc["paths"][e.path]["get"]["parameters"]}
        assert documented == set(e.names())
        # The server takes exactly the documented parameters: an unknown one is refused listing them.
        reply = request(server, e.path + "?zzz=1")
        assert reply.status == 400 and reply.json()["parameter"] == "zzz", e.path
        for name in documented:
            assert name in reply.json()["error"]
