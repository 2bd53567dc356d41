"""Small I/O helpers shared by the capture's parent and child: atomic sorted JSON, timestamps."""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any

from gpuadvisor._atomic import write_text_atomic


def utc_iso(unix_s: float) -> str:
    """ISO 8601 UTC timestamp (seconds precision plus microseconds) for manifest fields."""
    return _dt.datetime.fromtimestamp(unix_s, tz=_dt.timezone.utc).isoformat()


def write_json_atomic(path: Path, data: Any) -> None:
    """Write `data` as UTF-8 JSON with sorted keys: temporary file in the same folder, then rename.

    A reader never sees a half-written file; a crash leaves at most a stray `.tmp` file.
    """
    write_text_atomic(path, json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False, default=str) + "\n")


def read_json(path: Path) -> Any:
    """Read a JSON file; None when it is missing or unreadable (a killed child may leave nothing)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None
