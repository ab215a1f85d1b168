"""Knobs shared by all adapters: which clock a naive source timestamp means, and input size limits.

Timezone interpretation lives only here and in the adapters (never downstream), so a wrong zone is a
one-line configuration fix instead of a data-wide mystery.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from lakestream.errors import LakestreamError


class AdapterSettingsError(LakestreamError, ValueError):
    """An adapter setting is unusable; the message names the setting and how to fix it."""


@lru_cache(maxsize=64)
def zone(name: str) -> ZoneInfo:
    """Return the cached ``ZoneInfo`` so the per-record path never re-resolves a zone name."""
    return ZoneInfo(name)


def _check_zone(setting: str, name: str | None) -> None:
    if name is None:
        return
    try:
        zone(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise AdapterSettingsError(
            f"{setting}: unknown time zone {name!r}; use an IANA name such as 'Asia/Shanghai' or 'UTC'"
        ) from exc


@dataclass(frozen=True, slots=True)
class AdapterSettings:
    """How adapters interpret their sources.

    ``source_zone``: the wall clock of ``orders_db.updated_at`` (the database writes local time without an
    offset). ``logistics_naive_zone`` / ``behaviour_naive_zone``: when set, ISO timestamps without an offset
    from those sources are read in that zone; when ``None`` (default) such timestamps are rejected, because
    guessing a zone silently shifts every event by hours. Size limits keep one hostile record from costing
    more than a bounded amount of CPU and memory.
    """

    source_zone: str = "Asia/Shanghai"
    logistics_naive_zone: str | None = None
    behaviour_naive_zone: str | None = None
    max_payload_bytes: int = 1 << 20
    max_id_chars: int = 256
    max_text_chars: int = 4096

    def __post_init__(self) -> None:
        _check_zone("source_zone", self.source_zone)
        _check_zone("logistics_naive_zone", self.logistics_naive_zone)
        _check_zone("behaviour_naive_zone", self.behaviour_naive_zone)
        for name in ("max_payload_bytes", "max_id_chars", "max_text_chars"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise AdapterSettingsError(f"{name}: must be a positive integer, got {value!r}")


DEFAULT_SETTINGS = AdapterSettings()
