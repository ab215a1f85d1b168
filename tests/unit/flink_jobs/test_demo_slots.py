"""``lakestream demo`` with ``flink.jobmanager``: the cluster's slots are checked before anything starts."""

from __future__ import annotations

import json
import socketserver
import threading
from collections.abc import Iterator

import pytest

from demo.run_demo import check_demo_slots
from lakestream.config import load_config
from runtime.cluster_slots import InsufficientSlotsError
from runtime.flink_env import FlinkRuntimeError


def serve(answer: bytes) -> Iterator[str]:
    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.recv(4096)
            self.request.sendall(answer)

    with socketserver.TCPServer(("127.0.0.1", 0), Handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()


@pytest.fixture
def overview() -> Iterator[str]:
    body = json.dumps({"taskmanagers": 1, "slots-total": 1, "slots-available": 1}).encode()
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    yield from serve(head.encode() + body)


@pytest.fixture
def not_http() -> Iterator[str]:
    yield from serve(b"\x15\x03\x01\x00\x02\x02\x28")  # what a TLS endpoint says to plain HTTP


def test_a_one_slot_cluster_refuses_the_default_parallelism(overview: str) -> None:
    cfg = load_config(environ={"LAKESTREAM__FLINK__JOBMANAGER": overview})
    with pytest.raises(InsufficientSlotsError, match=rf"needs 2 slots .* at {overview} has 1 free of 1"):
        check_demo_slots(cfg)
    fits = load_config(
        environ={"LAKESTREAM__FLINK__JOBMANAGER": overview, "LAKESTREAM__FLINK__PARALLELISM": "1"}
    )
    check_demo_slots(fits)


def test_an_address_that_is_no_flink_rest_api_names_the_setting(not_http: str) -> None:
    cfg = load_config(environ={"LAKESTREAM__FLINK__JOBMANAGER": not_http})
    with pytest.raises(
        FlinkRuntimeError, match=r"cannot read the Flink REST API .*LAKESTREAM__FLINK__JOBMANAGER"
    ):
        check_demo_slots(cfg)
