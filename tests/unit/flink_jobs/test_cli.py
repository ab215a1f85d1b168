"""The CLI's shared pieces: flags, configuration, broker, checkpoints, bounded ending, exit codes."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from devtools import kafka_broker
from flink_jobs import cli, cli_common, ingest
from flink_jobs.cli_common import SHARED_FLAGS, JobFailedError
from lakestream.config import ConfigError
from lakestream.flink_runtime import FlinkRuntimeError
from lakestream.paths import MissingBuildError
from sources.errors import StartingPointError

ROOT = Path(__file__).resolve().parents[3]

#: The least each sub-command needs to parse.
REQUIRED = {
    "kafka": ["status"],
    "land": ["--topic", "t", "--table", "raw/t"],
    "ingest": [],
    "changefeed": ["--table", "silver/orders", "--to", "delta:audit/orders"],
    "tables": [],
    "demo": [],
}
#: Which shared flags each sub-command takes (--config: all of them).
TAKES = {
    "kafka": set(),
    "land": {"lakehouse", "bootstrap_servers", "bounded", "fresh", "job_name"},
    "ingest": {"lakehouse", "bootstrap_servers", "bounded", "fresh"},
    "changefeed": {"lakehouse", "bootstrap_servers", "fresh", "job_name"},
    "tables": {"lakehouse", "bootstrap_servers"},
    "demo": {"lakehouse", "bootstrap_servers"},
}


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_subcommand_is_there() -> None:
    assert list(subcommands()) == list(REQUIRED)


@pytest.mark.parametrize("command", list(REQUIRED))
def test_shared_flags_exist_once_and_read_like_the_shared_declaration(command: str) -> None:
    parser = subcommands()[command]
    for name, (option_strings, options) in SHARED_FLAGS.items():
        actions = [a for a in parser._actions if set(a.option_strings) & set(option_strings)]
        if name != "config" and name not in TAKES[command]:
            assert not actions, f"{command} takes {option_strings}"
            continue
        assert len(actions) == 1, f"{command}: {option_strings} declared {len(actions)} times"
        assert actions[0].help == options["help"]


@pytest.mark.parametrize("command", list(REQUIRED))
def test_shared_flags_parse_the_same_in_every_subcommand(command: str) -> None:
    values = {
        "lakehouse": (["--lakehouse", "/lake"], "/lake"),
        "bootstrap_servers": (["--bootstrap-servers", "h:1"], "h:1"),
        "bounded": (["--bounded"], True),
        "fresh": (["--fresh"], True),
        "job_name": (["--job-name", "j"], "j"),
    }
    argv = [command, *REQUIRED[command]]
    for name in sorted(TAKES[command]):
        argv += values[name][0]
    args = cli.build_parser().parse_args(argv)
    for name in TAKES[command]:
        assert getattr(args, name) == values[name][1], name
    defaults = cli.build_parser().parse_args([command, *REQUIRED[command]])
    for name in TAKES[command] & {"bounded", "fresh"}:
        assert getattr(defaults, name) is False


@pytest.mark.parametrize("command", list(REQUIRED))
def test_config_goes_before_or_after_the_subcommand(command: str) -> None:
    parse = cli.build_parser().parse_args
    assert parse([command, *REQUIRED[command]]).config is None
    assert parse(["--config", "a.toml", command, *REQUIRED[command]]).config == Path("a.toml")
    assert parse([command, *REQUIRED[command], "--config", "b.toml"]).config == Path("b.toml")
    assert parse(["--config", "a.toml", command, *REQUIRED[command], "--config", "b.toml"]).config == Path(
        "b.toml"
    )


def test_shared_flags_are_declared_only_in_cli_common() -> None:
    flags = [o for option_strings, _ in SHARED_FLAGS.values() for o in option_strings]
    pattern = re.compile(r"add_argument\(\s*\"(" + "|".join(map(re.escape, flags)) + r")\"")
    for path in sorted((ROOT / "flink_jobs").glob("*.py")):
        if path.name != "cli_common.py":
            assert not pattern.search(path.read_text(encoding="utf-8")), f"{path.name} declares a shared flag"


def test_load_applies_the_flag_overrides(tmp_path: Path) -> None:
    args = argparse.Namespace(config=None, lakehouse=str(tmp_path / "lake"), bootstrap_servers="h:9092")
    cfg = cli_common.load(args)
    assert (cfg.lakehouse.root, cfg.kafka.bootstrap_servers) == (str(tmp_path / "lake"), "h:9092")
    plain = cli_common.load(argparse.Namespace(config=None))
    assert plain.kafka.bootstrap_servers == "embedded"


def test_broker_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = cli_common.load(argparse.Namespace(config=None))
    assert cli_common.broker(cfg.replace("kafka", bootstrap_servers="h:9092")) == "h:9092"
    monkeypatch.setattr(kafka_broker, "DEFAULT_STATE_FILE", tmp_path / "kafka.json")
    with pytest.raises(
        ConfigError, match="no local broker is running: start one with `lakestream kafka start`"
    ):
        cli_common.broker(cfg)
    running = kafka_broker.BrokerStatus(running=True, pid=1, bootstrap_servers="127.0.0.1:4242")
    monkeypatch.setattr(kafka_broker, "status_detached", lambda: running)
    assert cli_common.broker(cfg) == "127.0.0.1:4242"


def test_checkpoints_folder_per_job_and_resume_from_the_newest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = cli_common.load(argparse.Namespace(config=None))
    cfg = cfg.replace("flink", checkpoint_dir=str(tmp_path))
    assert cli_common.checkpoints(cfg, "land/raw/t", resume=True) == (str(tmp_path / "land-raw-t"), None)
    done = tmp_path / "land-raw-t" / "job1" / "chk-3"
    done.mkdir(parents=True)
    (done / "_metadata").write_bytes(b"")
    (tmp_path / "land-raw-t" / "job1" / "chk-4").mkdir()  # never completed: no _metadata
    assert cli_common.checkpoints(cfg, "land/raw/t", resume=True) == (str(tmp_path / "land-raw-t"), done)
    assert f"resuming from checkpoint {done}" in capsys.readouterr().out
    assert cli_common.checkpoints(cfg, "land/raw/t", resume=False)[1] is None


class FakeEnv:
    # What the slot check reads of a local environment: nothing to check before execute.
    _j_stream_execution_environment = SimpleNamespace(
        getConfiguration=lambda: SimpleNamespace(toMap=lambda: {"execution.target": "local"})
    )

    def __init__(self) -> None:
        self.executed: list[str] = []

    def execute(self, name: str) -> None:
        self.executed.append(name)


@pytest.fixture
def kafka_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """run_kafka_job with the Kafka client calls and the table listing recorded instead of made."""
    from flink_jobs import kafka_input, tables

    calls: dict[str, Any] = {"commits": [], "printed": [], "runs": []}
    monkeypatch.setattr(kafka_input, "snapshot_end_offsets", lambda bootstrap, topics: {(topics[0], 0): 7})
    monkeypatch.setattr(kafka_input, "commit_group_offsets", lambda *a: calls["commits"].append(a))
    monkeypatch.setattr(tables, "print_tables", lambda root: calls["printed"].append(root))
    cfg = cli_common.load(argparse.Namespace(config=None, bootstrap_servers="h:1"))
    cfg = cfg.replace("flink", checkpoint_dir=str(tmp_path / "ckpt"))
    cfg = cfg.replace("lakehouse", root=str(tmp_path / "lake"))
    done = tmp_path / "ckpt" / "j" / "job1" / "chk-2"
    done.mkdir(parents=True)
    (done / "_metadata").write_bytes(b"")

    def run(**flags: bool) -> FakeEnv:
        env = FakeEnv()

        def build(**given: Any) -> FakeEnv:
            calls["runs"].append(SimpleNamespace(**given))
            return env

        args = argparse.Namespace(**{"bounded": False, "fresh": False, **flags})
        code = cli_common.run_kafka_job(
            cfg, args, job="j", topics=["t"], group_id="g", build=build, job_name="the job"
        )
        assert code == 0 and env.executed == ["the job"]
        return env

    calls["run"] = run
    calls["done"] = done
    calls["root"] = str(tmp_path / "lake")
    return calls


def test_a_bounded_run_stops_at_the_snapshot_then_commits_it_and_lists_the_tables(
    kafka_job: dict[str, Any],
) -> None:
    kafka_job["run"](bounded=True)
    [run] = kafka_job["runs"]
    assert (run.bootstrap_servers, run.bounded, run.end_offsets, run.resume_from) == (
        "h:1",
        True,
        {("t", 0): 7},
        None,
    )
    assert kafka_job["commits"] == [("h:1", "g", {("t", 0): 7})]
    assert kafka_job["printed"] == [kafka_job["root"]]


def test_an_unbounded_run_resumes_unless_fresh_and_commits_nothing(kafka_job: dict[str, Any]) -> None:
    kafka_job["run"]()
    kafka_job["run"](fresh=True)
    resumed, fresh = kafka_job["runs"]
    assert (resumed.bounded, resumed.end_offsets, resumed.resume_from) == (False, None, kafka_job["done"])
    assert (fresh.end_offsets, fresh.resume_from) == (None, None)
    assert resumed.checkpoint_dir == fresh.checkpoint_dir == str(Path(kafka_job["done"]).parents[1])
    assert kafka_job["commits"] == [] and kafka_job["printed"] == []


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        (ConfigError("flink.paralelism: unknown"), 2, "lakestream: configuration error: flink.paralelism"),
        (FlinkRuntimeError("no java"), 2, "lakestream: no java"),
        (MissingBuildError("run make jvm"), 2, "lakestream: run make jvm"),
        (kafka_broker.PortInUseError(9092), 2, "lakestream: port 9092 on 127.0.0.1 is already in use"),
        (StartingPointError("version 9 is past the end"), 2, "lakestream ingest: version 9 is past the end"),
        (JobFailedError("DataLossError: version 3"), 1, "lakestream ingest: job failed: DataLossError"),
    ],
)
def test_errors_end_a_subcommand_with_their_exit_code(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    error: Exception,
    code: int,
    message: str,
) -> None:
    def fail(args: argparse.Namespace) -> int:
        raise error

    monkeypatch.setattr(ingest, "cmd_ingest", fail)
    assert cli.main(["ingest"]) == code
    assert capsys.readouterr().err.startswith(message)


def test_other_errors_are_not_turned_into_exit_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(args: argparse.Namespace) -> int:
        raise KeyError("a bug")

    monkeypatch.setattr(ingest, "cmd_ingest", fail)
    with pytest.raises(KeyError):
        cli.main(["ingest"])


def test_a_config_typo_exits_2_before_anything_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LAKESTREAM__FLINK__PARALELISM", "2")
    assert cli.main(["tables"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lakestream: configuration error:") and "paralelism" in err


def test_kafka_status_exit_code(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(kafka_broker, "status_detached", lambda: kafka_broker.BrokerStatus(running=False))
    assert cli.main(["kafka", "status"]) == 1
    assert capsys.readouterr().out.strip() == "kafka: not running"
    status = SimpleNamespace(running=True, describe=lambda: "kafka: running")
    monkeypatch.setattr(kafka_broker, "status_detached", lambda: status)
    assert cli.main(["kafka", "status"]) == 0
