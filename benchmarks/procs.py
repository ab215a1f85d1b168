"""RSS of a process tree per kind of process, sampled in a background thread.

Kinds (``KINDS``): ``client`` (the tree's root: the Python process that built and runs the job), ``jvm``
(Flink's MiniCluster; Spark's driver in the Spark baseline), the Beam Python workers by the operator
they run (``standardise workers``, ``resolve workers``, ``other workers`` for workers not told apart
yet; ``slot workers`` when each worker runs every Python operator of its slot, the default
``flink.python_workers = "slot"``), ``other python`` and ``other`` (the workers' ``bash``/``tee``
wrappers).

With one worker per operator (``flink.python_workers = "operator"``), a worker's command line and
environment are the same for every Python operator (``pyflink.fn_execution.beam.beam_boot --id=<n>-1``),
so its operator is read from its Python stack:
``py-spy dump`` (non-blocking) until a stack shows a frame of ``udfs/ingest_standardise.py`` or
``udfs/ingest_resolve.py``, i.e. the worker was caught inside a bundle; at most once per poll per
unclassified worker, up to ``max_tries`` times. When the job's graph says how many workers of each kind
there are (``expected``, from the REST API's vertices: one worker per Python operator and subtask) and
only one kind is still short of workers, the unclassified workers are that kind. That costs CPU, so
only samplers made with ``classify_workers=True`` (the memory run) do it; elsewhere, and without
py-spy, workers stay ``other workers``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLIENT = "client"
JVM = "jvm"
STANDARDISE = "standardise workers"
RESOLVE = "resolve workers"
WORKER = "other workers"
SLOT_WORKERS = "slot workers"
PYTHON = "other python"
OTHER = "other"
KINDS = (CLIENT, JVM, SLOT_WORKERS, STANDARDISE, RESOLVE, WORKER, PYTHON, OTHER)
#: Source files whose frames tell a worker's operator (first match wins).
WORKER_FRAMES = (("ingest_standardise.py", STANDARDISE), ("ingest_resolve.py", RESOLVE))
#: How the job's Python operators are named (the start of the name): one worker each per subtask.
WORKER_OPERATORS = (("standardise", STANDARDISE), ("resolve orders", RESOLVE))
MIB = 1024 * 1024


def is_beam_worker(cmdline: list[str]) -> bool:
    """A PyFlink Python worker (process mode): ``python -m pyflink.fn_execution.beam.beam_boot ...``."""
    cmd = " ".join(cmdline)
    return "beam_boot" in cmd or "fn_execution" in cmd


def one_worker_per_operator(python_workers: str, sets: Iterable[str]) -> bool:
    """Whether a run's Python operators each get their own worker: ``flink.python_workers``, unless a
    ``--set`` of Flink's own option (``flink_runtime.PYTHON_WORKER_PER_SLOT``) says otherwise."""
    from runtime.flink_env import PYTHON_WORKER_PER_SLOT

    per_operator = python_workers == "operator"
    for entry in sets:
        key, _, value = entry.partition("=")
        if key.strip() == PYTHON_WORKER_PER_SLOT:
            per_operator = value.strip().lower() != "true"
    return per_operator


def worker_kind_from_stack(dump: str) -> str | None:
    """The worker kind a ``py-spy dump`` shows (None: no operator frame on any thread right now)."""
    for marker, kind in WORKER_FRAMES:
        if marker in dump:
            return kind
    return None


def process_kind(
    *, is_root: bool, name: str, cmdline: list[str], worker_kind: str | None, unclassified: str = WORKER
) -> str:
    """The kind of one process of the tree (``worker_kind``: what the stack told, if anything yet;
    ``unclassified``: the kind of a worker it did not tell)."""
    name = name.lower()
    if is_root:
        return CLIENT
    if "java" in name:
        return JVM
    if "python" in name:
        if is_beam_worker(cmdline):
            return worker_kind or unclassified
        return PYTHON
    return OTHER


def expected_workers(vertices: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Workers per kind a job graph runs: its Python operators (by name) times their vertex's parallelism.

    ``vertices``: the REST API's vertices (name: the chained operators joined by `` -> ``, parallelism).
    """
    out: dict[str, int] = {}
    for v in vertices.values():
        for op in str(v["name"]).split(" -> "):
            for prefix, kind in WORKER_OPERATORS:
                if op.strip().startswith(prefix):
                    out[kind] = out.get(kind, 0) + int(v["parallelism"])
    return out


def by_elimination(
    known: Mapping[int, str], unknown: Iterable[int], expected: Mapping[str, int]
) -> dict[int, str]:
    """The unknown workers' kind when only one kind is short of exactly that many workers, else nothing."""
    unknown = sorted(set(unknown) - set(known))
    if not unknown:
        return {}
    short = {k: n - sum(1 for v in known.values() if v == k) for k, n in expected.items()}
    short = {k: n for k, n in short.items() if n > 0}
    if len(short) == 1 and next(iter(short.values())) == len(unknown):
        kind = next(iter(short))
        return {pid: kind for pid in unknown}
    return {}


def group_rss(procs: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Bytes per kind from ``(kind, rss)`` pairs (kinds without a process are left out)."""
    out: dict[str, int] = {}
    for kind, rss in procs:
        out[kind] = out.get(kind, 0) + rss
    return out


class WorkerClassifier:
    """Tells Python workers apart by their stacks (``py-spy dump``), once per worker, cached by pid."""

    def __init__(self, *, max_tries: int = 120, timeout: float = 5.0) -> None:
        self.py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
        self.max_tries = max_tries
        self.timeout = timeout
        self.kinds: dict[int, str] = {}
        self.tries: dict[int, int] = {}

    def kind(self, pid: int) -> str | None:
        if pid in self.kinds:
            return self.kinds[pid]
        if self.py_spy is None or self.tries.get(pid, 0) >= self.max_tries:
            return None
        self.tries[pid] = self.tries.get(pid, 0) + 1
        try:
            dump = subprocess.run(
                [self.py_spy, "dump", "--nonblocking", "--pid", str(pid)],
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            return None
        kind = worker_kind_from_stack(dump)
        if kind is not None:
            self.kinds[pid] = kind
        return kind


def cpu_between(
    series: Sequence[tuple[float, Mapping[str, float]]], start: float, end: float
) -> dict[str, float]:
    """CPU seconds per kind spent between epoch seconds ``start`` and ``end``, from cumulative samples
    (``RssSampler.cpu_series``), each end read by linear interpolation between the samples around it
    (clamped to the first and last sample)."""

    def at(t: float) -> dict[str, float]:
        if not series:
            return {}
        if t <= series[0][0]:
            return dict(series[0][1])
        for (t0, a), (t1, b) in zip(series, series[1:], strict=False):
            if t0 <= t <= t1:
                w = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
                return {k: a.get(k, 0.0) + w * (b.get(k, 0.0) - a.get(k, 0.0)) for k in {*a, *b}}
        return dict(series[-1][1])

    first, last = at(start), at(end)
    return {k: round(last.get(k, 0.0) - first.get(k, 0.0), 3) for k in sorted({*first, *last})}


@dataclass
class RssSampler:
    """Samples ``psutil`` RSS of ``pid`` and all its descendants every ``interval`` seconds, per kind.

    Keeps the peak per kind (and of the total) and a time series of the per-kind bytes, so growth over
    a run is visible; ``t0`` (``time.monotonic()``) is where the series' time starts. With ``pss`` it
    also keeps a series of each kind's PSS (proportional set size, ``/proc/<pid>/smaps_rollup``): a
    page shared by n processes counts 1/n in each, so the PSS total is what the tree costs the machine,
    while the RSS total counts the shared libraries (pyarrow, numpy, Beam) once per Python worker.
    """

    pid: int
    interval: float = 0.5
    classify_workers: bool = False
    #: The kind of the Python workers not classified (all of them without ``classify_workers``).
    workers_kind: str = WORKER
    expected: Callable[[], Mapping[str, int]] | None = None
    t0: float | None = None
    pss: bool = False
    peak: dict[str, int] = field(default_factory=dict)
    series: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    pss_series: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    #: (epoch seconds, CPU seconds per kind so far): user + system time of every process of the tree,
    #: a process that exited counted with its last sample (``cpu_between`` reads a window of it).
    cpu_series: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    _cpu: dict[int, tuple[str, float]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _classifier: WorkerClassifier | None = None

    def start(self) -> RssSampler:
        if self.classify_workers:
            self._classifier = WorkerClassifier()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        return self.summary()

    def sample(self) -> dict[str, int]:
        return self.sample_both()[0]

    def sample_both(self) -> tuple[dict[str, int], dict[str, int]]:
        """RSS and PSS bytes per kind (PSS empty unless ``pss``)."""
        import psutil

        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return {}, {}
        seen = []
        pss: dict[int, int] = {}
        cpu: dict[int, float] = {}
        for p in procs:
            try:
                seen.append((p.pid, p.name(), p.cmdline(), p.memory_info().rss))
                times = p.cpu_times()
                cpu[p.pid] = times.user + times.system
                if self.pss:
                    pss[p.pid] = p.memory_full_info().pss
            except psutil.Error:
                continue
        workers = [
            pid
            for pid, name, cmd, _ in seen
            if pid != self.pid and "python" in name.lower() and is_beam_worker(cmd)
        ]
        if self._classifier is not None:
            for pid in workers:
                self._classifier.kind(pid)
            if self.expected is not None:
                known = {pid: k for pid, k in self._classifier.kinds.items() if pid in workers}
                self._classifier.kinds.update(by_elimination(known, workers, self.expected()))
        kinds = self._classifier.kinds if self._classifier is not None else {}
        kind_of = {
            pid: process_kind(
                is_root=pid == self.pid,
                name=name,
                cmdline=cmd,
                worker_kind=kinds.get(pid),
                unclassified=self.workers_kind,
            )
            for pid, name, cmd, _ in seen
        }
        for pid, seconds in cpu.items():
            if pid in kind_of:
                self._cpu[pid] = (kind_of[pid], seconds)
        per_kind: dict[str, float] = {}
        for kind, seconds in self._cpu.values():
            per_kind[kind] = per_kind.get(kind, 0.0) + seconds
        self.cpu_series.append((time.time(), per_kind))
        return (
            group_rss((kind_of[pid], rss) for pid, _, _, rss in seen),
            group_rss((kind_of[pid], b) for pid, b in pss.items() if pid in kind_of),
        )

    def _run(self) -> None:
        t0 = self.t0 if self.t0 is not None else time.monotonic()
        while not self._stop.is_set():
            now, pss = self.sample_both()
            t = round(time.monotonic() - t0, 1)
            if pss:
                self.pss_series.append((t, pss))
            if now:
                for k, v in now.items():
                    self.peak[k] = max(self.peak.get(k, 0), v)
                total = sum(now.values())
                self.peak["total"] = max(self.peak.get("total", 0), total)
                self.series.append((t, now))
            self._stop.wait(self.interval)

    def summary(self) -> dict[str, Any]:
        totals = [(t, sum(v.values())) for t, v in self.series]
        return {
            "peak_mib": {k: round(v / MIB, 1) for k, v in self.peak.items()},
            # total RSS at 10 evenly spaced points of the run: flat means bounded
            "total_mib_over_time": [(t, round(v / MIB, 1)) for t, v in totals[:: max(1, len(totals) // 10)]],
            "workers_classified": dict(
                sorted(self._classifier.kinds.items()) if self._classifier is not None else []
            ),
        }
