"""Shared fixtures: one real local Kafka broker per test session, isolated lakehouse folders."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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


def _run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m flink_jobs ARGS`` in a fresh process (its own JVM), as a user would.

    Each job gets its own process so a failing job cannot leave a half-dead gateway behind for the
    next test; the timeout turns a hang into a failure with the output attached.
    """
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "flink_jobs", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"lakestream {' '.join(args)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-5000:]}"
            f"\n--- stderr\n{proc.stderr[-8000:]}"
        )
    return proc


@pytest.fixture
def cli():
    """``cli("land", "--topic", ...)`` runs the lakestream CLI in a fresh process and checks its exit code."""
    return _run_cli
