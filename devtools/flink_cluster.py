"""A real Flink standalone cluster (one JobManager, N TaskManagers) from the pyflink wheel's ``bin/``.

The cluster tests run jobs on it with ``flink run -py``, including killing a TaskManager mid-job. It
runs from the wheel itself (``FLINK_HOME`` = the installed ``pyflink`` folder), with a configuration
folder of its own, so the wheel is never modified and several clusters can coexist. Its TaskManagers can
each have a working folder of their own (as on separate hosts), and its processes can keep checkpoints on
an object store, with Flink's S3 plugin installed as docs/object-storage.md says for a cluster.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools import processes
from lakestream import paths
from lakestream.config import FlinkConfig, StorageConfig
from runtime.flink_env import (
    BEAM_ENVIRONMENT_LOGGER,
    ROCKSDB_LOCALDIR,
    FlinkRuntimeError,
    flink_home,
    require_java,
    s3_plugin_settings,
)

#: The AWS variables a cluster's processes get from :class:`ObjectStoreAccess`: who they are to the
#: store. Where the store is goes into ``config.yaml`` (``s3.*``) and the jobs' ``[storage]``.
CREDENTIAL_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")

#: log4j lines that keep Beam's logging of a Python worker's environment (the AWS secret among it) to
#: errors, in every process's ``log4j*.properties`` (docs/object-storage.md, "On a cluster").
BEAM_LOG_LINES = f"""
logger.beamenv.name = {BEAM_ENVIRONMENT_LOGGER}
logger.beamenv.level = ERROR
"""


@dataclass(frozen=True)
class ObjectStoreAccess:
    """How a cluster's processes reach an object store for checkpoints on ``s3://``.

    ``storage`` becomes the S3 plugin's ``s3.*`` keys in ``config.yaml``; ``credentials`` (only the
    variables of :data:`CREDENTIAL_VARIABLES`) go into the processes' environment and nowhere else,
    which is also where the Delta sink in the Python workers finds them.
    """

    storage: StorageConfig
    credentials: Mapping[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        """Refuse anything but credentials in ``credentials``: the rest belongs in ``storage``."""
        other = sorted(set(self.credentials) - set(CREDENTIAL_VARIABLES))
        if other:
            raise FlinkRuntimeError(
                f"ObjectStoreAccess.credentials: {', '.join(other)} are not credentials; give only "
                f"{', '.join(CREDENTIAL_VARIABLES)} there and where the store is in storage"
            )


@dataclass(frozen=True)
class ProcessFolder:
    """The working folder of the cluster's processes, or of one of them: configuration, logs, pid
    files, temporary files, RocksDB's working copies and the plugins folder, each a sub-folder."""

    root: Path

    @property
    def conf(self) -> Path:
        """``FLINK_CONF_DIR``: ``config.yaml`` and the log4j files."""
        return self.root / "conf"

    @property
    def log(self) -> Path:
        """``FLINK_LOG_DIR``."""
        return self.root / "log"

    @property
    def pid(self) -> Path:
        """``FLINK_PID_DIR``: the scripts' pid files."""
        return self.root / "pid"

    @property
    def tmp(self) -> Path:
        """``io.tmp.dirs`` and the JVM's ``java.io.tmpdir``."""
        return self.root / "tmp"

    @property
    def rocksdb(self) -> Path:
        """RocksDB's working copies (``state.backend.rocksdb.localdir``) in a folder of their own."""
        return self.root / "rocksdb"

    @property
    def plugins(self) -> Path:
        """``FLINK_PLUGINS_DIR``, when the cluster keeps checkpoints on an object store."""
        return self.root / "plugins"


@dataclass
class StandaloneCluster:
    """A real Flink standalone cluster (one JobManager, N TaskManagers) from the wheel's ``bin/`` scripts.

    Everything binds to loopback; configuration, logs and pid files live under ``work_dir`` so the
    installed wheel stays untouched and several clusters can coexist.

    ``separate_taskmanagers``: each TaskManager gets a working folder of its own under ``work_dir``
    (``taskmanager-N``: configuration, temporary files, RocksDB's working copies, logs, pid file) and is
    started on its own with ``FLINK_CONF_DIR`` pointing there, as on separate hosts; its resource id
    (``taskmanager.resource-id``) is the folder's name. Otherwise they share the JobManager's.

    ``object_store``: the processes can keep checkpoints on ``s3://``: each gets a plugins folder of its
    own (``FLINK_PLUGINS_DIR``: the wheel's plugins and ``jvm/target/plugins/s3-fs-presto``), the S3
    plugin's ``s3.*`` keys in ``config.yaml`` and the credentials in its environment only.
    """

    work_dir: Path
    rest_port: int = 0
    taskmanagers: int = 1
    slots_per_taskmanager: int = 2
    extra_conf: dict[str, str] = field(default_factory=dict)
    separate_taskmanagers: bool = False
    object_store: ObjectStoreAccess | None = None

    def __post_init__(self) -> None:
        self.work_dir = Path(self.work_dir).resolve()
        #: The JobManager's folder, and the TaskManagers' too unless ``separate_taskmanagers``.
        self.folder = ProcessFolder(self.work_dir)
        self.conf_dir = self.folder.conf
        self.log_dir = self.folder.log
        self.pid_dir = self.folder.pid
        #: The cluster's JVMs' temporary files (extracted planner and RPC jars, blobs, RocksDB working
        #: copies), and the ``flink run`` client's: under ``work_dir``, not left in the system's.
        self.tmp_dir = self.folder.tmp
        self.home = flink_home()
        #: The TaskManagers' own folders by resource id, in start order (``separate_taskmanagers``).
        self.taskmanager_folders: dict[str, ProcessFolder] = {}
        self._rpc_port = 0

    # -- configuration -------------------------------------------------------------------------------
    def _settings(self, folder: ProcessFolder) -> dict[str, str]:
        """``config.yaml`` of the processes that run in ``folder``."""
        settings = {
            "jobmanager.rpc.address": "localhost",
            "jobmanager.rpc.port": str(self._rpc_port),
            "jobmanager.bind-host": "localhost",
            "jobmanager.memory.process.size": "1024m",
            "taskmanager.bind-host": "localhost",
            "taskmanager.host": "localhost",
            "taskmanager.rpc.port": "0",
            "taskmanager.memory.process.size": "1536m",
            "taskmanager.memory.managed.fraction": "0.1",
            "taskmanager.numberOfTaskSlots": str(self.slots_per_taskmanager),
            "taskmanager.memory.segment-size": FlinkConfig().network_buffer_size,  # as a local run
            "rest.address": "localhost",
            "rest.bind-address": "localhost",
            "rest.port": str(self.rest_port),
            "blob.server.port": "0",
            "env.pid.dir": str(folder.pid),
            "env.log.dir": str(folder.log),
            "env.java.opts.all": _java_opts(self.home, folder.tmp),
            "io.tmp.dirs": str(folder.tmp),
            "python.executable": sys.executable,
            "python.client.executable": sys.executable,
        }
        if folder != self.folder:
            settings[ROCKSDB_LOCALDIR] = str(folder.rocksdb)
            settings["taskmanager.resource-id"] = folder.root.name
        if self.object_store is not None:
            settings.update(s3_plugin_settings(self.object_store.storage))
        return {**settings, **self.extra_conf}

    def _write_conf(self, folder: ProcessFolder) -> None:
        """The configuration folder (and the other folders) of the processes that run in ``folder``."""
        for path in (folder.conf, folder.log, folder.pid, folder.tmp):
            path.mkdir(parents=True, exist_ok=True)
        for name in ("log4j.properties", "log4j-cli.properties", "log4j-console.properties"):
            text = (self.home / "conf" / name).read_text(encoding="utf-8")
            # The processes' environment may hold an AWS secret: Beam must not log it.
            (folder.conf / name).write_text(text + BEAM_LOG_LINES, encoding="utf-8")
        # Flink 2 reads config.yaml; flat dotted keys are valid YAML and need no nesting.
        lines = [f"{k}: {json.dumps(v)}" for k, v in self._settings(folder).items()]
        (folder.conf / "config.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (folder.conf / "masters").write_text(f"localhost:{self.rest_port}\n", encoding="utf-8")
        workers = 1 if folder != self.folder else self.taskmanagers
        (folder.conf / "workers").write_text("localhost\n" * workers, encoding="utf-8")
        if folder != self.folder:
            folder.rocksdb.mkdir(exist_ok=True)
        if self.object_store is not None:
            _install_plugins(self.home, folder.plugins)

    def _env(self, folder: ProcessFolder | None = None) -> dict[str, str]:
        """The environment of the processes that run in ``folder`` (default: the JobManager's, which the
        ``flink run`` client shares)."""
        folder = folder or self.folder
        env = dict(os.environ)
        env.update(
            FLINK_HOME=str(self.home),
            FLINK_CONF_DIR=str(folder.conf),
            FLINK_LOG_DIR=str(folder.log),
            FLINK_PID_DIR=str(folder.pid),
            PYFLINK_CLIENT_EXECUTABLE=sys.executable,
        )
        if self.object_store is not None:
            # Of the AWS variables only the credentials: where the store is comes from config.yaml
            # (Flink) and from the job ([storage], the Python workers), never from this environment.
            env = {k: v for k, v in env.items() if not k.startswith("AWS_")}
            env["FLINK_PLUGINS_DIR"] = str(folder.plugins)
            env.update(self.object_store.credentials)
        return env

    def _bin(
        self, script: str, *args: str, folder: ProcessFolder | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(self.home / "bin" / script), *args],
            env=self._env(folder),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    # -- lifecycle -----------------------------------------------------------------------------------
    @property
    def rest_url(self) -> str:
        """Base URL of the JobManager's REST API."""
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def address(self) -> str:
        """The ``-m`` argument for ``flink run``."""
        return f"localhost:{self.rest_port}"

    def start(self, *, timeout: float = 120) -> StandaloneCluster:
        """Start the JobManager and TaskManagers and wait until all slots are registered."""
        require_java()
        if self.rest_port == 0:
            self.rest_port = processes.free_port()
        elif processes.port_in_use(self.rest_port):
            raise FlinkRuntimeError(
                f"port {self.rest_port} is in use; stop what listens there or choose another rest port"
            )
        self._rpc_port = processes.free_port(exclude=[self.rest_port])
        self._write_conf(self.folder)
        self._start_process("jobmanager.sh", self.folder)
        for _ in range(self.taskmanagers):
            self.add_taskmanager()
        deadline = time.monotonic() + timeout
        want = self.taskmanagers
        # A TaskManager is counted on registration, its slots only once it has sent its first slot
        # report: a job submitted in between waits for slots, so "up" means both.
        want_slots = self.taskmanagers * self.slots_per_taskmanager
        while time.monotonic() < deadline:
            try:
                overview = self.rest("/overview")
                if overview.get("taskmanagers", 0) >= want and overview.get("slots-total", 0) >= want_slots:
                    return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        self.stop()
        raise FlinkRuntimeError(f"Flink cluster did not come up in {timeout:.0f}s; logs: {self.log_dir}")

    def _start_process(self, script: str, folder: ProcessFolder) -> None:
        result = self._bin(script, "start", folder=folder)
        if result.returncode != 0:
            raise FlinkRuntimeError(f"{script} start failed: {result.stderr or result.stdout}")

    def rest(self, path: str, *, method: str = "GET", timeout: float = 5) -> Any:
        """Call the REST API and decode its JSON answer."""
        req = urllib.request.Request(self.rest_url + path, method=method)
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
        return json.loads(body) if body else {}

    def _folders(self) -> list[ProcessFolder]:
        """Every working folder of the cluster: the JobManager's, then the TaskManagers' own."""
        return [self.folder, *self.taskmanager_folders.values()]

    def taskmanager_pids(self) -> list[int]:
        """Pids of the TaskManager JVMs started (from the pid files the scripts keep)."""
        return [p for f in self._folders() for p in _read_pids(f.pid, "taskexecutor")]

    def kill_taskmanager(self, resource_id: str | None = None) -> int:
        """SIGKILL one TaskManager, as a machine failure would, and return its pid: the one with
        ``resource_id`` (``separate_taskmanagers``), else the first one alive."""
        if resource_id is not None:
            if resource_id not in self.taskmanager_folders:
                raise FlinkRuntimeError(
                    f"no TaskManager {resource_id!r} in this cluster; its TaskManagers: "
                    f"{', '.join(self.taskmanager_folders) or 'none with a folder of its own'}"
                )
            pids = _read_pids(self.taskmanager_folders[resource_id].pid, "taskexecutor")
        else:
            pids = self.taskmanager_pids()
        alive = [p for p in pids if processes.alive(p)]
        if not alive:
            which = "TaskManager" if resource_id is None else f"TaskManager {resource_id!r}"
            raise FlinkRuntimeError(f"no running {which} to kill")
        os.kill(alive[0], signal.SIGKILL)
        return alive[0]

    def add_taskmanager(self) -> str | None:
        """Start one more TaskManager (e.g. to replace a killed one); its resource id when it has a
        folder of its own (``separate_taskmanagers``), else None."""
        if not self.separate_taskmanagers:
            self._start_process("taskmanager.sh", self.folder)
            return None
        resource_id = f"taskmanager-{len(self.taskmanager_folders)}"
        folder = ProcessFolder(self.work_dir / resource_id)
        self.taskmanager_folders[resource_id] = folder
        self._write_conf(folder)
        self._start_process("taskmanager.sh", folder)
        return resource_id

    def job_taskmanagers(self, job_id: str) -> set[str]:
        """Resource ids of the TaskManagers that run a subtask of job ``job_id`` now (REST)."""
        found: set[str] = set()
        for vertex in self.rest(f"/jobs/{job_id}").get("vertices", []):
            info = self.rest(f"/jobs/{job_id}/vertices/{vertex['id']}/taskmanagers")
            for tm in info.get("taskmanagers", []):
                if tm.get("status") == "RUNNING":
                    found.add(str(tm["taskmanager-id"]))
        return found

    def stop(self) -> None:
        """Stop every process of this cluster; SIGKILL whatever the scripts leave behind."""
        if not self.conf_dir.exists():
            return
        for folder in self._folders()[::-1]:
            self._bin("taskmanager.sh", "stop-all", folder=folder, timeout=60)
        self._bin("jobmanager.sh", "stop-all", timeout=60)
        pids = self.taskmanager_pids() + _read_pids(self.pid_dir, "standalonesession")
        deadline = time.monotonic() + 20
        while any(processes.alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.3)
        processes.kill_until_gone(lambda: [p for p in pids if processes.alive(p)], timeout=10)
        # A TaskManager killed with SIGKILL leaves its PyFlink Python workers running (they keep waiting
        # on the dead JVM's gRPC channel, re-parented to init); they carry this cluster's configuration
        # folder in their environment, which is how they are found.
        processes.kill_until_gone(self.leftover_processes, timeout=15)

    def leftover_processes(self) -> list[int]:
        """Pids of processes started for this cluster (``FLINK_CONF_DIR`` = one of its conf folders),
        Linux only."""
        return [p for f in self._folders() for p in processes.pids_with_env("FLINK_CONF_DIR", str(f.conf))]

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- jobs ----------------------------------------------------------------------------------------
    def run_python(
        self,
        script: str | Path,
        args: Sequence[str] = (),
        *,
        detached: bool = False,
        timeout: float = 600,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """``flink run -m <this cluster> -pyexec <this python> -py script args...``."""
        cmd = [
            "bash",
            str(self.home / "bin" / "flink"),
            "run",
            "-m",
            self.address,
            "-pyexec",
            sys.executable,
            "-pyclientexec",
            sys.executable,
        ]
        if detached:
            cmd.append("-d")
        cmd += ["-py", str(script), *args]
        return subprocess.run(
            cmd,
            env={**self._env(), **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def jobs(self) -> list[dict[str, Any]]:
        """Jobs known to the cluster with their state."""
        return list(self.rest("/jobs/overview").get("jobs", []))

    def wait_for_job(
        self, job_id: str, *, states: Sequence[str] = ("FINISHED",), timeout: float = 300
    ) -> str:
        """Wait until job ``job_id`` reaches one of ``states`` (or a terminal state) and return it."""
        terminal = {"FINISHED", "FAILED", "CANCELED"}
        deadline = time.monotonic() + timeout
        state = "UNKNOWN"
        while time.monotonic() < deadline:
            state = str(self.rest(f"/jobs/{job_id}").get("state", "UNKNOWN"))
            if state in states or state in terminal:
                return state
            time.sleep(0.5)
        raise FlinkRuntimeError(f"job {job_id} still {state} after {timeout:.0f}s; logs: {self.log_dir}")


def _java_opts(home: Path, tmp_dir: Path) -> str:
    """The wheel's JVM options, and the temporary folder where its path has no white space (Flink's
    scripts split the options at white space)."""
    opts = _wheel_java_opts(home)
    if any(c.isspace() for c in str(tmp_dir)):
        return opts
    return f"{opts} -Djava.io.tmpdir={tmp_dir}".strip()


def _wheel_java_opts(home: Path) -> str:
    """The --add-opens flags the wheel's own config.yaml carries (Flink needs them on Java 17)."""
    text = (home / "conf" / "config.yaml").read_text(encoding="utf-8")
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("all: --add-exports"):
            return stripped[len("all: ") :]
    return ""


def _install_plugins(home: Path, target: Path) -> None:
    """The wheel's plugins and Flink's S3 plugin in the plugins folder ``target`` (``FLINK_PLUGINS_DIR``),
    as links: a folder per plugin holding a link to each of its files, so that neither the installed
    wheel nor ``jvm/target`` is modified and each process can have a plugins folder of its own."""
    for source in [*sorted(p for p in (home / "plugins").iterdir() if p.is_dir()), paths.require_s3_plugin()]:
        for file in sorted(source.rglob("*")):
            link = target / source.name / file.relative_to(source)
            if file.is_file() and not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(file.resolve())


def _read_pids(pid_dir: Path, kind: str) -> list[int]:
    pids: list[int] = []
    for f in pid_dir.glob(f"*{kind}*.pid"):
        for line in f.read_text(encoding="utf-8").split():
            if line.strip().isdigit():
                pids.append(int(line))
    return pids
