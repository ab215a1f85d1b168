"""Shared fixtures: one real local Kafka broker per test session, isolated lakehouse folders."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.cli import run_cli


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap address of a real single-node KRaft broker on loopback, for the whole session."""
    from devtools.kafka_broker import LocalKafka

    with LocalKafka.start(data_dir=tmp_path_factory.mktemp("kafka")) as broker:
        yield broker.bootstrap_servers


@pytest.fixture
def lakehouse(tmp_path: Path) -> Path:
    """An empty lakehouse root for one test."""
    root = tmp_path / "lakehouse"
    root.mkdir()
    return root


@pytest.fixture
def cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``cli("land", "--topic", ...)`` runs the lakestream CLI in a fresh process and checks its exit code."""
    return run_cli
