"""Options of the Delta streaming source, with the names and defaults users know from Spark's Delta source.

Validated at job build time, so a contradiction fails in the client with the option names instead of
inside a Flink worker; ``from_spark_options`` accepts Spark's spellings (``maxFilesPerTrigger``,
``readChangeFeed``...) for people porting a Spark job. What each option does: DESIGN.md section 6.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from lakestream.time import parse_size, parse_time
from sources.source_errors import SourceOptionsError

SourceMode = Literal["table_changes", "cdf"]
SchemaChanges = Literal["fail", "additive"]
StartingVersion = int | Literal["latest"] | None

#: Spark's default ``maxFilesPerTrigger`` (used when neither limit is set).
DEFAULT_MAX_FILES_PER_TRIGGER = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class DeltaSourceOptions:
    """How to follow one Delta table.

    Without a starting point the stream first emits the table as of the latest version at start (the
    initial snapshot), then every later version in order, like Spark.
    """

    #: ``table_changes``: rows of files added with dataChange=true; ``cdf``: the change data feed.
    mode: SourceMode = "table_changes"
    #: First version to emit (no initial snapshot); ``"latest"`` = only versions committed after start.
    starting_version: StartingVersion = None
    #: Start at the first version committed at or after this instant (no initial snapshot).
    starting_timestamp: datetime | None = None
    #: Limit of data files per poll (``None``: 1000 unless ``max_bytes_per_trigger`` is set); only a poll's
    #: first unit, when it is a whole CDF version or an event-time group of the snapshot, can exceed it.
    max_files_per_trigger: int | None = None
    #: Soft limit of bytes per poll; the file that crosses it is still admitted (at least one per poll).
    max_bytes_per_trigger: int | None = None
    #: table_changes: skip commits that only delete whole files (no rewritten data).
    ignore_deletes: bool = False
    #: table_changes: re-emit files rewritten by UPDATE/MERGE/DELETE; unchanged rows come out again.
    ignore_changes: bool = False
    #: table_changes: skip every commit that removes data, including the files it added.
    skip_change_commits: bool = False
    #: False: skip versions / files removed by retention or VACUUM (counted) instead of failing.
    fail_on_data_loss: bool = True
    #: ``additive``: older rows get nulls for nullable columns added later; anything else still fails.
    schema_changes: SchemaChanges = "fail"
    #: Event-time column: emit the initial snapshot in this column's order (Spark's withEventTimeOrder).
    event_time_order: str | None = None
    #: Time between two polls of the log (the rate of the trigger stream).
    poll_interval: timedelta = timedelta(seconds=1)
    #: Upper bound of commits one poll looks at, so a far-behind stream still answers every poll quickly.
    max_versions_per_poll: int = 1000

    def __post_init__(self) -> None:
        if self.mode not in ("table_changes", "cdf"):
            raise SourceOptionsError(f"mode: expected 'table_changes' or 'cdf', got {self.mode!r}")
        sv = self.starting_version
        if sv is not None and sv != "latest":
            if isinstance(sv, bool) or not isinstance(sv, int) or sv < 0:
                raise SourceOptionsError(
                    f"starting_version: expected a version number >= 0 or 'latest', got {sv!r}"
                )
        if sv is not None and self.starting_timestamp is not None:
            raise SourceOptionsError(
                "starting_version and starting_timestamp are both set: choose one starting point"
            )
        if self.starting_timestamp is not None and not isinstance(self.starting_timestamp, datetime):
            raise SourceOptionsError(
                f"starting_timestamp: expected a datetime, got {self.starting_timestamp!r} "
                "(use DeltaSourceOptions.from_spark_options or lakestream.time.parse_time for strings)"
            )
        for name in ("max_files_per_trigger", "max_bytes_per_trigger"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise SourceOptionsError(f"{name}: expected a positive whole number or None, got {value!r}")
        if self.max_versions_per_poll <= 0:
            raise SourceOptionsError(
                f"max_versions_per_poll: must be positive, got {self.max_versions_per_poll}"
            )
        if self.poll_interval.total_seconds() <= 0:
            raise SourceOptionsError(f"poll_interval: must be positive, got {self.poll_interval}")
        if self.schema_changes not in ("fail", "additive"):
            raise SourceOptionsError(
                f"schema_changes: expected 'fail' or 'additive', got {self.schema_changes!r}"
            )
        if self.mode == "cdf":
            set_flags = [
                n for n in ("ignore_deletes", "ignore_changes", "skip_change_commits") if getattr(self, n)
            ]
            if set_flags:
                raise SourceOptionsError(
                    f"{', '.join(set_flags)}: only apply to mode='table_changes'; the change data feed "
                    "already carries updates and deletes as rows (remove the option or change the mode)"
                )
        if self.ignore_changes and self.skip_change_commits:
            raise SourceOptionsError(
                "ignore_changes and skip_change_commits are both set: ignore_changes re-emits rewritten "
                "files, skip_change_commits drops those commits; choose one"
            )
        if self.event_time_order is not None and not self.event_time_order:
            raise SourceOptionsError("event_time_order: expected a column name or None, got ''")

    @property
    def effective_max_files(self) -> int | None:
        """The file limit actually applied (Spark: 1000 by default, unlimited if only bytes are limited)."""
        if self.max_files_per_trigger is not None:
            return self.max_files_per_trigger
        if self.max_bytes_per_trigger is not None:
            return None
        return DEFAULT_MAX_FILES_PER_TRIGGER

    @property
    def has_snapshot(self) -> bool:
        """True when the stream starts with the initial snapshot (no explicit starting point)."""
        return self.starting_version is None and self.starting_timestamp is None

    @classmethod
    def from_spark_options(cls, options: Mapping[str, str], **overrides: object) -> DeltaSourceOptions:
        """Build from Spark-style string options (``readStream.option(...)`` names), plus overrides."""
        values: dict[str, object] = {}
        for key, raw in options.items():
            name = _SPARK_NAMES.get(key.lower())
            if name is None:
                raise SourceOptionsError(
                    f"unknown Delta source option {key!r}; known: {', '.join(sorted(_SPARK_DISPLAY))}"
                )
            values[name] = _parse_spark_value(name, key, raw)
        if values.pop("read_change_feed", False):
            values["mode"] = "cdf"
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]


_SPARK_DISPLAY = (
    "readChangeFeed",
    "startingVersion",
    "startingTimestamp",
    "maxFilesPerTrigger",
    "maxBytesPerTrigger",
    "ignoreDeletes",
    "ignoreChanges",
    "skipChangeCommits",
    "failOnDataLoss",
    "withEventTimeOrder",
)
_SPARK_NAMES = {
    "readchangefeed": "read_change_feed",
    "readchangedata": "read_change_feed",
    "startingversion": "starting_version",
    "startingtimestamp": "starting_timestamp",
    "maxfilespertrigger": "max_files_per_trigger",
    "maxbytespertrigger": "max_bytes_per_trigger",
    "ignoredeletes": "ignore_deletes",
    "ignorechanges": "ignore_changes",
    "skipchangecommits": "skip_change_commits",
    "failondataloss": "fail_on_data_loss",
    "witheventtimeorder": "event_time_order",
}


def _parse_bool(key: str, raw: str) -> bool:
    lowered = str(raw).strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise SourceOptionsError(f"{key}: expected true or false, got {raw!r}")


def _parse_spark_value(name: str, key: str, raw: str) -> object:
    if name in (
        "read_change_feed",
        "ignore_deletes",
        "ignore_changes",
        "skip_change_commits",
        "fail_on_data_loss",
    ):
        return _parse_bool(key, raw)
    if name == "starting_version":
        text = str(raw).strip().lower()
        if text == "latest":
            return "latest"
        if not text.isdigit():
            raise SourceOptionsError(f"{key}: expected a version number or 'latest', got {raw!r}")
        return int(text)
    if name == "starting_timestamp":
        # A date, or a time without offset, is UTC (like Delta).
        return parse_time(str(raw), name=key, error=SourceOptionsError)
    if name == "max_files_per_trigger":
        if not str(raw).strip().isdigit():
            raise SourceOptionsError(f"{key}: expected a positive whole number, got {raw!r}")
        return int(str(raw).strip())
    if name == "max_bytes_per_trigger":
        return parse_size(str(raw), key=key, error=SourceOptionsError)
    if name == "event_time_order":
        return str(raw)
    raise AssertionError(name)  # pragma: no cover - the table above is exhaustive
