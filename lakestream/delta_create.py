"""Opening a Delta table that several writers may be creating at the same moment: one creation commit.

delta-rs moves a commit that lost its version to a concurrent writer to the next version; for a
creation that is a second ``CREATE TABLE`` at version 1 with a table id of its own, and the table's id
changes under any reader that saw version 0 (Spark's streams refuse a table whose id changed). The
creation is therefore committed without retries: the loser's commit fails and it opens the winner's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

log = logging.getLogger(__name__)


def open_or_create(
    uri: str,
    schema: pa.Schema,
    *,
    partition_by: Sequence[str] = (),
    configuration: Mapping[str, str] | None = None,
    storage_options: Mapping[str, str] | None = None,
    log_name: str = "",
) -> DeltaTable:
    """The table at ``uri``; created with ``schema`` (and partitioning, properties) when it is missing."""
    options = dict(storage_options) if storage_options else None
    try:
        return DeltaTable(uri, storage_options=options)
    except TableNotFoundError:
        pass
    try:
        DeltaTable.create(
            uri,
            schema=schema,
            partition_by=list(partition_by) or None,
            mode="ignore",
            storage_options=options,
            configuration=dict(configuration) if configuration else None,
            commit_properties=CommitProperties(max_commit_retries=0),
        )
    except DeltaError as exc:  # another writer created it first
        log.info("%s: table creation raced (%s); opening it", log_name or uri, exc)
    return DeltaTable(uri, storage_options=options)
