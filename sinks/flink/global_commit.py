"""The Flink face of the global committer: committables in, one Delta commit per checkpoint and table out.

Writer subtasks in global commit mode (``DeltaSinkSpec(commit="global")``) emit a ``COMMITTABLE_TYPE``
row per prepared manifest; ``commit_globally`` routes them through a ``CheckpointEpochOperator`` at
parallelism 1 into ``GlobalCommitterFunction``, which drives one ``sinks.global_committer.GlobalCommitter``
per table on the markers (DESIGN.md section 3). A table with a fold also runs its background fold
(section 13), and a second sink at parallelism 1 (``SecondSink``, ingest's gold writer) can share the
committer's Python worker (section 11.6).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from pyflink.common import Row, Types
from pyflink.datastream import ProcessFunction, RuntimeContext

from runtime.checkpoint_markers import (
    COMMIT,
    DATA,
    END_OF_INPUT,
    OPEN,
    Marker,
    discard,
    with_checkpoint_markers,
)
from runtime.worker.bundles import skip_sampler_waits
from runtime.worker.memory import keep_freed_pages, return_free_memory
from sinks.committable import Committable
from sinks.flink.delta_sink import COMMIT_GAUGES, DeltaSinkSpec, gauge_reader

if TYPE_CHECKING:  # pragma: no cover
    from pyflink.datastream import DataStream

    from maintenance.in_job import BackgroundMaintenance, JobMaintenance
    from merge_on_read.fold_schedule import BackgroundFold
    from sinks.global_committer import GlobalCommitter
    from sinks.writer_metrics import CommitResult

#: A ``sinks.committable.Committable`` as a Flink row (same field names and order).
COMMITTABLE_TYPE = Types.ROW_NAMED(
    list(Committable._fields),
    [Types.STRING(), Types.STRING(), Types.STRING(), Types.INT(), Types.LONG(), Types.STRING()],
)


def committable_row(committable: Committable) -> Row:
    """The ``COMMITTABLE_TYPE`` row an operator yields for ``committable``."""
    return Row(*committable)


class GlobalCommitterFunction(ProcessFunction):  # type: ignore[misc]
    """Commits the committables of the writer subtasks of ``specs`` (all in global commit mode); with
    ``maintenance``, also runs the job's own maintenance rounds (``maintenance.in_job``)."""

    def __init__(self, specs: Sequence[DeltaSinkSpec], maintenance: JobMaintenance | None = None) -> None:
        by_prefix: dict[str, DeltaSinkSpec] = {}
        for spec in specs:
            if spec.commit != "global":
                raise ValueError(f"{spec.app_prefix}: the global committer takes tables with commit='global'")
            if spec.app_prefix in by_prefix:
                raise ValueError(f"{spec.app_prefix}: two tables share one app prefix")
            by_prefix[spec.app_prefix] = spec
        if not by_prefix:
            raise ValueError("the global committer needs at least one table")
        self.specs = by_prefix
        self.committers: dict[str, GlobalCommitter] = {}
        #: Merge-on-read tables: their folds beside the commits, by app prefix.
        self.folds: dict[str, BackgroundFold] = {}
        self.maintenance = maintenance
        self.maintainer: BackgroundMaintenance | None = None

    def open(self, runtime_context: RuntimeContext) -> None:
        """The commit gauges of each table (group ``delta_table.<app prefix>``); the subtasks no longer
        report those for a table in global commit mode, only their buffers."""
        skip_sampler_waits()
        for prefix in self.specs:
            group = runtime_context.get_metrics_group().add_group("delta_table", prefix)
            for gauge, attr in COMMIT_GAUGES.items():
                group.gauge(gauge, gauge_reader(self._metrics_of(prefix), attr))
            if self.specs[prefix].fold is not None:
                for gauge, read in fold_gauges(self._fold_of(prefix)).items():
                    group.gauge(gauge, read)
        if self.maintenance is not None:
            group = runtime_context.get_metrics_group().add_group("maintenance")
            group.gauge("maintenanceRounds", lambda: 0 if self.maintainer is None else self.maintainer.rounds)
            group.gauge(
                "maintenanceFailures", lambda: 0 if self.maintainer is None else self.maintainer.failures
            )
            group.gauge(
                "lastMaintenanceMs",
                lambda: 0 if self.maintainer is None else int(self.maintainer.last_round_s * 1000),
            )

    def _fold_of(self, prefix: str) -> Callable[[], BackgroundFold | None]:
        return lambda: self.folds.get(prefix)

    def _metrics_of(self, prefix: str) -> Any:
        def metrics() -> Any:
            committer = self.committers.get(prefix)
            return None if committer is None else committer.metrics

        return metrics

    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterator[str]:
        """A committable (DATA) to collect, or a marker: commit reports out."""
        marker = Marker.of(value)
        kind = marker.kind
        results: list[CommitResult] = []
        if kind == DATA:
            committable = Committable._make(marker.payload)
            committer = self.committers.get(committable.app_prefix)
            if committer is None:
                raise ValueError(
                    f"committable of {committable.app_prefix!r}, which this committer does not commit "
                    f"(it has {', '.join(self.specs)})"
                )
            committer.add(committable)
        elif kind == OPEN:
            keep_freed_pages()  # until the COMMITs' return_free_memory
            self._open(marker)
        elif kind == COMMIT:
            results = [c.commit(marker.checkpoint_id) for c in self.committers.values()]
            for prefix, result in zip(self.committers, results, strict=True):
                if prefix in self.folds:
                    self.folds[prefix].committed(result.rows if result.committed else 0)
            return_free_memory()  # a MERGE's working set is freed, but kept by the allocators
        elif kind == END_OF_INPUT:
            if self.maintainer is not None:
                self.maintainer.stop()  # the bounded run ends: no round may start after it
            results = [c.end_of_input() for c in self.committers.values()]
            for fold in self.folds.values():
                fold.finish()  # a bounded run leaves the merge-on-read snapshot complete
        for prefix, result in zip(self.committers, results, strict=False):
            if result.committed:
                yield f"{prefix}: {result}"

    def _open(self, marker: Marker) -> None:
        if marker.parallelism != 1:
            raise ValueError(
                f"the global committer runs at parallelism {marker.parallelism}: it must run at 1, or each "
                "of its subtasks would commit a part of every checkpoint"
            )
        for prefix, spec in self.specs.items():
            committer = spec.new_global_committer()
            committer.open()
            self.committers[prefix] = committer
            if spec.fold is not None:
                from merge_on_read.fold_schedule import BackgroundFold

                self.folds[prefix] = BackgroundFold(spec.fold)
        if self.maintenance is not None and self.maintainer is None:
            from maintenance.in_job import BackgroundMaintenance

            self.maintainer = BackgroundMaintenance(self.maintenance).start()

    def close(self) -> None:
        """Drop the collected committables; their manifests stay for the writers' next OPEN. A running
        maintenance operation is given a few seconds (the table lock's lease covers one cut off)."""
        if self.maintainer is not None:
            self.maintainer.stop(timeout=5.0)
        for committer in self.committers.values():
            committer.close()


def fold_gauges(fold: Callable[[], BackgroundFold | None]) -> dict[str, Callable[[], int]]:
    """The fold gauges of a merge-on-read table (group ``delta_table.<app prefix>``), 0 before a fold."""

    def of(read: Callable[[BackgroundFold], int]) -> Callable[[], int]:
        def gauge() -> int:
            current = fold()
            return 0 if current is None else read(current)

        return gauge

    return {
        "folds": of(lambda f: f.folds),
        "foldRunning": of(lambda f: int(f.running)),
        "lastFoldMs": of(lambda f: 0 if f.last is None else int(f.last.seconds * 1000)),
        "lastFoldRows": of(lambda f: 0 if f.last is None else f.last.change_rows),
        "foldedThrough": of(
            lambda f: -1 if f.last is None or f.last.folded_through is None else f.last.folded_through
        ),
    }


class SecondSink(NamedTuple):
    """A sink at parallelism 1 to run in the committer's Python worker (``runtime.worker.shared``).

    ``stream``: its marked input, at parallelism 1 (its own ``CheckpointEpochOperator`` or the like);
    ``function``: its ``ProcessFunction``; ``name``: what the shared operator's name adds.
    """

    stream: DataStream
    function: ProcessFunction
    name: str


def commit_globally(
    stream: DataStream,
    specs: Sequence[DeltaSinkSpec],
    *,
    name: str,
    uid: str,
    beside: SecondSink | None = None,
    maintenance: JobMaintenance | None = None,
) -> None:
    """Commit the ``COMMITTABLE_TYPE`` rows of ``stream`` (any parallelism) at parallelism 1.

    ``beside``: a second sink that runs in the same Python worker, as one two-input operator (one
    Python process fewer); the operator is then named ``<name> + <beside.name>``, same uid.
    ``maintenance``: the job's own maintenance rounds, run beside the commits.

    Operator uids: ``<uid>-markers`` (the marker operator), ``<uid>`` (the committer), ``<uid>-end``.
    """
    marked = with_checkpoint_markers(stream, name=f"{name} markers", uid=f"{uid}-markers", parallelism=1)
    committer = GlobalCommitterFunction(specs, maintenance)
    if beside is None:
        reports = marked.process(committer, output_type=Types.STRING()).name(name)
    else:
        from runtime.worker.shared import SharedWorker

        reports = (
            marked.connect(beside.stream)
            .process(SharedWorker(committer, beside.function), output_type=Types.STRING())
            .name(f"{name} + {beside.name}")
        )
    reports = reports.uid(uid).set_parallelism(1)
    discard(reports, name=f"{name} end", uid=f"{uid}-end", parallelism=1)
