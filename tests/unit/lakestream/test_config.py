from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from lakestream.config import Config, ConfigError, load_config

ROOT = Path(__file__).resolve().parents[3]


def test_shipped_toml_equals_the_defaults():
    assert load_config(ROOT / "config" / "lakestream.toml", environ={}) == Config()


def test_env_overrides_file_and_parses_types(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[flink]\nparallelism = 1\n[event_time]\nmax_out_of_orderness = "1m"\n')
    cfg = load_config(
        f,
        environ={
            "LAKESTREAM__FLINK__PARALLELISM": "4",
            "LAKESTREAM__QUALITY__AMOUNT_CEILING": "12.5",
            "LAKESTREAM__KAFKA__TOPICS__PAYMENTS": "pay.v2",
            "UNRELATED": "x",
        },
    )
    assert cfg.flink.parallelism == 4
    assert cfg.event_time.max_out_of_orderness == timedelta(minutes=1)
    assert cfg.quality.amount_ceiling == Decimal("12.5")
    assert cfg.kafka.topics["payments"] == "pay.v2"
    assert cfg.kafka.topics["orders_db"] == "orders.db.changes"  # other topics keep their defaults


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[flink]\nparalelism = 2\n", "paralelism"),
        ("[flnk]\n", "flnk"),
        ('[flink]\nparallelism = "two"\n', "flink.parallelism"),
        ('[flink]\npython_execution_mode = "fast"\n', "flink.python_execution_mode"),
        ('[flink]\npython_workers = "task"\n', "flink.python_workers.*operator"),
        ('[event_time]\ndedup_ttl = "soon"\n', "event_time.dedup_ttl"),
        ("[flink]\nparallelism = -1\n", "flink.parallelism"),
        ("not toml =", "not valid TOML"),
        ('[flink]\njvm_options = ["-Xmx1g -Xss2m"]\n', "flink.jvm_options.*one JVM option"),
        ('[flink]\njvm_options = ["Xmx1g"]\n', "flink.jvm_options.*starting with '-'"),
        ('[flink]\njvm_options = "-Xmx1g"\n', "flink.jvm_options: expected an array"),
        ('[flink]\nmanaged_memory = "512MB"\n', "flink.managed_memory: a size such as '128m'"),
        ('[flink]\nmanaged_memory = "0m"\n', "flink.managed_memory"),
        ('[flink]\nnetwork_buffer_size = "300k"\n', "flink.network_buffer_size: a power of two"),
        ('[flink]\nnetwork_buffer_size = "2k"\n', "flink.network_buffer_size"),
        ('[flink]\nnetwork_buffer_size = "32m"\n', "flink.network_buffer_size"),
        ('[flink]\nnetwork_buffer_size = "256kb"\n', "flink.network_buffer_size.*'256k'"),
        ('[kafka.consumer]\n"group.id" = "g"\n', "kafka.consumer: group.id cannot be set.*kafka.group_id"),
        ('[kafka.consumer]\n"enable.auto.commit" = "true"\n', "enable.auto.commit cannot be set"),
        ('[kafka.consumer]\n"fetch.max.bytes" = 1.5\n', "kafka.consumer: expected a table of strings"),
        ('[kafka.consumer]\n"max poll" = "1"\n', "kafka.consumer: property names"),
    ],
)
def test_bad_values_name_the_key(tmp_path, text, needle):
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=needle):
        load_config(f, environ={})


def test_bad_env_name_is_explained():
    with pytest.raises(ConfigError, match="LAKESTREAM__<SECTION>__<KEY>"):
        load_config(environ={"LAKESTREAM__PARALLELISM": "2"})


def test_missing_file_is_explained(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml", environ={})


def test_table_uri_resolves_under_root(tmp_path):
    cfg = load_config(environ={"LAKESTREAM__LAKEHOUSE__ROOT": str(tmp_path)})
    assert cfg.lakehouse.table_uri("silver/orders") == str(tmp_path / "silver" / "orders")
    cfg = load_config(environ={"LAKESTREAM__LAKEHOUSE__ROOT": "s3://bucket/lake/"})
    assert cfg.lakehouse.table_uri("silver/orders") == "s3://bucket/lake/silver/orders"


def test_table_layout_per_layer():
    cfg = load_config(environ={"LAKESTREAM__TABLES__LATE_PARTITION_BY": '["source", "event_type"]'})
    assert cfg.tables.partition_by("bronze/order_events") == ("source",)
    assert cfg.tables.partition_by("late/order_events") == ("source", "event_type")
    assert cfg.tables.partition_by("gold/windows") == ()
    with pytest.raises(ConfigError, match="tables.bronze_partition_by"):
        load_config(environ={"LAKESTREAM__TABLES__BRONZE_PARTITION_BY": '[""]'})


def test_file_sizes_per_write_mode():
    cfg = load_config()
    assert (cfg.tables.target_file_size_mb, cfg.tables.merge_target_file_size_mb) == (128, 16)
    cfg = load_config(environ={"LAKESTREAM__TABLES__MERGE_TARGET_FILE_SIZE_MB": "64"})
    assert cfg.tables.merge_target_file_size_mb == 64
    for key in ("TARGET_FILE_SIZE_MB", "MERGE_TARGET_FILE_SIZE_MB"):
        with pytest.raises(ConfigError, match=f"tables.{key.lower()}: must be at least 1"):
            load_config(environ={f"LAKESTREAM__TABLES__{key}": "0"})


def test_thread_mode_is_refused_with_the_reason():
    from runtime.flink_env import FlinkRuntimeError, build_env

    cfg = load_config(environ={"LAKESTREAM__FLINK__PYTHON_EXECUTION_MODE": "thread"})
    with pytest.raises(FlinkRuntimeError, match="not supported yet.*Use 'process'"):
        build_env(cfg.flink, jars=[])


def test_consumer_properties_merge_over_the_defaults(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[kafka.consumer]\n"max.poll.records" = 800\n"security.protocol" = "SSL"\n')
    cfg = load_config(f, environ={"LAKESTREAM__KAFKA__CONSUMER__FETCH.MAX.BYTES": "1048576"})
    assert cfg.kafka.consumer["max.poll.records"] == "800"  # a whole number is taken as its text
    assert cfg.kafka.consumer["security.protocol"] == "SSL"
    assert cfg.kafka.consumer["fetch.max.bytes"] == "1048576"
    assert cfg.kafka.consumer["source.reader.element.queue.capacity"] == "8"  # default kept


def test_env_text_keys_take_the_text_as_given():
    cfg = load_config(
        environ={
            "LAKESTREAM__KAFKA__GROUP_ID": "12345",
            "LAKESTREAM__KAFKA__BOOTSTRAP_SERVERS": "true",
            "LAKESTREAM__LAKEHOUSE__ROOT": "[lake]",
            "LAKESTREAM__EVENT_TIME__SOURCE_ZONE": '"UTC"',  # a quoted TOML string is unquoted
            "LAKESTREAM__KAFKA__TOPICS__PAYMENTS": "2024",
            "LAKESTREAM__KAFKA__STARTING_OFFSETS": "earliest",
            "LAKESTREAM__QUALITY__AMOUNT_CEILING": "0.1",
        }
    )
    assert cfg.kafka.group_id == "12345"
    assert cfg.kafka.bootstrap_servers == "true"
    assert cfg.lakehouse.root == "[lake]"
    assert cfg.event_time.source_zone == "UTC"
    assert cfg.kafka.topics["payments"] == "2024"
    assert cfg.kafka.starting_offsets == "earliest"
    assert cfg.quality.amount_ceiling == Decimal("0.1")  # exact: read as text, not as a float


def test_env_typed_keys_still_parse():
    cfg = load_config(
        environ={
            "LAKESTREAM__FLINK__PARALLELISM": "3",
            "LAKESTREAM__FLINK__MAX_PARALLELISM": "64",
            "LAKESTREAM__FLINK__CHECKPOINT_INTERVAL": "1s",
            "LAKESTREAM__EVENT_TIME__DEDUP_TTL": '"2m"',
            "LAKESTREAM__EVENT_TIME__IDLENESS_TIMEOUT": "30",
            "LAKESTREAM__FLINK__JVM_OPTIONS": '["-Xmx2g"]',
            "LAKESTREAM__QUALITY__KNOWN_STATUSES": '["paid", "open"]',
            "LAKESTREAM__KAFKA__CONSUMER": '{"max.poll.records" = 100}',
        }
    )
    assert (cfg.flink.parallelism, cfg.flink.max_parallelism) == (3, 64)
    assert cfg.flink.checkpoint_interval == timedelta(seconds=1)
    assert cfg.event_time.dedup_ttl == timedelta(minutes=2)
    assert cfg.event_time.idleness_timeout == timedelta(seconds=30)
    assert cfg.flink.jvm_options == ("-Xmx2g",)
    assert cfg.quality.known_statuses == ("paid", "open")
    assert cfg.kafka.consumer["max.poll.records"] == "100"


@pytest.mark.parametrize("text", ["true", "True", "FALSE"])
def test_env_booleans_any_case(text):
    from lakestream import config

    assert config._coerce("k", bool, config._EnvText("LAKESTREAM__X__K", text)) is (text.lower() == "true")


@pytest.mark.parametrize(
    ("variable", "text", "needle"),
    [
        ("LAKESTREAM__FLINK__PARALLELISM", "four", "flink.parallelism: expected a whole number, got 'four'"),
        ("LAKESTREAM__FLINK__PARALLELISM", "2.5", "flink.parallelism: expected a whole number, got 2.5"),
        ("LAKESTREAM__FLINK__CHECKPOINT_INTERVAL", "soon", "flink.checkpoint_interval: expected a duration"),
        ("LAKESTREAM__FLINK__STATE_BACKEND", "disk", "flink.state_backend: expected one of"),
        ("LAKESTREAM__FLINK__JVM_OPTIONS", "-Xmx2g", "flink.jvm_options: expected an array of strings"),
        ("LAKESTREAM__QUALITY__AMOUNT_CEILING", "lots", "quality.amount_ceiling: expected a decimal"),
        ("LAKESTREAM__KAFKA__TOPICS", "orders", "kafka.topics: expected a table of strings"),
    ],
)
def test_bad_env_values_name_the_variable_and_the_type(variable, text, needle):
    with pytest.raises(ConfigError) as err:
        load_config(environ={variable: text})
    assert str(err.value).startswith(f"environment variable {variable}: ")
    assert needle in str(err.value)


def test_bool_key_from_env():
    from lakestream import config

    assert config._env_value(bool, "yes") == "yes"  # left to the bool check, which refuses it
    with pytest.raises(ConfigError, match="environment variable V: k: expected true or false, got 'yes'"):
        config._coerce("k", bool, config._EnvText("V", "yes"))
