"""[storage] settings: validated at start, exported to the AWS variables, never carrying a secret."""

from __future__ import annotations

import pytest

from lakestream.config import ConfigError, StorageConfig, load_config
from storage.object_store import SECRET_VARIABLES, delta_options, export_settings, is_object_store

LOCAL = StorageConfig(endpoint="http://127.0.0.1:9000", region="eu-west-1", path_style=True, allow_http=True)


def test_the_options_say_where_the_store_is_and_that_commits_are_conditional() -> None:
    assert delta_options(LOCAL) == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_REGION": "eu-west-1",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        "AWS_ALLOW_HTTP": "true",
        "AWS_CONDITIONAL_PUT": "etag",
    }
    assert delta_options(StorageConfig()) == {"AWS_CONDITIONAL_PUT": "etag"}  # AWS itself


def test_export_sets_configured_keys_and_leaves_the_rest_to_the_user() -> None:
    env = {"AWS_REGION": "us-west-2", "AWS_ENDPOINT_URL": "http://other:1", "AWS_CONDITIONAL_PUT": "disabled"}
    export_settings(StorageConfig(region="eu-west-1"), env)
    assert env["AWS_REGION"] == "eu-west-1"  # configured: wins
    assert env["AWS_ENDPOINT_URL"] == "http://other:1" and env["AWS_CONDITIONAL_PUT"] == "disabled"


def test_no_secret_is_ever_copied(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "t0ken")
    env: dict[str, str] = {}
    export_settings(LOCAL, env)
    assert not set(SECRET_VARIABLES) & set(env) and not set(SECRET_VARIABLES) & set(delta_options(LOCAL))
    with pytest.raises(ConfigError, match="unknown key.*secret_access_key"):
        load_config(environ={"LAKESTREAM__STORAGE__SECRET_ACCESS_KEY": "x"})


def test_bad_endpoints_are_refused_at_start_with_the_key_to_fix() -> None:
    with pytest.raises(ConfigError, match=r"storage\.endpoint: must start with http:// or https://"):
        StorageConfig(endpoint="127.0.0.1:9000")
    with pytest.raises(ConfigError, match=r"storage\.allow_http = true"):
        StorageConfig(endpoint="http://127.0.0.1:9000")
    environ = {"LAKESTREAM__STORAGE__ENDPOINT": "https://s3.example"}
    environ["LAKESTREAM__STORAGE__PATH_STYLE"] = "true"
    cfg = load_config(environ=environ)
    assert cfg.storage == StorageConfig(endpoint="https://s3.example", path_style=True)


def test_which_uris_are_object_stores() -> None:
    assert is_object_store("s3://bucket/t") and is_object_store("gs://b/t")
    assert not is_object_store("/data/lake/t") and not is_object_store("file:///data/t")
    assert not is_object_store("lakehouse/t")


def test_a_jobs_table_spec_carries_the_stores_settings_and_no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """So that writers on a TaskManager reach the store the client was configured for."""
    import pyarrow as pa

    from sinks.table_spec import TableSpec

    for key in ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "AWS_ALLOW_HTTP"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "me")
    exported: dict[str, str] = {}
    export_settings(LOCAL, exported)
    for key, value in exported.items():
        monkeypatch.setenv(key, value)
    schema = pa.schema([("id", pa.int64())])
    spec = TableSpec(table_uri="s3://bucket/t", schema=schema)
    assert spec.storage_options == delta_options(LOCAL)
    assert TableSpec(table_uri="/data/t", schema=schema).storage_options is None
    given = TableSpec(table_uri="s3://bucket/t", schema=schema, storage_options={"AWS_REGION": "x"})
    assert given.storage_options == {"AWS_REGION": "x"}
