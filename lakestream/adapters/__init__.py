"""Source adapters: raw Kafka bytes of one source in, a ``StandardEvent`` or a ``Rejected`` out.

An adapter is a pure function that never raises on bad input; the standardise operator routes
``Rejected`` to quarantine. Adapters reject what cannot be typed, ``lakestream.quality`` tags business
rules: that split, what is rejected and each source's event ids are in DESIGN.md section 5.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Protocol

from lakestream.adapters import behaviour, logistics, orders_db, payments
from lakestream.adapters.settings import DEFAULT_SETTINGS, AdapterSettings, AdapterSettingsError
from lakestream.errors import LakestreamError
from lakestream.standard import Rejected, StandardEvent

__all__ = [
    "ADAPTERS",
    "DEFAULT_SETTINGS",
    "Adapter",
    "AdapterSettings",
    "AdapterSettingsError",
    "UnknownAdapterError",
    "get_adapter",
]


class Adapter(Protocol):
    """What every adapter is: a pure function of one record's bytes and its Kafka coordinates."""

    def __call__(
        self,
        value: bytes | None,
        *,
        topic: str,
        partition: int,
        offset: int,
        settings: AdapterSettings = ...,
    ) -> StandardEvent | Rejected:
        """Adapt one record; return ``Rejected`` (never raise) for bad input."""
        ...


#: Adapters by source name (the name job configs use).
ADAPTERS: Mapping[str, Adapter] = MappingProxyType(
    {
        orders_db.SOURCE: orders_db.adapt,
        payments.SOURCE: payments.adapt,
        logistics.SOURCE: logistics.adapt,
        behaviour.SOURCE: behaviour.adapt,
    }
)


class UnknownAdapterError(LakestreamError, KeyError):
    """A configuration names a source no adapter exists for."""

    def __str__(self) -> str:
        """Show the message without ``KeyError``'s quoting."""
        return str(self.args[0])


def get_adapter(name: str) -> Adapter:
    """Look an adapter up by source name, failing with the list of known names."""
    try:
        return ADAPTERS[name]
    except KeyError:
        known = ", ".join(sorted(ADAPTERS))
        raise UnknownAdapterError(
            f"source: no adapter named {name!r}; known adapters: {known} "
            "(add a module under lakestream/adapters/ and register it in ADAPTERS)"
        ) from None
