"""``python -m cli ...`` and ``flink run -py cli/__main__.py ...`` both land here."""

import sys

from cli.main import main

if __name__ == "__main__":
    sys.exit(main())
