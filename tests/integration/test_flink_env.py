"""The local MiniCluster's JVM really runs with the configured options (a real JVM, in a child process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent(
    """
    import json, os, sys
    from lakestream.config import FlinkConfig
    from runtime.flink_env import build_env

    options = tuple(json.loads(sys.argv[1]))
    env = build_env(FlinkConfig(jvm_options=options), checkpoint_dir=sys.argv[2])
    from pyflink.java_gateway import get_gateway
    bean = get_gateway().jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    print(json.dumps({
        "args": list(bean.getInputArguments()),
        "object_reuse": env.get_config().is_object_reuse_enabled(),
        "jvm_args_left": os.environ.get("JVM_ARGS"),
        "jvm_arenas": get_gateway().jvm.java.lang.System.getenv("MALLOC_ARENA_MAX"),
    }))
    """
)


def _run_script(
    tmp_path: Path, source: str, args: list[str] | None = None, environ: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``source`` run by this Python in a child process with ``args``, in this environment without its
    ``MALLOC_ARENA_MAX`` and with ``environ`` on top."""
    script = tmp_path / "script.py"
    script.write_text(source)
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    return subprocess.run(
        [sys.executable, str(script), *(args or [])],
        cwd=ROOT,
        env={**env, **(environ or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def _probe(tmp_path: Path, options: list[str], environ: dict[str, str] | None = None) -> dict[str, object]:
    out = _run_script(tmp_path, PROBE, [json.dumps(options), str(tmp_path / "ckpt")], environ)
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_jvm_options_reach_the_minicluster_jvm_and_object_reuse_is_on(tmp_path: Path) -> None:
    got = _probe(tmp_path, ["-XX:TieredStopAtLevel=1", "-Xss2m"])
    assert "-XX:TieredStopAtLevel=1" in got["args"] and "-Xss2m" in got["args"]
    assert got["object_reuse"] is True
    assert got["jvm_args_left"] is None  # set only around the launch


def test_no_jvm_options_means_the_jvm_defaults(tmp_path: Path) -> None:
    got = _probe(tmp_path, [])
    assert not [a for a in got["args"] if a.startswith("-XX:TieredStopAtLevel")]


def test_the_jvm_gets_two_glibc_arenas_unless_the_caller_sets_them(tmp_path: Path) -> None:
    assert _probe(tmp_path, [])["jvm_arenas"] == "2"
    assert _probe(tmp_path, [], {"MALLOC_ARENA_MAX": "4"})["jvm_arenas"] == "4"


def test_a_jvm_started_before_the_job_is_built_gets_the_arenas_too(tmp_path: Path) -> None:
    out = _run_script(
        tmp_path,
        "from runtime.flink_env import launch_gateway\n"
        "from pyflink.java_gateway import get_gateway\n"
        "launch_gateway([])\n"
        "print(get_gateway().jvm.java.lang.System.getenv('MALLOC_ARENA_MAX'))\n",
    )
    assert out.stdout.strip().splitlines()[-1] == "2"


def test_the_jvm_keeps_running_after_writing_more_than_a_pipe_to_its_stderr(tmp_path: Path) -> None:
    # PyFlink puts the JVM's stderr on a pipe: unread, the 65th KiB blocked the writing JVM thread.
    out = _run_script(
        tmp_path,
        "from runtime.flink_env import launch_gateway\n"
        "from pyflink.java_gateway import get_gateway\n"
        "launch_gateway([])\n"
        "err = get_gateway().jvm.java.lang.System.err\n"
        "err.print(''.join('jvm line %04d %s\\n' % (i, 'x' * 100) for i in range(2000)))\n"
        "err.flush()\n"
        "print('still running', flush=True)\n"
        "import time; time.sleep(5)  # the lines are passed on by a thread of this process\n",
    )
    assert out.stdout.strip().splitlines()[-1] == "still running"
    lines = [line for line in out.stderr.splitlines() if line.startswith("jvm line ")]
    assert len(lines) == 2000 and lines[-1].startswith("jvm line 1999 ")
    assert "Unknown module: jdk.proxy2" not in out.stderr


def test_building_the_ingest_graph_leaves_apache_beam_to_the_workers(tmp_path: Path) -> None:
    """The client builds every Python operator of the ingest job (speed layer on) without importing
    Apache Beam or pandas, which only the workers need (``flink_runtime.import_fn_execution_without_beam``);
    with loopback workers (run in this process) it keeps PyFlink's full import."""
    script = textwrap.dedent(
        """
        import json, sys
        from flink_jobs.ingest import build_ingest_job
        from lakestream.config import load_config

        NAMES = ["standardise + bronze", "resolve orders + late writer", "silver committer + gold writer"]

        cfg = load_config(None).replace("gold", enabled=True)
        env = build_ingest_job(
            cfg, bootstrap_servers="127.0.0.1:9", bounded=True, end_offsets={("t", 0): 1},
            checkpoint_dir=sys.argv[1],
        )
        plan = env.get_execution_plan()
        import pyflink.fn_execution as fn_execution
        print(json.dumps({
            "beam": sorted(m for m in sys.modules if m.split(".")[0] in ("apache_beam", "pandas"))[:3],
            "python_operators": [n for n in NAMES if n in plan],
            "cython": fn_execution.PYFLINK_CYTHON_ENABLED,
        }))
        """
    )
    out = _run_script(tmp_path, script, [str(tmp_path / "ckpt")])
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["beam"] == [] and got["cython"] is False
    assert len(got["python_operators"]) == 3, got

    loopback = _run_script(
        tmp_path, script, [str(tmp_path / "ckpt2")], {"_python_worker_execution_mode": "loopback"}
    )
    assert json.loads(loopback.stdout.strip().splitlines()[-1])["beam"] != []


WORKER_PROBE = textwrap.dedent(
    """
    import json, sys
    from pyflink.common import Types
    from lakestream.config import FlinkConfig
    from runtime.flink_env import build_env

    def probe(_):
        import json, sys
        loaded = "pandas" in sys.modules
        try:
            import pandas  # noqa: F401
            importable = True
        except ModuleNotFoundError:
            importable = False
        return json.dumps({"beam": "apache_beam" in sys.modules, "loaded": loaded, "importable": importable})

    env = build_env(FlinkConfig(parallelism=1), checkpoint_dir=sys.argv[1])
    out = list(env.from_collection([1], type_info=Types.INT()).map(probe, output_type=Types.STRING())
               .execute_and_collect())
    print(out[0])
    """
)


def test_the_local_python_workers_run_without_pandas_unless_asked(tmp_path: Path) -> None:
    """A process-mode worker of the MiniCluster has not loaded pandas and cannot import it
    (``runtime/worker/site``); ``LAKESTREAM_WORKER_PANDAS=1`` gives it pandas back."""
    out = _run_script(tmp_path, WORKER_PROBE, [str(tmp_path / "ckpt")])
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "beam": True,
        "loaded": False,
        "importable": False,
    }
    allowed = _run_script(
        tmp_path, WORKER_PROBE, [str(tmp_path / "ckpt2")], {"LAKESTREAM_WORKER_PANDAS": "1"}
    )
    assert json.loads(allowed.stdout.strip().splitlines()[-1]) == {
        "beam": True,
        "loaded": True,
        "importable": True,
    }


def test_no_secret_of_the_environment_reaches_the_local_jvms_log(tmp_path: Path) -> None:
    """The AWS variables are in the local JVM's environment (S3 checkpoints and tables need them), and Beam
    logs a Python worker's whole environment when it closes it: that logger keeps only its errors."""
    secret = "not-a-real-secret-4f1c9e"
    logs = tmp_path / "log"
    environ = {"AWS_SECRET_ACCESS_KEY": secret, "FLINK_LOG_DIR": str(logs)}
    out = _run_script(tmp_path, WORKER_PROBE, [str(tmp_path / "ckpt")], environ)
    assert json.loads(out.stdout.strip().splitlines()[-1])["beam"] is True  # a Python worker ran
    written = {f.name: f.read_text(errors="replace") for f in logs.rglob("*") if f.is_file()}
    assert any("switched from state RUNNING to FINISHED" in text for text in written.values()), written
    assert [name for name, text in written.items() if secret in text] == []
    assert secret not in out.stdout + out.stderr


ARCHIVE_PROBE = textwrap.dedent(
    """
    import sys
    from lakestream.config import FlinkConfig
    from runtime.flink_env import build_env

    # The SQL planner's classes too: a table environment over the job's environment.
    env = build_env(FlinkConfig(parallelism=1), checkpoint_dir=sys.argv[1])
    from pyflink.table import StreamTableEnvironment
    StreamTableEnvironment.create(env).sql_query("SELECT 1 AS n")
    print("built")
    """
)


def test_the_first_local_jvm_writes_a_class_archive_that_later_ones_map(tmp_path: Path) -> None:
    """The first JVM writes Flink's classes to an archive at its exit and it is published under its
    key; the next JVM loads Flink's and the planner's classes from it (the JVM's own class-loading log
    says so); neither prints anything about archives; ``flink.class_archive = false`` maps none."""
    cache = tmp_path / "cache"
    folder = cache / "lakestream" / "jvm-class-archives"
    environ = {"XDG_CACHE_HOME": str(cache)}
    first = _run_script(tmp_path, ARCHIVE_PROBE, [str(tmp_path / "ckpt1")], environ)
    assert first.stdout.strip().splitlines()[-1] == "built"
    published = sorted(p.name for p in folder.iterdir())
    assert len(published) == 1 and published[0].endswith(".jsa"), published

    log = tmp_path / "loaded.txt"
    second = _run_script(
        tmp_path,
        ARCHIVE_PROBE,
        [str(tmp_path / "ckpt2")],
        {**environ, "JVM_ARGS": f"-Xlog:class+load=info:file={log}"},
    )
    assert sorted(p.name for p in folder.iterdir()) == published, "a launch that maps it writes none"
    shared = [line for line in log.read_text().splitlines() if "source: shared objects file (top)" in line]
    assert any(" org.apache.flink.streaming.api.environment." in line for line in shared), shared[:5]
    assert any(" org.apache.flink.table.planner." in line for line in shared), "the planner's classes"
    for run in (first, second):
        assert "[cds" not in run.stdout + run.stderr and "shared archive" not in run.stdout + run.stderr

    off = tmp_path / "off.txt"
    without = ARCHIVE_PROBE.replace("parallelism=1)", "parallelism=1, class_archive=False)")
    _run_script(
        tmp_path,
        without,
        [str(tmp_path / "ckpt3")],
        {**environ, "JVM_ARGS": f"-Xlog:class+load=info:file={off}"},
    )
    assert "source: shared objects file (top)" not in off.read_text()


SCRATCH_PROBE = textwrap.dedent(
    """
    import sys, time
    from pyflink.common import Types, WatermarkStrategy
    from pyflink.datastream.connectors.number_seq import NumberSequenceSource
    from pyflink.java_gateway import get_gateway
    from lakestream.config import FlinkConfig
    from runtime.flink_env import build_env

    env = build_env(FlinkConfig(parallelism=1), checkpoint_dir=sys.argv[1], state_backend="rocksdb")
    print(get_gateway().jvm.java.lang.System.getProperty("java.io.tmpdir"), flush=True)
    if sys.argv[2] == "wait":
        time.sleep(600)
    # A sequence, not a collection: PyFlink leaves a collection's pickle folder in the temporary folder.
    numbers = NumberSequenceSource(1, 3)
    (env.from_source(numbers, WatermarkStrategy.no_watermarks(), "numbers")
        .key_by(lambda x: x % 2, key_type=Types.LONG())
        .map(lambda x: x + 1, output_type=Types.LONG())
        .print())
    env.execute("scratch probe")
    """
)


def test_a_local_run_leaves_nothing_in_the_temporary_folder(tmp_path: Path) -> None:
    """The local JVM's temporary files (the MiniCluster's working folder with RocksDB's, the RPC jar)
    go to a folder of the launching process's, removed at its exit; the folder of a process killed
    with -9 is removed by the next run."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    environ = {"TMPDIR": str(tmp)}
    script = tmp_path / "scratch.py"
    script.write_text(SCRATCH_PROBE)
    env = {**{k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}, **environ}
    killed = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "ckpt0"), "wait"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert killed.stdout is not None
        orphan = Path(killed.stdout.readline().strip())
        assert orphan.parent == tmp and orphan.name.startswith(f"lakestream-jvm-{killed.pid}-"), orphan
        assert orphan.is_dir()
    finally:
        killed.kill()
        killed.wait()

    out = _run_script(tmp_path, SCRATCH_PROBE, [str(tmp_path / "ckpt1"), "run"], environ)
    scratch = Path(out.stdout.strip().splitlines()[0])
    assert scratch.parent == tmp and scratch != orphan
    assert list(tmp.iterdir()) == [], sorted(p.name for p in tmp.iterdir())


LOCALDIR_PROBE = textwrap.dedent(
    """
    import json, sys
    import runtime.flink_env as runtime
    from lakestream.config import FlinkConfig

    def localdir(**kwargs):
        env = runtime.build_env(FlinkConfig(parallelism=1), checkpoint_dir=sys.argv[1], **kwargs)
        return env._j_stream_execution_environment.getConfiguration().toMap().get(
            "state.backend.rocksdb.localdir")

    default = localdir()
    extra = localdir(extra={"state.backend.rocksdb.localdir": "/chosen-extra"})
    plain = runtime.flink_settings  # the benchmarks add their settings here

    def with_localdir(*args, **kwargs):
        return {**plain(*args, **kwargs), "state.backend.rocksdb.localdir": "/chosen-settings"}

    runtime.flink_settings = with_localdir
    print(json.dumps([default, extra, localdir()]))
    """
)


def test_rocksdb_works_in_the_scratch_folder_unless_the_caller_chose_a_folder(tmp_path: Path) -> None:
    out = _run_script(tmp_path, LOCALDIR_PROBE, [str(tmp_path / "ckpt")], {"TMPDIR": str(tmp_path)})
    default, extra, settings = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(default).parent == tmp_path and Path(default).name.startswith("lakestream-jvm-")
    assert (extra, settings) == ("/chosen-extra", "/chosen-settings")


WORKERS_PROBE = textwrap.dedent(
    """
    import json, os, sys
    from pyflink.common import Types
    from lakestream.config import FlinkConfig
    from runtime.flink_env import build_env

    env = build_env(FlinkConfig(parallelism=2, python_workers=sys.argv[2]), checkpoint_dir=sys.argv[1])
    first = env.from_collection(list(range(64)), type_info=Types.INT()).rebalance().map(
        lambda x: f"{x},{os.getpid()}", output_type=Types.STRING()
    )
    both = first.key_by(lambda s: int(s.split(",")[0]) % 8, key_type=Types.INT()).map(
        lambda s: f"{s},{os.getpid()}", output_type=Types.STRING()
    )
    rows = [r.split(",") for r in both.execute_and_collect()]
    print(json.dumps([sorted({r[1] for r in rows}), sorted({r[2] for r in rows})]))
    """
)


def test_python_workers_run_one_per_slot_or_one_per_operator(tmp_path: Path) -> None:
    """``flink.python_workers``: two Python operators at parallelism 2 run in the same two worker
    processes (``slot``) or in four (``operator``)."""
    pids = {}
    for mode in ("slot", "operator"):
        out = _run_script(tmp_path, WORKERS_PROBE, [str(tmp_path / f"ckpt-{mode}"), mode])
        first, second = json.loads(out.stdout.strip().splitlines()[-1])
        pids[mode] = (set(first), set(second))
    first, second = pids["slot"]
    assert first == second and len(first) == 2, pids
    first, second = pids["operator"]
    assert not first & second and len(first) == len(second) == 2, pids
