"""One unbounded lakestream ingest run on fresh topics, in its own process group.

Shared by the latency and the memory measurements so both start, wait for and stop the pipeline the
same way. The run is ``benchmarks.ingest_run --unbounded`` (the same job as ``lakestream ingest``, plus
the bench's outside tuning knobs); its JVM and, in process mode, the Beam Python workers are its
descendants, so one process group holds the whole pipeline and one ``killpg`` ends all of it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks.s3_variant import RunPlace, local_place
from devtools.processes import kill_group

SOURCES = ("orders_db", "payments", "logistics", "behaviour")


def source_topics(bootstrap: str, prefix: str, *, partitions: int) -> tuple[dict[str, str], dict[str, str]]:
    """Create ``<prefix><source>`` for every source; return them and the overrides that point ingest there."""
    from devtools.kafka_broker import create_topic

    topics = {s: f"{prefix}{s}" for s in SOURCES}
    for t in topics.values():
        create_topic(bootstrap, t, partitions=partitions)
    return topics, {f"LAKESTREAM__KAFKA__TOPICS__{s.upper()}": t for s, t in topics.items()}


def env_overrides(items: list[str], flag: str) -> dict[str, str]:
    """``LAKESTREAM__SECTION__KEY=VALUE`` items of a repeatable ``flag`` as a dict; ``ValueError`` naming
    the flag and the first item that is not one."""
    if bad := [kv for kv in items if not kv.startswith("LAKESTREAM__") or "=" not in kv]:
        raise ValueError(f"{flag} {bad[0]!r}: expected LAKESTREAM__SECTION__KEY=VALUE")
    return dict(kv.split("=", 1) for kv in items)


def child_env(**overrides: str) -> dict[str, str]:
    """The parent's environment minus its own lakestream overrides, plus the run's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESTREAM__")}
    env.update(overrides)
    return env


@dataclass
class UnboundedIngest:
    """A started run: its process (group leader), folder, the fresh topics it reads and where its tables
    and checkpoints are (``place``; default: in ``run_dir``)."""

    proc: subprocess.Popen[bytes]
    run_dir: Path
    topics: dict[str, str]
    place: RunPlace | None = None

    def log_tail(self, chars: int = 3000) -> str:
        return (self.run_dir / "log.txt").read_text(errors="replace")[-chars:]

    def wait_first_checkpoint(self, timeout: float = 180) -> bool:
        """True once a checkpoint completed (the sources are assigned and the job runs); False if it died."""
        deadline = time.monotonic() + timeout
        checkpoints = (self.place or local_place(self.run_dir)).checkpoints_view
        while not list(checkpoints.glob("*/chk-*/_metadata")):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.5)
        return True


def ingest_run_cmd(
    bootstrap: str,
    run_dir: Path,
    *,
    group_id: str,
    mode: str,
    sets: list[str],
    unbounded: bool = False,
    batch_rows: int | None = None,
    place: RunPlace | None = None,
) -> list[str]:
    """The ``benchmarks.ingest_run`` child command: tables, checkpoints and result file under ``run_dir``
    (tables and checkpoints where ``place`` says, if given)."""
    place = place or local_place(run_dir)
    cmd = [sys.executable, "-m", "benchmarks.ingest_run", "--bootstrap", bootstrap]
    if unbounded:
        cmd.append("--unbounded")
    cmd += [
        "--lakehouse",
        place.lakehouse,
        "--checkpoint-dir",
        place.checkpoints,
        "--group-id",
        group_id,
        "--result",
        str(run_dir / "result.json"),
    ]
    if mode == "thread":
        cmd.append("--pythonpath-fix")
    if batch_rows:
        cmd += ["--batch-rows", str(batch_rows)]
    for s in sets:
        cmd += ["--set", s]
    return cmd


@contextmanager
def unbounded_ingest(
    work: Path,
    bootstrap: str,
    *,
    label: str,
    topic_prefix: str,
    mode: str,
    env_over: dict[str, str],
    sets: list[str],
    tree: Path,
    place_for: Callable[[Path], RunPlace] = local_place,
    prepare: Callable[[RunPlace], None] | None = None,
) -> Iterator[UnboundedIngest]:
    """Fresh topics (2 partitions each), then the unbounded run in ``work/label``; stopped on exit.

    ``place_for``: where the run's tables and checkpoints go, given its folder (default: in it);
    ``prepare``: what to put there before the job starts (e.g. a seeded table)."""
    run_dir = work / label
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    place = place_for(run_dir)
    if prepare is not None:
        prepare(place)
    suffix = str(time.time_ns())
    topics, env = source_topics(bootstrap, f"{topic_prefix}{suffix}.", partitions=2)
    env.update(place.env)
    env.update(env_over)
    cmd = ingest_run_cmd(
        bootstrap,
        run_dir,
        group_id=f"bench-{label}-{suffix}",
        mode=mode,
        sets=sets,
        unbounded=True,
        place=place,
    )
    with open(run_dir / "log.txt", "wb") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=tree,
            env=child_env(LAKESTREAM__FLINK__PYTHON_EXECUTION_MODE=mode, **env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield UnboundedIngest(proc=proc, run_dir=run_dir, topics=topics, place=place)
        finally:
            kill_group(proc, grace=20)
