"""The ingest graph's Flink functions: standardise, the event-time gate and de-dup wiring, resolve, gold."""
