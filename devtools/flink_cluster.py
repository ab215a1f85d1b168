"""A real Flink standalone cluster (one JobManager, N TaskManagers) from the pyflink wheel's ``bin/``.

The cluster tests run jobs on it with ``flink run -py``, including killing a TaskManager mid-job. It
runs from the wheel itself (``FLINK_HOME`` = the installed ``pyflink`` folder), with a configuration
folder of its own, so the wheel is never modified and several clusters can coexist.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools import processes
from lakestream.config import FlinkConfig
from runtime.flink_env import FlinkRuntimeError, flink_home, require_java


@dataclass
class StandaloneCluster:
    """A real Flink standalone cluster (one JobManager, N TaskManagers) from the wheel's ``bin/`` scripts.

    Everything binds to loopback; configuration, logs and pid files live under ``work_dir`` so the
    installed wheel stays untouched and several clusters can coexist.
    """

    work_dir: Path
    rest_port: int = 0
    taskmanagers: int = 1
    slots_per_taskmanager: int = 2
    extra_conf: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.work_dir = Path(self.work_dir).resolve()
        self.conf_dir = self.work_dir / "conf"
        self.log_dir = self.work_dir / "log"
        self.pid_dir = self.work_dir / "pid"
        #: The cluster's JVMs' temporary files (extracted planner and RPC jars, blobs, RocksDB working
        #: copies), and the ``flink run`` client's: under ``work_dir``, not left in the system's.
        self.tmp_dir = self.work_dir / "tmp"
        self.home = flink_home()

    # -- configuration -------------------------------------------------------------------------------
    def _write_conf(self) -> None:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.pid_dir.mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        for name in ("log4j.properties", "log4j-cli.properties", "log4j-console.properties"):
            shutil.copy(self.home / "conf" / name, self.conf_dir / name)
        settings = {
            "jobmanager.rpc.address": "localhost",
            "jobmanager.rpc.port": str(processes.free_port()),
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
            "env.pid.dir": str(self.pid_dir),
            "env.log.dir": str(self.log_dir),
            "env.java.opts.all": _java_opts(self.home, self.tmp_dir),
            "io.tmp.dirs": str(self.tmp_dir),
            "python.executable": sys.executable,
            "python.client.executable": sys.executable,
            **self.extra_conf,
        }
        # Flink 2 reads config.yaml; flat dotted keys are valid YAML and need no nesting.
        lines = [f"{k}: {json.dumps(v)}" for k, v in settings.items()]
        (self.conf_dir / "config.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (self.conf_dir / "masters").write_text(f"localhost:{self.rest_port}\n", encoding="utf-8")
        (self.conf_dir / "workers").write_text("localhost\n" * self.taskmanagers, encoding="utf-8")

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            FLINK_HOME=str(self.home),
            FLINK_CONF_DIR=str(self.conf_dir),
            FLINK_LOG_DIR=str(self.log_dir),
            FLINK_PID_DIR=str(self.pid_dir),
            PYFLINK_CLIENT_EXECUTABLE=sys.executable,
        )
        return env

    def _bin(self, script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(self.home / "bin" / script), *args],
            env=self._env(),
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
        self._write_conf()
        for script in ["jobmanager.sh"] + ["taskmanager.sh"] * self.taskmanagers:
            result = self._bin(script, "start")
            if result.returncode != 0:
                raise FlinkRuntimeError(f"{script} start failed: {result.stderr or result.stdout}")
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

    def rest(self, path: str, *, method: str = "GET", timeout: float = 5) -> Any:
        """Call the REST API and decode its JSON answer."""
        req = urllib.request.Request(self.rest_url + path, method=method)
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
        return json.loads(body) if body else {}

    def taskmanager_pids(self) -> list[int]:
        """Pids of the running TaskManager JVMs (from the pid file the scripts keep)."""
        return _read_pids(self.pid_dir, "taskexecutor")

    def kill_taskmanager(self) -> int:
        """SIGKILL one TaskManager, as a machine failure would, and return its pid."""
        pids = self.taskmanager_pids()
        alive = [p for p in pids if processes.alive(p)]
        if not alive:
            raise FlinkRuntimeError("no running TaskManager to kill")
        os.kill(alive[0], signal.SIGKILL)
        return alive[0]

    def add_taskmanager(self) -> None:
        """Start one more TaskManager (e.g. to replace a killed one)."""
        result = self._bin("taskmanager.sh", "start")
        if result.returncode != 0:
            raise FlinkRuntimeError(f"taskmanager.sh start failed: {result.stderr or result.stdout}")

    def stop(self) -> None:
        """Stop every process of this cluster; SIGKILL whatever the scripts leave behind."""
        if not self.conf_dir.exists():
            return
        self._bin("taskmanager.sh", "stop-all", timeout=60)
        self._bin("jobmanager.sh", "stop-all", timeout=60)
        pids = _read_pids(self.pid_dir, "taskexecutor") + _read_pids(self.pid_dir, "standalonesession")
        deadline = time.monotonic() + 20
        while any(processes.alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.3)
        processes.kill_until_gone(lambda: [p for p in pids if processes.alive(p)], timeout=10)
        # A TaskManager killed with SIGKILL leaves its PyFlink Python workers running (they keep waiting
        # on the dead JVM's gRPC channel, re-parented to init); they carry this cluster's configuration
        # folder in their environment, which is how they are found.
        processes.kill_until_gone(self.leftover_processes, timeout=15)

    def leftover_processes(self) -> list[int]:
        """Pids of processes started for this cluster (``FLINK_CONF_DIR`` = its conf folder), Linux only."""
        return processes.pids_with_env("FLINK_CONF_DIR", str(self.conf_dir))

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


def _read_pids(pid_dir: Path, kind: str) -> list[int]:
    pids: list[int] = []
    for f in pid_dir.glob(f"*{kind}*.pid"):
        for line in f.read_text(encoding="utf-8").split():
            if line.strip().isdigit():
                pids.append(int(line))
    return pids
