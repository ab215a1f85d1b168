"""``runtime.flink_env.require_java``: the java PyFlink would launch, and only a 17+ one."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from runtime.flink_env import FlinkRuntimeError, JavaNotFoundError, require_java


def fake_java(folder: Path, version: str) -> Path:
    """``folder/bin/java`` answering ``-version`` like a JDK of ``version`` (on stderr, as java does)."""
    java = folder / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2024-01-16' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IXUSR)
    return java


def test_java_home_comes_before_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = fake_java(tmp_path / "home", "21.0.2")
    fake_java(tmp_path / "onpath", "17.0.9")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", str(tmp_path / "onpath" / "bin"))
    assert require_java() == str(home)


def test_the_path_is_used_without_java_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    on_path = fake_java(tmp_path / "onpath", "17.0.9")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert require_java() == str(on_path)


@pytest.mark.parametrize("version", ["11.0.22", "1.8.0_392"])
def test_a_java_older_than_17_is_refused_with_its_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    fake_java(tmp_path / "old", version)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "old"))
    major = version.split(".")[0] if not version.startswith("1.") else version.split(".")[1]
    with pytest.raises(JavaNotFoundError, match=f"is Java {major}, .*need Java 17"):
        require_java()


def test_no_java_names_the_fix_and_is_a_flink_runtime_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FlinkRuntimeError, match=r"`java` not found .*install a JDK 17\+"):
        require_java()


@pytest.mark.parametrize(
    ("configured", "job_default", "filters"),
    [
        ("default", "rocksdb", True),  # ingest
        ("default", "hashmap", False),  # land, changefeed
        ("rocksdb", "hashmap", True),
        ("hashmap", "rocksdb", False),
    ],
)
def test_rocksdb_state_gets_bloom_filters_and_partitioned_index_filters(
    tmp_path: Path, configured: str, job_default: str, filters: bool
) -> None:
    from lakestream.config import FlinkConfig
    from runtime.flink_env import ROCKSDB_COMPACTION_STYLE, ROCKSDB_LOOKUP_SETTINGS, flink_settings

    settings = flink_settings(
        FlinkConfig(state_backend=configured),  # type: ignore[arg-type]
        checkpoint_dir=str(tmp_path),
        state_backend=job_default,
    )
    assert settings["state.backend.type"] == ("rocksdb" if filters else "hashmap")
    got = {k: settings.get(k) for k in ROCKSDB_LOOKUP_SETTINGS}
    if filters:
        assert got == {
            "state.backend.rocksdb.use-bloom-filter": "true",
            "state.backend.rocksdb.memory.partitioned-index-filters": "true",
        }
    else:
        assert got == dict.fromkeys(ROCKSDB_LOOKUP_SETTINGS)
    assert settings.get(ROCKSDB_COMPACTION_STYLE) == ("UNIVERSAL" if filters else None)


def test_rocksdb_compaction_is_universal_unless_configured(tmp_path: Path) -> None:
    from lakestream.config import FlinkConfig
    from runtime.flink_env import ROCKSDB_COMPACTION_STYLE, flink_settings

    level = FlinkConfig(rocksdb_compaction="level")
    settings = flink_settings(level, checkpoint_dir=str(tmp_path), state_backend="rocksdb")
    assert settings[ROCKSDB_COMPACTION_STYLE] == "LEVEL"


def test_the_local_managed_memory_is_the_configured_size(tmp_path: Path) -> None:
    from lakestream.config import FlinkConfig
    from runtime.flink_env import flink_settings

    got = flink_settings(FlinkConfig(managed_memory="768m"), checkpoint_dir=str(tmp_path))
    assert got["taskmanager.memory.managed.size"] == "768m"


@pytest.mark.parametrize("size", ["4k", "256k", "1m", "16m"])
def test_the_local_network_buffers_are_the_configured_size(tmp_path: Path, size: str) -> None:
    from lakestream.config import FlinkConfig
    from runtime.flink_env import flink_settings

    got = flink_settings(FlinkConfig(network_buffer_size=size), checkpoint_dir=str(tmp_path))
    assert got["taskmanager.memory.segment-size"] == size
    assert got["taskmanager.memory.network.min"] == got["taskmanager.memory.network.max"]
    assert FlinkConfig().network_buffer_size == "256k"


@pytest.mark.parametrize(
    ("parallelism", "size", "memory"),
    [
        (2, "256k", "64m"),
        (8, "256k", "64m"),
        (9, "256k", "81m"),
        (16, "256k", "256m"),
        (8, "1m", "256m"),
        (32, "4k", "64m"),
        (3, "16m", "576m"),
    ],
)
def test_the_local_network_memory_holds_the_buffers_the_parallelism_needs(
    parallelism: int, size: str, memory: str
) -> None:
    from lakestream.config import FlinkConfig
    from runtime.flink_env import local_network_memory

    assert local_network_memory(FlinkConfig(parallelism=parallelism, network_buffer_size=size)) == memory


@pytest.mark.parametrize(("python_workers", "managed"), [("slot", "true"), ("operator", "false")])
def test_python_workers_per_slot_or_per_operator(tmp_path: Path, python_workers: str, managed: str) -> None:
    from lakestream.config import FlinkConfig
    from runtime.flink_env import PYTHON_WORKER_PER_SLOT, flink_settings

    cfg = FlinkConfig(python_workers=python_workers)  # type: ignore[arg-type]
    assert flink_settings(cfg, checkpoint_dir=str(tmp_path))[PYTHON_WORKER_PER_SLOT] == managed
    assert FlinkConfig().python_workers == "slot"


def test_a_launch_whose_options_choose_class_sharing_gets_no_archive_of_ours(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from lakestream import paths
    from runtime.flink_env import CLASS_ARCHIVE_DIR, local_class_archive

    monkeypatch.setattr(paths, "CACHE_DIR", tmp_path)
    chosen = ("-Xshare:off", "-Xmx1g -XX:SharedArchiveFile=/x.jsa", "-XX:ArchiveClassesAtExit=/y")
    for options in chosen:
        assert local_class_archive({"JVM_ARGS": options}) is None, options
    got = local_class_archive({"JVM_ARGS": "-Xmx1g"})
    assert got is not None and got.pending is not None, "no archive yet: this launch writes one"
    assert got.final.parent == tmp_path / CLASS_ARCHIVE_DIR and got.final.name.endswith(".jsa")
    assert got.options[0] == f"-XX:ArchiveClassesAtExit={got.pending}"
    ingest, land = local_class_archive({}, "ingest"), local_class_archive({}, "land")
    assert ingest is not None and land is not None and ingest.final != land.final, "one archive per kind"
    other_lib = local_class_archive({"FLINK_LIB_DIR": str(tmp_path)}, "ingest")
    assert other_lib is not None and other_lib.final != ingest.final, "the launcher's class path is the key"


def test_restarts_wait_longer_each_time_within_a_bounded_budget(tmp_path: Path) -> None:
    from datetime import timedelta

    from lakestream.config import FlinkConfig
    from runtime.flink_env import flink_settings, restart_budget

    cfg = FlinkConfig()
    got = flink_settings(cfg, checkpoint_dir=str(tmp_path))
    prefix = "restart-strategy.exponential-delay"
    assert {k: v for k, v in got.items() if k.startswith("restart-strategy")} == {
        "restart-strategy.type": "exponential-delay",
        f"{prefix}.initial-backoff": "1000 ms",
        f"{prefix}.max-backoff": "30000 ms",
        f"{prefix}.backoff-multiplier": "2.0",
        f"{prefix}.jitter-factor": "0.1",
        f"{prefix}.attempts-before-reset-backoff": "8",
        f"{prefix}.reset-backoff-threshold": "600000 ms",
    }
    # 1 + 2 + 4 + 8 + 16 + 30 + 30 + 30 s: an outage of the store of a minute or two is ridden out.
    assert restart_budget(cfg) == 121
    short = FlinkConfig(restart_attempts=3, restart_delay=timedelta(milliseconds=200))
    assert restart_budget(short) == pytest.approx(1.4)
    none = flink_settings(FlinkConfig(restart_attempts=0), checkpoint_dir=str(tmp_path))
    assert none["restart-strategy.type"] == "none"
    assert not [k for k in none if k.startswith(prefix)]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"restart_attempts": -1}, "flink.restart_attempts: must not be negative"),
        ({"restart_delay": "0s"}, "need 1ms <= restart_delay <= restart_max_delay"),
        ({"restart_delay": "1m"}, "need 1ms <= restart_delay <= restart_max_delay"),
        ({"restart_reset_after": "0s"}, "flink.restart_reset_after: must be at least 1s"),
    ],
)
def test_restart_settings_flink_would_refuse_are_refused_at_start(
    override: dict[str, object], message: str
) -> None:
    import json

    from lakestream.config import ConfigError, load_config

    key, value = next(iter(override.items()))
    environ = {f"LAKESTREAM__FLINK__{key.upper()}": json.dumps(value)}
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_config(None, environ=environ)
