"""docker-compose.yml cannot run here (no Docker engine); check what can be checked without one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from lakestream.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return doc


def test_services_and_their_build_context_exist() -> None:
    doc = compose()
    assert {"kafka", "s3", "s3-bucket", "jobmanager", "taskmanager", "demo"} <= set(doc["services"])
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
    # Tables and checkpoints on the compose file's object store, in the bucket its s3-bucket service makes.
    bucket = compose()["services"]["s3-bucket"]["command"][1:]
    assert cfg.lakehouse.root == f"s3://{bucket[0]}" and cfg.flink.checkpoint_dir.startswith(
        f"s3://{bucket[0]}/"
    )
    assert (cfg.storage.endpoint, cfg.storage.path_style, cfg.storage.allow_http) == (
        "http://s3:9000",
        True,
        True,
    )


def test_the_object_store_is_s3proxy_4_which_honours_conditional_writes() -> None:
    """4.x refuses ``PUT If-None-Match: *`` over an existing key atomically; earlier releases do not."""
    s3 = compose()["services"]["s3"]
    name, _, tag = s3["image"].partition(":")
    assert name == "andrewgaul/s3proxy" and tag.split(".")[0] == "4"
    pom = (ROOT / "jvm" / "s3proxy" / "pom.xml").read_text()
    assert f"<s3proxy.version>{tag}</s3proxy.version>" in pom  # the release the tests run
    assert s3["environment"]["JCLOUDS_PROVIDER"] == "filesystem"
    assert s3["environment"]["S3PROXY_ENDPOINT"] == "http://0.0.0.0:9000"


def test_every_client_of_the_store_has_its_key_pair_and_address() -> None:
    services = compose()["services"]
    server = services["s3"]["environment"]
    pair = (server["S3PROXY_IDENTITY"], server["S3PROXY_CREDENTIAL"])
    for name in ("s3-bucket", "jobmanager", "taskmanager", "demo"):
        env = services[name]["environment"]
        assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == pair, name
    assert services["s3-bucket"]["environment"]["AWS_ENDPOINT_URL"] == "http://s3:9000"
    for name in ("jobmanager", "taskmanager"):  # Flink's S3 plugin, for the checkpoints
        props = flink_properties(name)
        assert (props["s3.endpoint"], props["s3.path.style.access"]) == ("http://s3:9000", "true")
    assert services["demo"]["depends_on"]["s3-bucket"] == {"condition": "service_completed_successfully"}


def test_the_image_puts_flinks_s3_plugin_into_the_plugins_folder() -> None:
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert "cp -r jvm/target/plugins/s3-fs-presto" in dockerfile
    assert "pyflink.__file__))')/plugins/" in dockerfile


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


def flink_properties(service: str) -> dict[str, str]:
    text = compose()["services"][service]["environment"]["FLINK_PROPERTIES"]
    pairs = [line.partition(":")[::2] for line in text.splitlines()]
    keys = [k.strip() for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"{service}: Flink refuses a flat key given twice: {keys}"
    return {k.strip(): v.strip() for k, v in pairs}


def test_both_flink_services_run_the_prometheus_reporter_and_publish_its_port() -> None:
    from runtime.flink_env import PROMETHEUS_FACTORY

    services = compose()["services"]
    published = {"jobmanager": "127.0.0.1:9249:9249", "taskmanager": "127.0.0.1:9250:9249"}
    for service, port in published.items():
        props = flink_properties(service)
        assert props["metrics.reporter.prom.factory.class"] == PROMETHEUS_FACTORY
        assert props["metrics.reporter.prom.port"] == "9249"
        assert port in services[service]["ports"]


def test_flink_services_bind_beyond_the_wheels_localhost_defaults() -> None:
    # The wheel's config.yaml binds every Flink endpoint to localhost: unreachable from another container.
    assert flink_properties("jobmanager")["jobmanager.bind-host"] == "0.0.0.0"
    assert flink_properties("jobmanager")["rest.bind-address"] == "0.0.0.0"
    tm = flink_properties("taskmanager")
    assert (tm["taskmanager.bind-host"], tm["taskmanager.host"]) == ("0.0.0.0", "taskmanager")


def check_compose_file(path: Path) -> subprocess.CompletedProcess[str]:
    """``check-jsonschema`` with the Compose Specification's schema it vendors, on ``path``."""
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_the_file_is_valid_under_the_compose_specification() -> None:
    # `docker compose config` needs Compose v2 (not installed here; Debian's docker-compose 1.29 predates
    # the specification's top-level `name:`), so the file is validated against the schema itself.
    done = check_compose_file(ROOT / "docker-compose.yml")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("old", "new", "named"),
    [
        ("\nservices:", "\nservics:", "servics"),  # a misspelt top-level key
        ("    healthcheck:", "    healthchek:", "healthchek"),  # a misspelt service key
        ("    depends_on: [jobmanager]", "    depends_on: jobmanager", "depends_on"),  # a wrong type
    ],
)
def test_the_schema_check_refuses_a_broken_file_naming_what(
    tmp_path: Path, old: str, new: str, named: str
) -> None:
    text = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    assert old in text, f"{old!r} is no longer in docker-compose.yml: pick another change"
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(text.replace(old, new, 1), encoding="utf-8")
    done = check_compose_file(broken)
    assert done.returncode == 1 and named in done.stdout, done.stdout + done.stderr
