"""Planned data files that are gone (VACUUM): the stream fails, or skips them (``fail_on_data_loss=False``).

Skipped files are reported in the plan (and counted in the source metrics), never silently dropped
(DESIGN.md section 6).
"""

from __future__ import annotations

from sources.batch_plan import PlannedFile
from sources.source_errors import DataLossError
from storage.delta_log import DeltaLog, TableMetadata


def drop_missing_files(
    log: DeltaLog, files: list[PlannedFile], *, fail_on_data_loss: bool, meta: TableMetadata
) -> tuple[list[PlannedFile], list[str]]:
    """The files of ``files`` that still exist, and the log paths of those that do not."""
    missing = set(log.missing_files([f.action for f in files]))
    if not missing:
        return files, []
    if fail_on_data_loss:
        first = min(f.version for f in files if f.action.path in missing)
        raise DataLossError(
            version=first,
            configuration=meta.configuration,
            missing_files=sorted(p for p in missing),
        )
    return [f for f in files if f.action.path not in missing], sorted(missing)
