"""The sorted runs of a merge-on-read snapshot and which of them to merge (pure).

A fold appends the changes above the snapshot's fold point, reduced to one row per key and sorted by
key, as a new sorted run: the files of one run folder (``lakestream.run_folders``). Runs hold
disjoint, consecutive ranges of sequences, so ordering them
by ``top`` orders every key's rows by sequence, which is all the read rule needs; files outside a run
folder (written before runs existed, or by a copy-on-write run) are the oldest run. Merging the newest
runs as Paimon's universal compaction picks them (size ratio, run count, size amplification) keeps
the bytes a fold rewrites proportional to the changes, not to the table: ``compaction_plan``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lakestream.run_folders import run_of
from merge_on_read.key_ranges import KeyFile


@dataclass(frozen=True)
class Run:
    """The files of one sorted run, and its top sequence (``BASE_TOP``: the files outside run folders)."""

    top: int
    folder: str
    files: tuple[KeyFile, ...]

    @property
    def size(self) -> int:
        """Bytes of the run's files."""
        return sum(f.size for f in self.files)

    @property
    def rows(self) -> int:
        """Rows of the run's files."""
        return sum(f.rows for f in self.files)


def runs(files: Iterable[KeyFile]) -> list[Run]:
    """The snapshot's files grouped into runs, oldest (lowest top) first."""
    grouped: dict[tuple[int, str], list[KeyFile]] = {}
    for f in files:
        grouped.setdefault(run_of(f.path), []).append(f)
    return [
        Run(top, folder, tuple(sorted(fs, key=lambda f: f.lo)))
        for (top, folder), fs in sorted(grouped.items())
    ]


def run_rank(paths: Sequence[str]) -> list[int]:
    """A stable order of ``paths`` (snapshot file paths) that reads the runs oldest first."""
    return sorted(range(len(paths)), key=lambda i: run_of(paths[i])[0])


@dataclass(frozen=True)
class CompactionPolicy:
    """When the newest runs are merged (Paimon's universal compaction, in bytes of the runs' files).

    - ``max_size_amplification_percent``: every run is merged into one when the runs above the oldest
      hold more than this percentage of its bytes (this bounds the snapshot's size: at most
      1 + percent / 100 times the oldest run, which holds a row per key);
    - ``size_ratio_percent``: the newest runs are merged while the next older run is at most this much
      larger than the newest ones together;
    - ``max_runs``: above this many runs the newest are merged down to it whatever their sizes.
    """

    max_size_amplification_percent: int = 100
    size_ratio_percent: int = 1
    max_runs: int = 5

    def __post_init__(self) -> None:
        if self.max_size_amplification_percent < 1 or self.size_ratio_percent < 0 or self.max_runs < 1:
            raise ValueError(f"compaction policy: amplification >= 1, ratio >= 0, max_runs >= 1; got {self}")


def compaction_plan(sizes: Sequence[int], policy: CompactionPolicy, *, full: bool = False) -> int:
    """How many of the newest runs to merge into one (0 or 1: none), ``sizes`` the runs' bytes oldest
    first; ``full``: all of them (the end of a bounded run, ``lakestream maintain fold --full``)."""
    n = len(sizes)
    if n < 2:
        return 0
    if full:
        return n
    newest_first = list(reversed(sizes))
    above_oldest = sum(newest_first[:-1])
    if above_oldest * 100 > policy.max_size_amplification_percent * newest_first[-1]:
        return n
    forced = max(1, n - policy.max_runs + 1)
    count, size = forced, sum(newest_first[:forced])
    while count < n and size * (100 + policy.size_ratio_percent) >= newest_first[count] * 100:
        size += newest_first[count]
        count += 1
    return count if count > 1 else 0
