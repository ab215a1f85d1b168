"""Where a merge-on-read snapshot's sorted runs live: one folder per run, named after its top sequence.

A run's files are those of one folder ``run-<top>-<token>`` of the snapshot, ``top`` the highest
sequence the run holds (19 digits, so names sort by it); files outside run folders are the oldest run.
The names are the runs' only record, so any rewrite that moves rows between folders (an OPTIMIZE)
would mix runs: maintenance refuses to compact a table that ``holds_runs``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable

RUN_DIR = re.compile(r"^run-(\d{19})-([0-9a-f]{8})$")
#: ``top`` of the files outside run folders: below every run.
BASE_TOP = -1


def run_dir(top: int) -> str:
    """A new run folder's name for a run whose highest sequence is ``top``."""
    return f"run-{top:019d}-{uuid.uuid4().hex[:8]}"


def run_of(path: str) -> tuple[int, str]:
    """(top, folder) of the run a snapshot file (path as in the log) belongs to."""
    folder, _, name = path.partition("/")
    found = RUN_DIR.match(folder) if name else None
    return (int(found.group(1)), folder) if found else (BASE_TOP, "")


def holds_runs(paths: Iterable[str]) -> bool:
    """Whether a table with these file paths (as in its log) holds sorted runs."""
    return any(run_of(p)[0] != BASE_TOP for p in paths)
