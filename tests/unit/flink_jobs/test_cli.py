"""The CLI's shared pieces: flags, configuration, broker, where a run starts, bounded ending, exit codes."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import cli.common as cli_common
import cli.main as cli
import flink_jobs.lifecycle as lifecycle
from cli import cmd_ingest
from cli.common import SHARED_FLAGS
from devtools import kafka_broker, s3_server
from flink_jobs.lifecycle import JobFailedError
from lakestream.config import ConfigError
from lakestream.paths import MissingBuildError
from lakestream.progress import ResumeError
from runtime.flink_env import FlinkRuntimeError
from sources.source_errors import StartingPointError

ROOT = Path(__file__).resolve().parents[3]

#: The least each sub-command needs to parse.
REQUIRED = {
    "kafka": ["status"],
    "s3": ["status"],
    "land": ["--topic", "t", "--table", "raw/t"],
    "ingest": [],
    "changefeed": ["--table", "silver/orders", "--to", "delta:audit/orders"],
    "tables": [],
    "maintain": ["history", "bronze/order_events"],
    "backfill": ["--from", "2024-06-01", "--to", "2024-06-02"],
    "reconcile": ["--from", "2024-06-01", "--to", "2024-06-02"],
    "query": ["metrics", "--from", "2024-06-01", "--to", "2024-06-02"],
    "explain": ["order", "1001"],
    "serve": [],
    "demo": [],
}
#: Which shared flags each sub-command takes (--config: all of them).
TAKES = {
    "kafka": set(),
    "s3": set(),
    "land": {"lakehouse", "bootstrap_servers", "bounded", "fresh", "job_name"},
    "ingest": {"lakehouse", "bootstrap_servers", "bounded", "fresh"},
    "changefeed": {"lakehouse", "bootstrap_servers", "fresh", "job_name"},
    "tables": {"lakehouse", "bootstrap_servers"},
    "maintain": set(),  # its operations take --lakehouse (tests/unit/flink_jobs/test_maintain_cli.py)
    "backfill": {"lakehouse"},
    "reconcile": {"lakehouse"},
    "query": set(),  # `query metrics` takes --lakehouse (tests/integration/test_query_metrics.py)
    "explain": set(),  # `explain order` takes --lakehouse (tests/integration/test_lambda_end_to_end.py)
    "serve": {"lakehouse"},
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
    for path in sorted([*(ROOT / "cli").glob("*.py"), *(ROOT / "demo").glob("*.py")]):
        if path.name != "common.py":
            assert not pattern.search(path.read_text(encoding="utf-8")), f"{path.name} declares a shared flag"


def test_load_applies_the_flag_overrides(tmp_path: Path) -> None:
    args = argparse.Namespace(config=None, lakehouse=str(tmp_path / "lake"), bootstrap_servers="h:9092")
    cfg = cli_common.load(args)
    assert (cfg.lakehouse.root, cfg.kafka.bootstrap_servers) == (str(tmp_path / "lake"), "h:9092")
    plain = cli_common.load(argparse.Namespace(config=None))
    assert plain.kafka.bootstrap_servers == "embedded"


def test_broker_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = cli_common.load(argparse.Namespace(config=None))
    assert lifecycle.broker(cfg.replace("kafka", bootstrap_servers="h:9092")) == "h:9092"
    monkeypatch.setattr(kafka_broker, "DEFAULT_STATE_FILE", tmp_path / "kafka.json")
    with pytest.raises(
        ConfigError, match="no local broker is running: start one with `lakestream kafka start`"
    ):
        lifecycle.broker(cfg)
    running = kafka_broker.BrokerStatus(running=True, pid=1, bootstrap_servers="127.0.0.1:4242")
    monkeypatch.setattr(kafka_broker, "status_detached", lambda: running)
    assert lifecycle.broker(cfg) == "127.0.0.1:4242"


class FakeEnv:
    # What the slot check reads of a local environment: nothing to check before execute.
    _j_stream_execution_environment = SimpleNamespace(
        getConfiguration=lambda: SimpleNamespace(toMap=lambda: {"execution.target": "local"})
    )

    def __init__(self) -> None:
        self.executed: list[str] = []

    def execute(self, name: str) -> None:
        self.executed.append(name)


def complete_checkpoint(folder: Path, job: str = "job1", n: int = 2) -> Path:
    done = folder / job / f"chk-{n}"
    done.mkdir(parents=True)
    (done / "_metadata").write_bytes(b"")
    return done


@pytest.fixture
def kafka_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """run_kafka_job with the Kafka client calls and the table listing recorded instead of made."""
    from serving import table_summary as tables
    from sources.flink import kafka_input

    calls: dict[str, Any] = {"commits": [], "printed": [], "runs": [], "starts": []}
    monkeypatch.setattr(
        kafka_input, "snapshot_end_offsets", lambda bootstrap, topics, **kw: {(topics[0], 0): 7}
    )
    monkeypatch.setattr(kafka_input, "commit_group_offsets", lambda *a: calls["commits"].append(a))
    monkeypatch.setattr(tables, "print_tables", lambda root: calls["printed"].append(root))

    def resolve(bootstrap: str, group: str, parts: Any, recorded: Any, fallback: str) -> Any:
        calls["starts"].append((sorted(parts), dict(recorded), fallback))
        return {p: recorded.get(p, 3) for p in parts}, []

    monkeypatch.setattr(lifecycle, "resolve_start_offsets", resolve)
    cfg = cli_common.load(argparse.Namespace(config=None, bootstrap_servers="h:1"))
    cfg = cfg.replace("flink", checkpoint_dir=str(tmp_path / "ckpt"))
    cfg = cfg.replace("lakehouse", root=str(tmp_path / "lake"))

    def run(**flags: bool) -> SimpleNamespace:
        env = FakeEnv()

        def build(config: Any, **given: Any) -> FakeEnv:
            calls["runs"].append(SimpleNamespace(parallelism=config.flink.parallelism, **given))
            return env

        job = lifecycle.KafkaJob(
            name="j",
            topics=["t"],
            group_id="g",
            progress_table=(str(tmp_path / "lake" / "t"), "p/t"),
            tables=[
                SimpleNamespace(
                    table=SimpleNamespace(table_uri=str(tmp_path / "lake" / "t"), storage_options=None),
                    app_prefix="p/t",
                )
            ],
            starting_offsets="committed",
            build=build,
            job_name="the job",
        )
        options = {"bounded": False, "fresh": False, **flags}
        assert lifecycle.run_kafka_job(cfg, job, command="ingest", **options) == 0
        assert env.executed[-1] == "the job"
        return calls["runs"][-1]  # type: ignore[no-any-return]

    calls["run"] = run
    calls["folder"] = tmp_path / "ckpt" / "j"
    calls["root"] = str(tmp_path / "lake")
    return calls


def test_a_bounded_run_stops_at_the_snapshot_commits_it_and_closes_its_lineage(
    kafka_job: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    run = kafka_job["run"](bounded=True)
    assert (run.bootstrap_servers, run.bounded, run.end_offsets, run.resume_from) == (
        "h:1",
        True,
        {("t", 0): 7},
        None,
    )
    assert run.start_offsets == {("t", 0): 3}  # nothing recorded: by --starting-offsets
    assert kafka_job["starts"] == [([("t", 0)], {}, "committed")]
    assert len(run.run_id) == 32 and run.checkpoint_dir == str(kafka_job["folder"] / run.run_id)
    assert kafka_job["commits"] == [("h:1", "g", {("t", 0): 7})]
    assert kafka_job["printed"] == [kafka_job["root"]]
    # It ended by itself and everything is committed: no lineage is left to restore.
    assert not (kafka_job["folder"] / run.run_id).exists()
    assert (
        "starting j from --starting-offsets committed (nothing recorded yet): t#0 at 3"
        in capsys.readouterr().out
    )


def test_an_unbounded_run_is_resumed_from_its_checkpoint_unless_fresh(
    kafka_job: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    first = kafka_job["run"]()
    lineage = kafka_job["folder"] / first.run_id
    assert (lineage / "lineage.json").is_file()  # killed, not ended: the lineage stays
    assert kafka_job["commits"] == [] and kafka_job["printed"] == []
    done = complete_checkpoint(lineage)
    (lineage / "job1" / "chk-3").mkdir()  # never completed: no _metadata

    resumed = kafka_job["run"]()
    assert (resumed.resume_from, resumed.run_id, resumed.start_offsets) == (done, first.run_id, None)
    assert resumed.checkpoint_dir == str(lineage)
    assert (
        f"resuming from checkpoint {done} (the previous run did not end by itself)" in capsys.readouterr().out
    )

    fresh = kafka_job["run"](fresh=True)
    assert fresh.resume_from is None and fresh.run_id != first.run_id
    assert not lineage.exists(), "a fresh lineage supersedes the older ones"


def test_a_bounded_run_after_a_killed_unbounded_one_settles_its_checkpoint_first(
    kafka_job: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from flink_jobs import resume

    settled: list[tuple[str | None, Path]] = []
    monkeypatch.setattr(resume, "settle", lambda specs, lin, ckpt: settled.append((lin.run_id, ckpt)))
    first = kafka_job["run"]()
    done = complete_checkpoint(kafka_job["folder"] / first.run_id)
    bounded = kafka_job["run"](bounded=True)
    # Its Kafka splits would stop nowhere: the checkpoint goes into the tables, not into this run.
    assert settled == [(first.run_id, done)]
    assert bounded.resume_from is None and bounded.run_id != first.run_id
    assert bounded.start_offsets == {("t", 0): 3}
    assert "settling the previous run at checkpoint" in capsys.readouterr().out
    assert not (kafka_job["folder"] / first.run_id).exists()


def test_an_earlier_versions_checkpoint_is_resumed_once(kafka_job: dict[str, Any]) -> None:
    done = complete_checkpoint(kafka_job["folder"], job="0123abcd" * 4)
    run = kafka_job["run"]()
    assert run.resume_from == done and run.run_id is None  # the run id is in the checkpoint's state
    lineage = Path(run.checkpoint_dir)
    assert lineage.name.startswith("legacy-") and done.is_dir()
    own = complete_checkpoint(lineage, job="job2", n=5)
    second = kafka_job["run"]()
    assert second.resume_from == own and second.checkpoint_dir == str(lineage)
    assert not done.exists(), "superseded by the lineage's own checkpoint"
    third = kafka_job["run"](bounded=True)  # settled (nothing staged), then a new lineage
    assert third.resume_from is None and third.run_id is not None
    assert list(kafka_job["folder"].iterdir()) == []


def test_a_bounded_run_that_ended_in_part_is_completed_first_with_its_own_ends(
    kafka_job: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from flink_jobs import resume

    first = kafka_job["run"](bounded=True)
    # As if that run had been killed after a writer's end-of-input commit: its lineage is still there.
    kept = resume.Lineage(
        folder=kafka_job["folder"] / first.run_id,
        run_id=first.run_id,
        bounded=True,
        parallelism=3,
        start={"offsets": {"t#0": 1}},
        end={"t#0": 5},
        created_ms=1,
        widest=3,
    )
    resume.JobFolder(kafka_job["folder"]).begin(kept)
    asked: list[tuple[str | None, int]] = []

    def ended(tables: Any, run_id: str | None, widest: int, *, txn_version: Any) -> bool:
        asked.append((run_id, widest))
        return run_id == first.run_id

    monkeypatch.setattr(resume, "lineage_ended", ended)
    then = kafka_job["run"](bounded=True)
    completion = kafka_job["runs"][-2]
    assert asked == [(first.run_id, 3)]
    assert (completion.run_id, completion.parallelism, completion.bounded) == (first.run_id, 3, True)
    assert (completion.end_offsets, completion.start_offsets, completion.resume_from) == (
        {("t", 0): 5},
        {("t", 0): 1},
        None,
    )
    assert kafka_job["commits"][-2] == ("h:1", "g", {("t", 0): 5})
    assert then.run_id not in (None, first.run_id) and then.end_offsets == {("t", 0): 7}
    assert "completing the interrupted bounded run" in capsys.readouterr().out
    assert not kept.folder.exists()


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        (ConfigError("flink.paralelism: unknown"), 2, "lakestream: configuration error: flink.paralelism"),
        (FlinkRuntimeError("no java"), 2, "lakestream: no java"),
        (MissingBuildError("run make jvm"), 2, "lakestream: run make jvm"),
        (kafka_broker.PortInUseError(9092), 2, "lakestream: port 9092 on 127.0.0.1 is already in use"),
        (StartingPointError("version 9 is past the end"), 2, "lakestream ingest: version 9 is past the end"),
        (JobFailedError("DataLossError: version 3"), 1, "lakestream ingest: job failed: DataLossError"),
        (ResumeError("topic t was re-created"), 2, "lakestream ingest: topic t was re-created"),
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

    monkeypatch.setattr(cmd_ingest, "cmd_ingest", fail)
    assert cli.main(["ingest"]) == code
    assert capsys.readouterr().err.startswith(message)


def test_other_errors_are_not_turned_into_exit_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(args: argparse.Namespace) -> int:
        raise KeyError("a bug")

    monkeypatch.setattr(cmd_ingest, "cmd_ingest", fail)
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


def test_s3_status_exit_code_and_no_secret_in_the_output(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(s3_server, "status_detached", lambda: s3_server.S3Status(running=False))
    assert cli.main(["s3", "status"]) == 1
    assert capsys.readouterr().out.strip() == "s3: not running"

    running = s3_server.S3Status(
        running=True,
        pid=42,
        endpoint=s3_server.S3Endpoint("http://127.0.0.1:4567", "AKEXAMPLE", "the-secret-key"),
        data_dir=Path("/data/s3"),
        log_file=Path("/data/s3/s3proxy.log"),
        state_file=Path("/state/s3.json"),
        responding=True,
        buckets=("lakestream",),
    )
    monkeypatch.setattr(s3_server, "status_detached", lambda: running)
    assert cli.main(["s3", "status"]) == 0
    out = capsys.readouterr().out
    assert "the-secret-key" not in out
    assert "s3: running (pid 42) at http://127.0.0.1:4567, answering" in out
    assert "s3://lakestream/" in out and "AKEXAMPLE" in out and "/state/s3.json" in out
    assert "AWS_CONDITIONAL_PUT=etag" in out and "AWS_S3_ALLOW_UNSAFE_RENAME" not in out

    started: dict[str, object] = {}

    def start(**kwargs: object) -> s3_server.S3Status:
        started.update(kwargs)
        return running

    monkeypatch.setattr(s3_server, "start_detached", start)
    assert cli.main(["s3", "start"]) == 0
    assert started == {"port": None, "buckets": ["lakestream"]}
    assert cli.main(["s3", "start", "--port", "4567", "--bucket", "a-b", "--bucket", "c-d"]) == 0
    assert started == {"port": 4567, "buckets": ["a-b", "c-d"]}
    assert "the-secret-key" not in capsys.readouterr().out
