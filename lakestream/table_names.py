"""The tables the ingest job writes, by their names under ``lakehouse.root``."""

from __future__ import annotations

BRONZE_TABLE = "bronze/order_events"
QUARANTINE_TABLE = "quarantine/order_events"
REVIEW_TABLE = "review/order_events"
LATE_TABLE = "late/order_events"
SILVER_TABLE = "silver/orders"
#: The changes table of the merge-on-read silver layout (``tables.silver_layout``, DESIGN.md section 13).
SILVER_CHANGES_TABLE = "silver/orders_changes"
TABLES = (BRONZE_TABLE, QUARANTINE_TABLE, REVIEW_TABLE, LATE_TABLE, SILVER_TABLE)
