"""Table maintenance beside the streaming jobs: compaction, vacuum, log checkpoints and cleanup,
history, restore, properties, and the scheduled maintainer (``lakestream maintain``).

``retention`` holds the pure rules (what the jobs and readers still need), ``facts`` gathers their
inputs from a table's files (local or on an object store), ``operations`` runs each operation with
those checks and conflict retries, ``auto`` decides and runs the scheduled rounds. The merge-on-read
fold is in ``merge_on_read``. Contracts: DESIGN.md section 10.
"""
