"""Lambda batch layer: gold recomputed from bronze (backfill), compared with the speed layer (reconcile)."""
