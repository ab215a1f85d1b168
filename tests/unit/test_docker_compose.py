"""docker-compose.yml cannot run here (no Docker engine); check what can be checked without one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from lakestream.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return doc


def test_services_and_their_build_context_exist() -> None:
    doc = compose()
    assert {"kafka", "jobmanager", "taskmanager", "demo"} <= set(doc["services"])
    dockerfile = ROOT / "docker" / "Dockerfile"
    assert dockerfile.is_file() and (ROOT / "docker" / "entrypoint.sh").is_file()
    for line in dockerfile.read_text().splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            for src in line.split()[1:-1]:
                assert (ROOT / src).exists(), f"Dockerfile copies {src}, which is not in the repo"


def test_demo_environment_is_a_valid_lakestream_config() -> None:
    env = compose()["services"]["demo"]["environment"]
    cfg = load_config(environ={k: str(v) for k, v in env.items()})
    assert cfg.kafka.bootstrap_servers == "kafka:9092"
    assert cfg.flink.jobmanager == "jobmanager:8081"


def test_every_service_depending_on_another_names_a_real_one() -> None:
    services = compose()["services"]
    for name, svc in services.items():
        deps = svc.get("depends_on", [])
        for dep in deps if isinstance(deps, list) else deps.keys():
            assert dep in services, f"{name} depends on unknown service {dep}"


def test_the_image_copies_every_package_the_project_installs() -> None:
    import tomllib

    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = {pattern.rstrip("*") for pattern in include["include"]}
    copied = {
        line.split()[1]
        for line in (ROOT / "docker" / "Dockerfile").read_text().splitlines()
        if line.startswith("COPY ") and "--from" not in line
    }
    assert packages <= copied, f"the Dockerfile does not copy {sorted(packages - copied)}"
