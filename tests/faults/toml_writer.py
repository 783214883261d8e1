"""A TOML writer just big enough for fuzzed job files (values tomllib must read back as written)."""

from __future__ import annotations

import json
import math
from typing import Any


def value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string for everything json escapes (control characters included)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def dumps(doc: dict[str, Any]) -> str:
    """Top-level scalars first, then one ``[table]`` per dict (nested dicts inline)."""
    lines = [f"{json.dumps(k)} = {value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for key, table in doc.items():
        if isinstance(table, dict):
            lines.append(f"[{json.dumps(key)}]")
            lines += [f"{json.dumps(str(k))} = {value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"
