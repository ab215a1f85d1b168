"""The table a sink writes into, made ready at OPEN: created if missing, checked, tuned for MERGE.

Every subtask opens (and, the first time, creates) the table, so creation races are expected: one
creation commit lands, the others open it (``lakestream.delta_create``). A table that exists with other
columns or partitioning is refused before anything is staged.
"""

from __future__ import annotations

import json
import logging

from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import CommitFailedError

from lakestream.delta_create import open_or_create
from sinks.sink_errors import TableSchemaError
from sinks.table_spec import TableSpec

log = logging.getLogger(__name__)

#: Table property delta-rs' MERGE splits its output files by (it has no per-call setting).
TARGET_FILE_SIZE_PROPERTY = "delta.targetFileSize"


def open_table(spec: TableSpec, *, log_name: str) -> DeltaTable:
    """The table of ``spec``, created if missing; raises ``TableSchemaError`` if it does not fit."""
    dt = open_or_create(
        spec.table_uri,
        spec.table_schema,
        partition_by=spec.partition_by,
        configuration=(
            None
            if spec.mode in ("append", "changes")
            else {TARGET_FILE_SIZE_PROPERTY: str(spec.target_file_size)}
        ),
        storage_options=spec.storage_options,
        log_name=log_name,
    )
    check_table(dt, spec)
    return dt


def check_table(dt: DeltaTable, spec: TableSpec) -> None:
    """Refuse a table whose columns or partition columns differ from what the sink writes."""
    want = _field_types(DeltaSchema.from_arrow(spec.table_schema).to_json())
    have = _field_types(dt.schema().to_json())
    if want != have:
        diff = sorted(set(want.items()) ^ set(have.items()))
        raise TableSchemaError(
            f"table {spec.table_uri} has columns {have} but the writer was configured with {want} "
            f"(differing: {diff}). Fix: align the writer schema with the table, or migrate the table."
        )
    parts = list(dt.metadata().partition_columns)
    if parts != list(spec.partition_by):
        raise TableSchemaError(
            f"table {spec.table_uri} is partitioned by {parts} but the writer by {list(spec.partition_by)}. "
            "Fix: configure partition_by as the table has it."
        )


def ensure_merge_file_size(dt: DeltaTable, spec: TableSpec, *, log_name: str) -> DeltaTable:
    """Give a merge/upsert table ``spec.target_file_size`` as ``delta.targetFileSize`` (subtask 0 only).

    A MERGE is copy-on-write: it rewrites every file holding a matched key, and delta-rs writes its
    output at ``delta.targetFileSize`` (100 MB when unset). Files of that size made each silver MERGE
    rewrite one big file on one core; several smaller ones are scanned and written in parallel.
    Tables created by the sink get the property at creation; an existing table whose value differs
    gets it here. It only shapes files, so a conflicting concurrent commit is logged and the next OPEN
    tries again.
    """
    want = str(spec.target_file_size)
    have = dt.metadata().configuration.get(TARGET_FILE_SIZE_PROPERTY)
    if have == want:
        return dt
    try:
        dt.alter.set_table_properties({TARGET_FILE_SIZE_PROPERTY: want})
    except CommitFailedError as exc:
        log.warning("%s: could not set %s=%s (%s)", log_name, TARGET_FILE_SIZE_PROPERTY, want, exc)
        return dt
    log.info("%s: set %s=%s (was %s)", log_name, TARGET_FILE_SIZE_PROPERTY, want, have)
    dt.update_incremental()
    return dt


def _field_types(schema_json: str) -> dict[str, str]:
    doc = json.loads(schema_json)
    return {f["name"]: json.dumps(f["type"], sort_keys=True) for f in doc["fields"]}
