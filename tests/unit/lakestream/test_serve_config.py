"""``[serve]``: loopback by default, another address only with allow_remote; port and refresh checked."""

from __future__ import annotations

from datetime import timedelta

import pytest

from lakestream.config import ConfigError, ServeConfig, is_loopback, load_config


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)
    assert ServeConfig(host=host).host == host


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "example.org"])
def test_another_host_needs_allow_remote(host: str) -> None:
    assert not is_loopback(host)
    with pytest.raises(ConfigError, match=r"serve.host: .* is not a loopback address.*serve.allow_remote"):
        ServeConfig(host=host)
    assert ServeConfig(host=host, allow_remote=True).allow_remote


def test_port_and_refresh_are_checked_with_their_keys() -> None:
    with pytest.raises(ConfigError, match="serve.port: must be between 0"):
        ServeConfig(port=70000)
    with pytest.raises(ConfigError, match="serve.refresh: must be at least 200ms"):
        ServeConfig(refresh=timedelta(milliseconds=50))


def test_environment_overrides() -> None:
    cfg = load_config(None, environ={"LAKESTREAM__SERVE__PORT": "9000", "LAKESTREAM__SERVE__REFRESH": "2s"})
    assert (cfg.serve.port, cfg.serve.refresh) == (9000, timedelta(seconds=2))
    with pytest.raises(ConfigError, match="LAKESTREAM__SERVE__HOST.*allow_remote|allow_remote"):
        load_config(None, environ={"LAKESTREAM__SERVE__HOST": "0.0.0.0"})


@pytest.mark.parametrize(
    "name", ["metrics.example.com", "*.example.com", "10.0.0.7", "fe80::1", "my-host", "a.b-c.d"]
)
def test_allowed_hosts_take_names_as_host_headers_send_them(name: str) -> None:
    assert ServeConfig(allowed_hosts=(name,)).allowed_hosts == (name,)


@pytest.mark.parametrize(
    "name",
    ["http://metrics.example.com", "metrics.example.com:8000", "*", "*.", "a b", "-x.example"],
)
def test_an_allowed_host_that_no_host_header_matches_is_refused_naming_the_key(name: str) -> None:
    with pytest.raises(
        ConfigError, match=r"serve.allowed_hosts: .* is not a host name.*without scheme or port"
    ):
        ServeConfig(allowed_hosts=(name,))


def test_allowed_hosts_are_compared_in_lower_case() -> None:
    assert ServeConfig(allowed_hosts=("Metrics.Example.COM",)).allowed_hosts == ("metrics.example.com",)


def test_max_range_is_positive_and_comes_from_the_environment_too() -> None:
    with pytest.raises(ConfigError, match="serve.max_range: must be positive"):
        ServeConfig(max_range=timedelta(0))
    cfg = load_config(
        None,
        environ={"LAKESTREAM__SERVE__MAX_RANGE": "7d", "LAKESTREAM__SERVE__ALLOWED_HOSTS": '["a.example"]'},
    )
    assert (cfg.serve.max_range, cfg.serve.allowed_hosts) == (timedelta(days=7), ("a.example",))
