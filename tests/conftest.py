"""Shared fixtures: one real local Kafka broker and one local S3 server per test session, isolated
lakehouse folders."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

from tests.support.cli import run_cli

if TYPE_CHECKING:
    from devtools.s3_server import LocalS3

# No per-example deadline: the property tests check results, not timings, and the 2-core machines they
# run on are often loaded (an example that took 20 ms once took 860 ms under a parallel build).
settings.register_profile("lakestream", deadline=None)
settings.load_profile("lakestream")


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap address of a real single-node KRaft broker on loopback, for the whole session."""
    from devtools.kafka_broker import LocalKafka

    with LocalKafka.start(data_dir=tmp_path_factory.mktemp("kafka")) as broker:
        yield broker.bootstrap_servers


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalS3]:
    """A real local S3-compatible server (S3Proxy) on loopback, for the whole session.

    Tests make their own buckets (``s3.create_bucket``) and pass ``s3.storage_options()`` to delta-rs.
    """
    from devtools.s3_server import LocalS3

    with LocalS3.start(data_dir=tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture
def lakehouse(tmp_path: Path) -> Path:
    """An empty lakehouse root for one test."""
    root = tmp_path / "lakehouse"
    root.mkdir()
    return root


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.integration)])
def any_lakehouse(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty lakehouse root on either back end: a local folder, or ``s3://`` on the session's server.

    On S3 it is the server's own folder of a fresh bucket (one file per object, so checks may read it
    as a folder) carrying the ``s3://`` root and the AWS variables a ``lakestream`` process needs; the
    test's own environment gets them too, so delta-rs in the test reaches ``s3://`` URIs as it is.
    """
    if request.param == "local":
        root = tmp_path / "lakehouse"
        root.mkdir()
        return root
    from tests.support.delta_tables import StoredTable

    server: LocalS3 = request.getfixturevalue("s3")
    bucket = f"lh-{uuid.uuid4().hex[:12]}"
    server.create_bucket(bucket)
    view = server.buckets_dir / bucket / "lakehouse"
    for key, value in server.storage_options().items():
        monkeypatch.setenv(key, value)
    return StoredTable.at(view, uri=f"s3://{bucket}/lakehouse", options=server.storage_options())


@pytest.fixture
def cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``cli("land", "--topic", ...)`` runs the lakestream CLI in a fresh process and checks its exit code."""
    return run_cli
