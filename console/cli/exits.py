"""Exit codes and JSON output shared by every command (apart from main so commands never import it)."""
from __future__ import annotations

import json
import sys

EXIT_OK, EXIT_FINDING, EXIT_USAGE, EXIT_REFUSED = 0, 1, 2, 3


def print_json(data: object) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
