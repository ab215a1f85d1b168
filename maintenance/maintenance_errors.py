"""Typed failures of ``lakestream maintain``: each message says why and what to do."""

from __future__ import annotations

from lakestream.errors import FAILED, LakestreamError


class MaintenanceError(LakestreamError, RuntimeError):
    """A maintenance operation could not run; the message says why and what to do."""


class TableMissingError(MaintenanceError):
    """There is no Delta table where the name points."""


class RefusedError(MaintenanceError):
    """The operation would break what a streaming job or reader still needs (``--force`` may override)."""


class ConflictError(MaintenanceError):
    """The operation kept losing commit races against concurrent writers; nothing was changed."""

    exit_code = FAILED


class PredicateError(MaintenanceError, ValueError):
    """``--where`` cannot be turned into partition filters; the message says what is accepted."""
