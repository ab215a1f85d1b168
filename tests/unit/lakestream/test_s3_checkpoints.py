"""Checkpoints on S3, without Flink: the S3 plugin's options, the checkpoint URIs Flink gets, and the
errors that stop a run before it starts (``runtime.flink_env``, ``lakestream.paths``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakestream import paths
from lakestream.config import ConfigError, FlinkConfig, StorageConfig
from lakestream.errors import BAD_INPUT, exit_status
from runtime.flink_env import (
    check_runtime,
    checkpoint_uri,
    flink_settings,
    on_object_store,
    s3_plugin_settings,
)

SECRET = "the-secret-key-0123456789"
LOCAL_SERVER = StorageConfig(
    endpoint="http://127.0.0.1:9000", region="eu-west-1", path_style=True, allow_http=True
)


def test_the_plugin_gets_where_the_store_is_never_who_we_are(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    assert s3_plugin_settings(LOCAL_SERVER) == {
        "s3.endpoint": "http://127.0.0.1:9000",
        "s3.path.style.access": "true",
    }
    assert s3_plugin_settings(StorageConfig()) == {}  # AWS itself: the plugin finds the bucket's region
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://s3.example.net")
    assert s3_plugin_settings(StorageConfig()) == {"s3.endpoint": "https://s3.example.net"}
    assert s3_plugin_settings(LOCAL_SERVER)["s3.endpoint"] == "http://127.0.0.1:9000"  # the config wins


def test_flink_takes_an_s3_checkpoint_folder_as_it_is_and_a_local_one_as_a_file_uri(tmp_path: Path) -> None:
    assert on_object_store("s3://bucket/checkpoints") and not on_object_store(str(tmp_path))
    assert not on_object_store(Path("s3:/bucket"))  # a Path is always local
    assert checkpoint_uri("s3://bucket/checkpoints/") == "s3://bucket/checkpoints"
    assert checkpoint_uri(tmp_path / "ckpt") == (tmp_path / "ckpt").resolve().as_uri()
    settings = flink_settings(FlinkConfig(checkpoint_dir="s3://bucket/checkpoints"), state_backend="rocksdb")
    assert settings["execution.checkpointing.dir"] == "s3://bucket/checkpoints"
    assert settings["execution.checkpointing.incremental"] == "true"
    local = flink_settings(FlinkConfig(), checkpoint_dir=str(tmp_path))
    assert local["execution.checkpointing.dir"] == tmp_path.resolve().as_uri()


@pytest.mark.parametrize("where", ["gs://bucket/checkpoints", "s3a://bucket/c", "file:///tmp/c"])
def test_a_checkpoint_folder_of_another_scheme_is_refused(where: str) -> None:
    with pytest.raises(ConfigError, match="flink.checkpoint_dir: a local folder or an s3:// URI"):
        FlinkConfig(checkpoint_dir=where)


def test_checkpoints_on_s3_without_the_plugin_name_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("runtime.flink_env.require_java", lambda: "java")
    monkeypatch.setattr(paths, "S3_PLUGIN_DIR", tmp_path / "s3-fs-presto")
    check_runtime(FlinkConfig())  # a local folder needs no plugin
    with pytest.raises(paths.MissingBuildError) as err:
        check_runtime(FlinkConfig(checkpoint_dir="s3://bucket/checkpoints"))
    assert "Flink's S3 plugin is missing" in str(err.value) and "Run `make jvm`" in str(err.value)
    assert exit_status(err.value, "ingest") == (BAD_INPUT, f"lakestream: {err.value}")
    jar = tmp_path / "s3-fs-presto" / "flink-s3-fs-presto-2.2.0.jar"
    jar.parent.mkdir()
    jar.write_bytes(b"")
    check_runtime(FlinkConfig(checkpoint_dir="s3://bucket/checkpoints"))


def test_the_build_puts_the_plugin_in_flinks_plugins_layout() -> None:
    """A folder of its own under ``jvm/target/plugins``, as in ``$FLINK_HOME/plugins``, with one jar."""
    if not paths.LAKESTREAM_JAR.exists():
        pytest.skip("no JVM build (`make jvm`)")
    assert paths.require_s3_plugin().parent == paths.PLUGINS_DIR
    assert [p.name for p in paths.S3_PLUGIN_DIR.iterdir()] == ["flink-s3-fs-presto-2.2.0.jar"]
