"""The demo's ingest run in a process of its own: bounded at end offsets the demo planned in advance.

``python -m demo.demo_job --end-offsets FILE`` runs it on a local MiniCluster;
``flink run -py demo/demo_job.py --end-offsets FILE`` on the cluster at ``flink.jobmanager``.
The configuration is read like every command's (``--config`` plus the ``LAKESTREAM__...`` variables the
demo sets: broker, lakehouse root, checkpoint folder and interval, its consumer group). The job reads
from the group's committed offsets, which the demo set to where its records begin, up to the planned
end offsets, which it may reach only after the demo has produced the last record: so it starts while
events are still arriving and still ends by itself with exactly the demo's records.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

JOB_NAME = "lakestream-demo-ingest"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the bounded ingest job up to the planned end offsets; exit codes as the ``lakestream`` CLI's."""
    from demo.event_feed import read_offsets
    from flink_jobs.ingest import build_ingest_job
    from lakestream.config import CONFIG_FLAG, load_config
    from lakestream.errors import exit_status
    from runtime.cluster_slots import execute_job
    from storage.object_store import export_settings

    parser = argparse.ArgumentParser(prog="demo_job", description=__doc__)
    option_strings, options = CONFIG_FLAG
    parser.add_argument(*option_strings, **options)
    parser.add_argument("--end-offsets", type=Path, required=True, help="JSON [[topic, partition, offset]]")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config)
        export_settings(cfg.storage)
        env = build_ingest_job(
            cfg,
            bootstrap_servers=cfg.kafka.bootstrap_servers,
            bounded=True,
            end_offsets=read_offsets(args.end_offsets),
        )
        execute_job(env, JOB_NAME, cfg.flink)
    except Exception as exc:
        ended = exit_status(exc, "demo")
        if ended is None:
            raise
        print(ended[1], file=sys.stderr)
        return ended[0]
    return 0


if __name__ == "__main__":
    sys.exit(main())
