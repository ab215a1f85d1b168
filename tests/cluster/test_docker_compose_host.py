"""docker-compose.yml's Flink services and demo client, run on this host as the containers would run them.

There is no Docker engine here, so each service's own command (``docker/entrypoint.sh jobmanager``,
``taskmanager``, ``demo``) runs as a process with the compose file's environment, mapped to one host:
the service names ``jobmanager`` / ``taskmanager`` and the bind-all address are loopback, ``kafka:9092``
is the tests' real broker (the ``apache/kafka`` image cannot run here), the volumes ``/lakehouse`` and
``/checkpoints`` are folders of the test, and the ports each container would have to itself (REST 8081,
RPC 6123, Prometheus 9249) are free ports, as Docker's port mapping would give. Each service gets its
own copy of the wheel's ``conf/`` (a container's), to which the entrypoint appends ``FLINK_PROPERTIES``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from deltalake import DeltaTable

from devtools import processes
from runtime.flink_env import flink_home
from tests.support.prometheus import Scraper

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
SERVICE_HOSTS = ("jobmanager", "taskmanager", "kafka")


def compose_services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    return services


def on_host(value: str, *, kafka: str, volumes: Mapping[str, Path], ports: Mapping[str, int]) -> str:
    """A compose environment value as it reads on one host (see the module docstring)."""
    value = value.replace("kafka:9092", kafka)
    for container_port, port in ports.items():
        value = re.sub(rf"\b(jobmanager|taskmanager):{container_port}\b", rf"\1:{port}", value)
    value = re.sub(rf"\b({'|'.join(SERVICE_HOSTS)})\b(?=:\d|$)", "localhost", value)
    value = value.replace("0.0.0.0", "127.0.0.1")
    for inside, outside in volumes.items():
        value = re.sub(rf"(?<![\w/]){re.escape(inside)}\b", str(outside), value)
    return value


def flink_properties(text: str, set_ports: Mapping[str, int], **kw: Any) -> str:
    """``FLINK_PROPERTIES`` on one host: values mapped, keys kept, ``set_ports`` (key -> free port) set."""
    lines, left = [], dict(set_ports)
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            lines.append(line)
            continue
        mapped = str(left.pop(key.strip())) if key.strip() in left else on_host(value.strip(), **kw)
        lines.append(f"{key}: {mapped}")
    lines += [f"{key}: {port}" for key, port in left.items()]
    return "\n".join(lines)


@dataclass
class Service:
    name: str
    proc: subprocess.Popen[bytes]
    conf_dir: Path
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                processes.kill_group(self.proc)
        # Python workers of a TaskManager carry its configuration folder in their environment.
        processes.kill_until_gone(
            lambda: processes.pids_with_env("FLINK_CONF_DIR", str(self.conf_dir)), timeout=20
        )


@dataclass
class Host:
    work: Path
    kafka: str
    ports: dict[str, int] = field(default_factory=dict)
    services: dict[str, Service] = field(default_factory=dict)

    @property
    def volumes(self) -> dict[str, Path]:
        return {"/lakehouse": self.work / "lakehouse", "/checkpoints": self.work / "checkpoints"}

    def environment(self, service: str, ports: Mapping[str, int]) -> dict[str, str]:
        env = {str(k): str(v) for k, v in compose_services()[service].get("environment", {}).items()}
        kw = {"kafka": self.kafka, "volumes": self.volumes, "ports": {"8081": self.ports["rest"]}}
        mapped = {k: on_host(v, **kw) for k, v in env.items() if k != "FLINK_PROPERTIES"}
        if "FLINK_PROPERTIES" in env:
            mapped["FLINK_PROPERTIES"] = flink_properties(env["FLINK_PROPERTIES"], ports, **kw)
        return mapped

    def process_env(
        self, service: str, conf_dir: Path, ports: Mapping[str, int] | None = None
    ) -> dict[str, str]:
        return {
            **os.environ,
            # The image's `python` is the one with the project installed: so is this venv's.
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "FLINK_CONF_DIR": str(conf_dir),
            "FLINK_LOG_DIR": str(self.work / f"log-{service}"),
            "FLINK_PID_DIR": str(self.work / f"pid-{service}"),
            "LAKESTREAM_STATE_DIR": str(self.work / f"state-{service}"),
            **self.environment(service, ports or {}),
        }

    def start(self, service: str, ports: Mapping[str, int]) -> Service:
        conf_dir = self.work / f"conf-{service}"
        shutil.copytree(flink_home() / "conf", conf_dir)
        (self.work / f"log-{service}").mkdir()
        command = [str(c) for c in compose_services()[service]["command"]]
        log = self.work / f"{service}.out"
        proc = subprocess.Popen(
            ["bash", str(ENTRYPOINT), *command],
            cwd=ROOT,  # the image's WORKDIR holds the project, as this checkout does
            env=self.process_env(service, conf_dir, ports),
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.services[service] = Service(service, proc, conf_dir, log)
        return self.services[service]

    def rest(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['rest']}{path}", timeout=5) as resp:
            return json.loads(resp.read())


@pytest.fixture
def host(tmp_path: Path, kafka: str) -> Iterator[Host]:
    h = Host(tmp_path, kafka)
    taken: list[int] = []
    for name in ("rest", "rpc", "prom-jm", "prom-tm"):
        taken.append(processes.free_port(exclude=taken))
        h.ports[name] = taken[-1]
    try:
        yield h
    finally:
        for service in reversed(list(h.services.values())):
            service.stop()


def test_the_compose_cluster_runs_the_demo_and_serves_prometheus_metrics(host: Host) -> None:
    # The ports each container has to itself, moved to free ones on this host.
    jm_ports = {
        "rest.port": host.ports["rest"],
        "jobmanager.rpc.port": host.ports["rpc"],
        "metrics.reporter.prom.port": host.ports["prom-jm"],
    }
    jm = host.start("jobmanager", jm_ports)
    tm_ports = {"jobmanager.rpc.port": host.ports["rpc"], "metrics.reporter.prom.port": host.ports["prom-tm"]}
    tm = host.start("taskmanager", tm_ports)
    deadline = time.monotonic() + 180
    overview: dict[str, Any] = {}
    while overview.get("slots-total", 0) < 4:
        for s in (jm, tm):
            assert s.proc.poll() is None, f"{s.name} exited:\n{s.log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"cluster not up: {overview}\n{jm.log.read_text()[-3000:]}"
        try:
            overview = host.rest("/overview")
        except OSError:
            pass
        time.sleep(0.5)
    assert (
        overview["taskmanagers"] == 1
    )  # 4 slots: the compose file's numberOfTaskSlots won over the wheel's 1

    shutil.copytree(flink_home() / "conf", host.work / "conf-demo")  # the demo container's own wheel conf
    demo_env = host.process_env("demo", host.work / "conf-demo")
    assert demo_env["LAKESTREAM__FLINK__JOBMANAGER"] == f"localhost:{host.ports['rest']}"
    assert demo_env["LAKESTREAM__LAKEHOUSE__ROOT"] == str(host.work / "lakehouse")
    demo_command = [str(c) for c in compose_services()["demo"]["command"]]
    tm_metrics = Scraper(f"http://127.0.0.1:{host.ports['prom-tm']}/metrics", interval=0.5)
    jm_metrics = Scraper(f"http://127.0.0.1:{host.ports['prom-jm']}/metrics", interval=1.0)
    with tm_metrics, jm_metrics:
        demo = subprocess.run(
            ["bash", str(ENTRYPOINT), *demo_command],
            cwd=ROOT,
            env=demo_env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    (host.work / "demo.out").write_text(demo.stdout + demo.stderr)
    assert demo.returncode == 0, f"demo failed, output in {host.work / 'demo.out'}:\n{demo.stdout[-3000:]}"
    assert "Done in" in demo.stdout and "events produced" in demo.stdout  # the demo's end summary
    jobs = host.rest("/jobs/overview")["jobs"]
    assert [j["state"] for j in jobs] == ["FINISHED"]

    demo_root = host.work / "lakehouse" / "demo"
    bronze = DeltaTable(str(demo_root / "bronze" / "order_events")).to_pyarrow_dataset().count_rows()
    silver = DeltaTable(str(demo_root / "silver" / "orders")).to_pyarrow_dataset().count_rows()
    assert bronze > 0 and silver > 0
    # Checkpoints went to the shared volume (a finished job's completed ones are removed by Flink).
    assert (host.work / "checkpoints" / "demo" / jobs[0]["jid"]).is_dir()  # the demo's own folder

    # Prometheus: the JobManager's cluster view and the TaskManager's lakestream operator metrics.
    assert max(jm_metrics.values("flink_jobmanager_taskSlotsTotal")) == 4
    operator = "flink_taskmanager_job_task_operator_"
    assert max(tm_metrics.values(f"{operator}lakestream_events_valid")) > 0
    assert tm_metrics.values(f"{operator}lakestream_events_unique")  # the Java de-dup operator's counter
    committed = {
        s.labels.get("delta_table", ""): s.value
        for s in tm_metrics.samples
        if s.name == f"{operator}delta_table_rowsCommitted"
    }
    assert any(table.endswith("silver_orders") for table in committed), sorted(committed)
    assert any(table.endswith("bronze_order_events") for table in committed), sorted(committed)
