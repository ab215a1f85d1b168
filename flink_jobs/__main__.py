"""``python -m flink_jobs ...`` and ``flink run -py flink_jobs/__main__.py ...`` both land here."""

import sys

from flink_jobs.cli import main

if __name__ == "__main__":
    sys.exit(main())
