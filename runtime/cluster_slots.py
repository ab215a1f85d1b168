"""Before a job goes to a Flink cluster: has the cluster the task slots the job needs?

Flink queues a job whose slots it cannot get and fails it only after ``slot.request.timeout`` (5
minutes) with ``NoResourceAvailableException``; asked first, the JobManager's REST API (``/overview``)
says at once how many slots are free. The decisions are pure functions; :func:`execute_job` is the
thin wrapper every lakestream job runs through (DESIGN.md section 8).
"""

from __future__ import annotations

import http.client
import json
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runtime.flink_env import FlinkRuntimeError

if TYPE_CHECKING:  # pragma: no cover
    from pyflink.datastream import StreamExecutionEnvironment

    from lakestream.config import FlinkConfig

#: How long a cluster without any registered slot (TaskManagers still starting) is waited for.
STARTUP_WAIT_S = 60.0
#: What reading ``/overview`` raises when the REST API is not plain HTTP JSON (TLS, a proxy, a wrong port).
REST_ERRORS = (OSError, ValueError, http.client.HTTPException)
DEFAULT_SLOT_SHARING_GROUP = "default"


class InsufficientSlotsError(FlinkRuntimeError):
    """The cluster cannot give the job its slots; the message says how many and what to change."""


@dataclass(frozen=True, slots=True)
class ClusterSlots:
    """A cluster's task slots, as its REST API's ``/overview`` reports them."""

    address: str
    taskmanagers: int
    total: int
    free: int

    @classmethod
    def from_overview(cls, address: str, overview: Mapping[str, Any]) -> ClusterSlots:
        """From the JSON of ``GET /overview`` (``taskmanagers``, ``slots-total``, ``slots-available``)."""
        return cls(
            address=address,
            taskmanagers=int(overview.get("taskmanagers", 0)),
            total=int(overview.get("slots-total", 0)),
            free=int(overview.get("slots-available", 0)),
        )


def slots_needed(operators: Iterable[tuple[str | None, int]]) -> int:
    """Slots a job graph needs: per slot-sharing group its highest operator parallelism, summed.

    ``operators`` are (slot sharing group, parallelism) pairs. With slot sharing (Flink's default, and
    lakestream never sets groups) one slot holds one subtask of every operator, so a graph whose stages
    run at p, with a committer at 1, needs p slots.
    """
    highest: dict[str, int] = {}
    for group, parallelism in operators:
        key = group or DEFAULT_SLOT_SHARING_GROUP
        highest[key] = max(highest.get(key, 0), parallelism)
    return sum(highest.values())


def shortage(needed: int, parallelism: int, slots: ClusterSlots) -> str | None:
    """Why the job cannot start on ``slots`` and what to change; None when it fits."""
    if slots.free >= needed:
        return None
    head = (
        f"job needs {needed} slots (flink.parallelism = {parallelism}), the cluster at {slots.address} "
        f"has {slots.free} free of {slots.total}"
    )
    grow = "start more TaskManagers / raise taskmanager.numberOfTaskSlots"
    if slots.free > 0:
        return f"{head}; {grow}, or set LAKESTREAM__FLINK__PARALLELISM={slots.free}"
    if slots.total > 0:
        return f"{head} (all taken by running jobs); wait for them or cancel one, or {grow}"
    return f"{head}; {grow}"


def rest_address(conf: Mapping[str, str]) -> str | None:
    """``host:port`` of the cluster a job is submitted to (``execution.target = remote``), else None.

    Under ``flink run -m host:port`` Flink's client puts ``-m`` into ``rest.address`` and ``rest.port``;
    without ``-m`` they come from the cluster's ``config.yaml``. A local MiniCluster (``local``) makes
    as many slots as the job needs; other targets (YARN, Kubernetes) start TaskManagers on demand.
    """
    if conf.get("execution.target") != "remote":
        return None
    host = conf.get("rest.address") or conf.get("jobmanager.rpc.address") or "localhost"
    return f"{host}:{conf.get('rest.port') or 8081}"


def read_slots(address: str, *, timeout: float = 5.0) -> ClusterSlots:
    """``GET http://<address>/overview`` of the JobManager's REST API."""
    with urllib.request.urlopen(f"http://{address}/overview", timeout=timeout) as resp:
        return ClusterSlots.from_overview(address, json.loads(resp.read()))


def require_slots(
    address: str,
    needed: int,
    parallelism: int,
    *,
    read: Callable[[str], ClusterSlots] = read_slots,
    wait_s: float = STARTUP_WAIT_S,
    poll_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ClusterSlots:
    """The cluster's slots if ``needed`` are free; else :class:`InsufficientSlotsError` at once.

    Only a cluster that is still starting is waited for, up to ``wait_s``: its REST API refusing
    connections, or no slot registered yet (as right after a ``docker compose up``). Other errors of
    the REST call are raised as they are (:data:`REST_ERRORS`).
    """
    deadline = clock() + wait_s
    while True:
        try:
            slots: ClusterSlots | None = read(address)
        except OSError as exc:  # URLError included
            if not _refused(exc) or clock() >= deadline:
                raise
            slots = None
        if slots is not None and (slots.total > 0 or clock() >= deadline):
            break
        sleep(poll_s)
    reason = shortage(needed, parallelism, slots)
    if reason is not None:
        if slots.total == 0:
            reason += f" (no TaskManager slot registered within {wait_s:.0f} s)"
        raise InsufficientSlotsError(reason)
    return slots


def _refused(exc: BaseException) -> bool:
    reason = getattr(exc, "reason", exc)
    return isinstance(exc, ConnectionRefusedError) or isinstance(reason, ConnectionRefusedError)


def graph_slots(env: StreamExecutionEnvironment) -> int:
    """Slots the job graph built on ``env`` needs (its transformations are kept for ``execute``)."""
    graph = env._generate_stream_graph(clear_transformations=False)
    nodes = graph.getStreamNodes().iterator()
    operators: list[tuple[str | None, int]] = []
    while nodes.hasNext():
        node = nodes.next()
        operators.append((node.getSlotSharingGroup(), int(node.getParallelism())))
    return slots_needed(operators)


def check_cluster_slots(env: StreamExecutionEnvironment, parallelism: int) -> ClusterSlots | None:
    """Under ``flink run`` to a standalone or session cluster: fail fast unless the job's slots are free.

    A cluster whose REST API cannot be read here (TLS, a proxy) is left to Flink's own submission, with
    a warning on stderr.
    """
    conf = env._j_stream_execution_environment.getConfiguration().toMap()
    address = rest_address({str(k): str(v) for k, v in dict(conf).items()})
    if address is None:
        return None
    needed = graph_slots(env)
    try:
        return require_slots(address, needed, parallelism)
    except REST_ERRORS as exc:
        print(
            f"lakestream: could not read the free slots of the cluster at {address} ({exc}); "
            "submitting anyway",
            file=sys.stderr,
        )
        return None


def execute_job(env: StreamExecutionEnvironment, job_name: str, flink: FlinkConfig) -> Any:
    """``env.execute(job_name)``, after :func:`check_cluster_slots` when it goes to a cluster."""
    check_cluster_slots(env, flink.parallelism)
    return env.execute(job_name)
