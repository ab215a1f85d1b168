"""``python -m benchmarks.profile``: where the bounded ingest spends its time, re-runnable.

The README's "what bounds it" is read from this: one bounded ingest run (seeded messy events, the same
generator as ``make bench``) while ``py-spy`` samples every Python worker (idle samples included) and
``psutil`` tracks CPU seconds per process over the sustained window. Per worker it reports how the
sampled time splits into lakestream code, PyFlink/Beam runtime and waiting for the next bundle, and the
functions with the most self time. Raw py-spy stacks stay next to the summary for flame graphs
(``py-spy``'s collapsed format, e.g. for ``flamegraph.pl`` or speedscope).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakestream import paths

#: Source folders whose frames count as lakestream's own work (py-spy prints paths relative to sys.path).
OWN_DIRS = ("lakestream/", "udfs/", "sinks/", "sources/", "flink_jobs/")
#: A frame every stack has while the worker processes a bundle (Beam's SDK harness).
BUNDLE_FRAME = "process_bundle ("
#: Inside a bundle, the frame that blocks until the JVM sends the bundle's next elements.
INPUT_WAIT_FRAME = "input_elements ("


@dataclass
class WorkerProfile:
    """Samples of one Python worker: ticks (wall time), time in bundles, time in lakestream code."""

    pid: int
    ticks: int = 0
    in_bundle: int = 0
    input_wait: int = 0
    own: int = 0
    self_time: Counter[str] = field(default_factory=Counter)
    own_entry: Counter[str] = field(default_factory=Counter)

    def summary(self, top: int) -> dict[str, Any]:
        """Shares of the worker's wall time (sampling ticks), and the functions that took it."""
        n = max(1, self.ticks)

        def pct(x: int) -> float:
            return round(100 * x / n, 1)

        return {
            "pid": self.pid,
            "ticks": self.ticks,
            "in_bundle_pct": pct(self.in_bundle),
            "lakestream_code_pct": pct(self.own),
            "runtime_in_bundle_pct": pct(self.in_bundle - self.own - self.input_wait),
            "waiting_for_input_in_bundle_pct": pct(self.input_wait),
            "between_bundles_pct": pct(self.ticks - self.in_bundle),
            "waiting_for_the_jvm_pct": pct(self.ticks - self.in_bundle + self.input_wait),
            "top_self": [(f, pct(c)) for f, c in self.self_time.most_common(top)],
            "top_lakestream_frames": [(f, pct(c)) for f, c in self.own_entry.most_common(top)],
        }


def _is_own(frame: str) -> bool:
    where = frame.partition(" (")[2]
    return any(where.startswith(d) or f"/{d}" in where for d in OWN_DIRS)


def parse_collapsed(lines: Iterable[str], pid: int) -> WorkerProfile:
    """Read py-spy ``--threads --idle --format raw`` output of one worker.

    Every live thread is sampled on every tick, so the longest-lived thread's sample count is the
    number of ticks (wall time). A worker runs one bundle at a time, so stacks holding Beam's
    ``process_bundle`` frame, on whatever pool thread, are the time it spent in bundles; inside a
    bundle, stacks blocked in Beam's ``input_elements`` wait for the JVM to send more elements. The rest
    of the ticks it waited between bundles.
    """
    per_thread: Counter[str] = Counter()
    prof = WorkerProfile(pid=pid)
    for line in lines:
        line = line.rstrip("\n")
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        thread, *frames = stack.split(";")
        per_thread[thread] += count
        if not any(BUNDLE_FRAME in f for f in frames):
            continue
        prof.in_bundle += count
        prof.self_time[_short(frames[-1])] += count
        own = [f for f in frames if _is_own(f)]
        if own:
            prof.own += count
            prof.own_entry[_short(own[-1])] += count
        elif any(INPUT_WAIT_FRAME in f for f in frames):
            prof.input_wait += count
    prof.ticks = max(per_thread.values(), default=0)
    return prof


def _short(frame: str) -> str:
    """``func (path/to/file.py:12)`` -> ``func (file.py)``: stable across lines and installs."""
    name, _, where = frame.partition(" (")
    file = where.rsplit(":", 1)[0].rsplit("/", 1)[-1].rstrip(")")
    return f"{name} ({file})" if file else name


def _worker_pids(root_pid: int) -> list[int]:
    import psutil

    out = []
    for proc in psutil.Process(root_pid).children(recursive=True):
        try:
            cmd = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if "beam_boot" in cmd or "fn_execution" in cmd:
            out.append(proc.pid)
    return out


def _started_workers(proc: subprocess.Popen[bytes], settle_s: float = 3.0, limit_s: float = 120) -> list[int]:
    """The run's Python workers once their number held for ``settle_s``: one per slot or one per
    operator subtask (``flink.python_workers``), so how many is not known beforehand."""
    workers: list[int] = []
    deadline = time.monotonic() + limit_s
    since = time.monotonic()
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
        now = _worker_pids(proc.pid)
        if sorted(now) != sorted(workers):
            workers, since = now, time.monotonic()
        elif workers and time.monotonic() - since >= settle_s:
            break
    return workers


class CpuTracker:
    """CPU seconds (user + system) per kind of process of a run, kept for processes that already exited."""

    def __init__(self, root_pid: int, workers: list[int], broker_pid: int | None) -> None:
        self.root_pid, self.workers, self.broker_pid = root_pid, workers, broker_pid
        self._latest: dict[int, tuple[str, float]] = {}

    def sample(self) -> dict[str, float]:
        """Update every live process and return the totals per kind so far."""
        import psutil

        procs = []
        try:
            root = psutil.Process(self.root_pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            pass
        if self.broker_pid is not None:
            with contextlib.suppress(psutil.Error):
                procs.append(psutil.Process(self.broker_pid))
        for pr in procs:
            try:
                t = pr.cpu_times()
                if pr.pid == self.broker_pid:
                    kind = "kafka broker"
                elif "java" in pr.name():
                    kind = "flink jvm"
                else:
                    kind = "python workers" if pr.pid in self.workers else "client"
                self._latest[pr.pid] = (kind, t.user + t.system)
            except psutil.Error:
                pass
        out: dict[str, float] = {}
        for kind, cpu in self._latest.values():
            out[kind] = out.get(kind, 0.0) + cpu
        return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=500_000)
    p.add_argument("--seconds", type=float, default=10, help="py-spy sampling window once workers run")
    p.add_argument("--rate", type=int, default=50, help="py-spy samples per second")
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--out", default=str(paths.STATE_DIR / "bench" / "profile"))
    a = p.parse_args(argv)

    from benchmarks.unbounded import child_env, ingest_run_cmd
    from benchmarks.workload import prepare
    from devtools.kafka_broker import LocalKafka
    from devtools.processes import kill_group
    from lakestream.config import load_config

    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if py_spy is None:
        print("benchmarks.profile: py-spy not found; run `make bench` once (it installs the bench extra)")
        return 2
    out = Path(a.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    run_dir = out / "run"
    with LocalKafka.start(data_dir=out / "kafka", heap="1g") as broker:
        cfg = load_config(None, environ={})
        wl, _ = prepare(broker.bootstrap_servers, cfg, a.events)
        cmd = ingest_run_cmd(broker.bootstrap_servers, run_dir, group_id="profile", mode="process", sets=[])
        run_dir.mkdir(parents=True)
        with open(run_dir / "log.txt", "wb") as log:
            proc = subprocess.Popen(
                cmd, cwd=paths.PROJECT_ROOT, env=child_env(), stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
            try:
                workers = _started_workers(proc)
                time.sleep(2)  # past the workers' imports, into the data
                spies = [
                    subprocess.Popen(
                        [
                            py_spy,
                            "record",
                            "-p",
                            str(pid),
                            "-d",
                            str(int(a.seconds)),
                            "-r",
                            str(a.rate),
                            "-f",
                            "raw",
                            "--threads",
                            "--idle",
                            "--nonblocking",
                            "-o",
                            str(out / f"worker-{pid}.txt"),
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )  # fmt: skip
                    for pid in workers
                ]
                tracker = CpuTracker(proc.pid, workers, getattr(broker, "pid", None))
                first = last = (time.monotonic(), tracker.sample())
                while proc.poll() is None:
                    last = (time.monotonic(), tracker.sample())
                    time.sleep(0.5)
                for s in spies:
                    s.wait(timeout=60)
            finally:
                kill_group(proc, grace=20)
    result = json.loads((run_dir / "result.json").read_text()) if (run_dir / "result.json").is_file() else {}
    profiles = []
    for pid in workers:
        raw = out / f"worker-{pid}.txt"
        if raw.is_file():
            profiles.append(parse_collapsed(raw.read_text().splitlines(), pid).summary(a.top))
    report = {
        "events": wl.events,
        "run": {k: result.get(k) for k in ("execute_s", "exactly_once", "events_per_s") if k in result},
        # Cores busy per kind of process from the start of sampling to the end of the run: the whole
        # machine's budget is os.cpu_count().
        "window_s": round(last[0] - first[0], 1),
        "cores_by_kind": {
            k: round((v - first[1].get(k, 0.0)) / max(1e-9, last[0] - first[0]), 2)
            for k, v in last[1].items()
        },
        "workers": profiles,
    }
    (out / "profile.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
