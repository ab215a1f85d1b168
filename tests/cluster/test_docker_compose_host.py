"""docker-compose.yml's services, run on this host as the containers would run them.

There is no Docker engine here, so each service's own command (``docker/entrypoint.sh jobmanager``,
``taskmanager``, ``create-bucket``, ``demo``) runs as a process with the compose file's environment,
mapped to one host: the service names ``jobmanager`` / ``taskmanager`` and the bind-all address are
loopback, ``kafka:9092`` is the tests' real broker (the ``apache/kafka`` image cannot run here), the
object store ``s3:9000`` is the same S3Proxy release as the ``andrewgaul/s3proxy`` image, started by
``devtools.s3_server`` with the service's key pair, the volume ``/state`` is a folder of the test, and the
ports each container would have to itself (REST 8081, RPC 6123, Prometheus 9249, S3 9000) are free ports,
as Docker's port mapping would give. Each service gets its own copy of the wheel's ``conf/`` (a
container's), to which the entrypoint appends ``FLINK_PROPERTIES``, and a plugins folder like the
image's: the wheel's plugins plus Flink's S3 plugin (``FLINK_PLUGINS_DIR``).
"""

from __future__ import annotations

import http.client
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

import pyarrow.fs as pafs
import pytest
import yaml
from deltalake import DeltaTable

from cli.cmd_demo import DEFAULT_EVENTS
from devtools import processes
from devtools.s3_server import LocalS3
from lakestream import paths
from runtime.flink_env import flink_home
from tests.integration.test_demo import _check_tables as check_demo_tables
from tests.support.prometheus import Scraper

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
SERVICE_HOSTS = ("jobmanager", "taskmanager", "kafka")
#: Where the compose file's services reach the object store.
S3_ADDRESS = "s3:9000"


def compose_services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    return services


def on_host(value: str, *, kafka: str, s3: str, volumes: Mapping[str, Path], ports: Mapping[str, int]) -> str:
    """A compose environment value as it reads on one host (see the module docstring)."""
    value = value.replace("kafka:9092", kafka)
    value = re.sub(rf"\b{re.escape(S3_ADDRESS)}\b", s3, value)
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
    s3: LocalS3 | None = None

    @property
    def volumes(self) -> dict[str, Path]:
        return {"/state": self.work / "demo-state"}

    @property
    def plugins(self) -> Path:
        """The image's Flink plugins folder: the wheel's plugins and Flink's S3 plugin (docker/Dockerfile)."""
        folder = self.work / "plugins"
        if not folder.is_dir():
            folder.mkdir()
            for plugin in [*(flink_home() / "plugins").iterdir(), paths.require_s3_plugin()]:
                if plugin.is_dir():
                    (folder / plugin.name).symlink_to(plugin, target_is_directory=True)
        return folder

    def start_s3(self) -> LocalS3:
        """The ``s3`` service: S3Proxy on its filesystem store with the service's key pair, on a free port."""
        env = compose_services()["s3"]["environment"]
        assert env["S3PROXY_ENDPOINT"].endswith(":9000") and env["JCLOUDS_PROVIDER"] == "filesystem"
        self.s3 = LocalS3.start(
            data_dir=self.work / "s3",
            port=self.ports["s3"],
            access_key=env["S3PROXY_IDENTITY"],
            secret_key=env["S3PROXY_CREDENTIAL"],
        )
        return self.s3

    def environment(self, service: str, ports: Mapping[str, int]) -> dict[str, str]:
        env = {str(k): str(v) for k, v in compose_services()[service].get("environment", {}).items()}
        kw = {
            "kafka": self.kafka,
            "s3": f"127.0.0.1:{self.ports['s3']}",  # where LocalS3 listens (not ::1)
            "volumes": self.volumes,
            "ports": {"8081": self.ports["rest"]},
        }
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
            "FLINK_PLUGINS_DIR": str(self.plugins),
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
    for name in ("rest", "rpc", "prom-jm", "prom-tm", "s3"):
        taken.append(processes.free_port(exclude=taken))
        h.ports[name] = taken[-1]
    try:
        yield h
    finally:
        for service in reversed(list(h.services.values())):
            service.stop()
        if h.s3 is not None:
            h.s3.stop()


def run_once(host: Host, service: str) -> subprocess.CompletedProcess[str]:
    """A one-shot service's command to its end (its own wheel conf, as in its container)."""
    shutil.copytree(flink_home() / "conf", host.work / f"conf-{service}")
    done = subprocess.run(
        ["bash", str(ENTRYPOINT), *[str(c) for c in compose_services()[service]["command"]]],
        cwd=ROOT,
        env=host.process_env(service, host.work / f"conf-{service}"),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    (host.work / f"{service}.out").write_text(done.stdout + done.stderr)
    return done


def test_the_compose_cluster_runs_the_demo_on_the_object_store_and_serves_prometheus_metrics(
    host: Host,
) -> None:
    # The object store and its bucket first, as the demo's depends_on orders them.
    s3 = host.start_s3()
    bucket = run_once(host, "s3-bucket")
    assert bucket.returncode == 0, bucket.stdout + bucket.stderr
    assert "s3://lakestream: created" in bucket.stdout
    assert "lakestream" in [
        i.base_name for i in s3.endpoint.filesystem().get_file_info(pafs.FileSelector(""))
    ]

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
        except (OSError, http.client.HTTPException):
            # Not up yet, or another process answered on the port picked as free (seen once: an HTTP/2
            # server); a JobManager that cannot bind it exits, and the check above shows its log.
            pass
        time.sleep(0.5)
    assert (
        overview["taskmanagers"] == 1
    )  # 4 slots: the compose file's numberOfTaskSlots won over the wheel's 1

    demo_env = host.process_env("demo", host.work / "conf-demo")
    assert demo_env["LAKESTREAM__FLINK__JOBMANAGER"] == f"localhost:{host.ports['rest']}"
    assert demo_env["LAKESTREAM__STORAGE__ENDPOINT"] == s3.url
    tm_metrics = Scraper(f"http://127.0.0.1:{host.ports['prom-tm']}/metrics", interval=0.5)
    jm_metrics = Scraper(f"http://127.0.0.1:{host.ports['prom-jm']}/metrics", interval=1.0)
    with tm_metrics, jm_metrics:
        demo = run_once(host, "demo")
    out = host.work / "demo.out"
    assert demo.returncode == 0, (
        f"demo failed, output in {out}:\n{demo.stdout[-3000:]}\n{demo.stderr[-3000:]}"
    )
    assert "Done in" in demo.stdout and "events produced" in demo.stdout  # the demo's end summary
    assert "Delta tables under s3://lakestream/demo" in demo.stdout
    assert (host.work / "demo-state" / "demo" / "report.html").is_file()  # on the demo's /state volume
    jobs = host.rest("/jobs/overview")["jobs"]
    assert [j["state"] for j in jobs] == ["FINISHED"]

    # The tables are on the store, read through its S3 API with the compose file's key pair: exactly the
    # demo's sample (its default size), as `make demo`'s own test checks them.
    options = s3.storage_options()

    def read(name: str) -> list[dict[str, Any]]:
        table = DeltaTable(f"s3://lakestream/demo/{name}", storage_options=options)
        rows: list[dict[str, Any]] = table.to_pyarrow_table().to_pylist()
        return rows

    counts = check_demo_tables(read, DEFAULT_EVENTS)  # the compose service passes no --events
    assert counts["silver/orders"] > 0 and counts["late/order_events"] > 0
    # The job's checkpoints completed on the store, through Flink's S3 plugin of the JobManager and the
    # TaskManager (a finished job's are deleted by Flink, so its checkpoint statistics tell where they were).
    stats = host.rest(f"/jobs/{jobs[0]['jid']}/checkpoints")
    assert stats["counts"]["completed"] >= 1, stats["counts"]  # (triggers fail while tasks still deploy)
    where = stats["latest"]["completed"]["external_path"]
    assert where.startswith(f"s3://lakestream/checkpoints/demo/{jobs[0]['jid']}/chk-"), where
    assert not (host.work / "lakehouse").exists() and not (host.work / "checkpoints").exists()
    # The key pair's secret is in no log of the services (Beam's log of the workers' environment is off).
    secret = compose_services()["s3"]["environment"]["S3PROXY_CREDENTIAL"]
    for service in ("jobmanager", "taskmanager", "demo"):
        logs = [host.work / f"{service}.out", *(host.work / f"log-{service}").glob("*")]
        logs += [*(host.work / "demo-state" / "logs").glob("*")] if service == "demo" else []
        leaked = [log.name for log in logs if log.is_file() and secret in log.read_text(errors="replace")]
        assert not leaked, f"{service}: the secret key is in {leaked}"

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
    # Merge-on-read (the default): the job's silver commits go to the changes table.
    assert any(table.endswith("silver_orders_changes") for table in committed), sorted(committed)
    assert any(table.endswith("bronze_order_events") for table in committed), sorted(committed)
