"""``flink.prometheus_port``: parsed as a port or a range, and turned into the reporter's Flink settings."""

from __future__ import annotations

import zipfile

import pytest

from lakestream.config import ConfigError, FlinkConfig, load_config
from runtime.flink_env import (
    PROMETHEUS_FACTORY,
    flink_home,
    flink_settings,
    prometheus_reporter_jar,
)


@pytest.mark.parametrize(
    ("env", "port"),
    [("9249", "9249"), ("9249-9259", "9249-9259"), ('""', ""), (" 9300 ", "9300")],
)
def test_a_port_or_a_range_from_the_environment(env: str, port: str) -> None:
    cfg = load_config(environ={"LAKESTREAM__FLINK__PROMETHEUS_PORT": env})
    assert cfg.flink.prometheus_port == port


def test_off_by_default_and_a_toml_number_is_accepted(tmp_path) -> None:
    assert load_config(environ={}).flink.prometheus_port == ""
    f = tmp_path / "c.toml"
    f.write_text("[flink]\nprometheus_port = 9249\n")
    assert load_config(f, environ={}).flink.prometheus_port == "9249"


@pytest.mark.parametrize("value", ["0", "70000", "9300-9200", "abc", "true", "[9249]", "9249-"])
def test_bad_ports_name_the_key_and_the_form(value: str) -> None:
    with pytest.raises(ConfigError, match=r"flink.prometheus_port: expected a port \(9249\) or a port range"):
        load_config(environ={"LAKESTREAM__FLINK__PROMETHEUS_PORT": value})


def test_the_constructor_validates_too() -> None:
    with pytest.raises(ConfigError, match="flink.prometheus_port"):
        FlinkConfig(prometheus_port="http")  # type: ignore[arg-type]


def test_reporter_settings_only_when_a_port_is_set(tmp_path) -> None:
    off = flink_settings(FlinkConfig(), checkpoint_dir=str(tmp_path))
    assert not any(k.startswith("metrics.reporter") for k in off)
    on = flink_settings(
        load_config(environ={"LAKESTREAM__FLINK__PROMETHEUS_PORT": "9250-9251"}).flink,
        checkpoint_dir=str(tmp_path),
    )
    assert on["metrics.reporter.prom.factory.class"] == PROMETHEUS_FACTORY
    assert on["metrics.reporter.prom.port"] == "9250-9251"


def test_the_reporter_jar_is_the_wheels_plugin_of_the_same_flink_version() -> None:
    import pyflink.version

    jar = prometheus_reporter_jar()
    assert jar.parent == flink_home() / "plugins" / "metrics-prometheus"
    assert jar.name == f"flink-metrics-prometheus-{pyflink.version.__version__}.jar"
    with zipfile.ZipFile(jar) as z:
        services = z.read("META-INF/services/org.apache.flink.metrics.reporter.MetricReporterFactory")
    assert PROMETHEUS_FACTORY.encode() in services
