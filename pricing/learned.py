"""Interruption counts that past runs saw, per spot pool, kept for the next quotes.

``$DANLU_DATA_DIR/learned_rates.json`` (default: the platform's user data dir) maps
``"cloud:region:instance_type"`` to ``{"preemptions": n, "exposed_node_hours": h}``; the
planner folds them into each pool's prior rate (:func:`pricing.risk.estimate`).  A run
adds its own counts at its end with :func:`record` (written atomically: a torn file would
lose every past run's evidence).  A store that cannot be read is ignored with a warning
rather than blocking a quote.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from danlu import atomic_file
from pricing.embedded_catalog import data_dir
from pricing.errors import PricingError

FILE_NAME = "learned_rates.json"
Key = tuple[str, str, str]


class LearnedRatesError(PricingError):
    """The learned-rates file is not what :func:`record` writes."""


def store_path(base: Path | None = None) -> Path:
    return (base or data_dir()) / FILE_NAME


def load(path: Path | None = None) -> dict[Key, tuple[int, float]]:
    """(preemptions, exposed node-hours) per (cloud, region, instance type); {} without a store."""
    path = path or store_path()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LearnedRatesError(f"{path}: not readable JSON ({exc}); delete it to start afresh") from None
    if not isinstance(raw, dict):
        raise LearnedRatesError(f"{path}: expected an object of pools; delete it to start afresh")
    out: dict[Key, tuple[int, float]] = {}
    for name, entry in raw.items():
        parts = str(name).split(":")
        n = entry.get("preemptions") if isinstance(entry, dict) else None
        h = entry.get("exposed_node_hours") if isinstance(entry, dict) else None
        valid = (isinstance(n, int) and n >= 0 and isinstance(h, (int, float)) and math.isfinite(h) and h >= 0)
        if len(parts) != 3 or not valid:
            raise LearnedRatesError(f"{path}: entry {name!r} is not cloud:region:type with preemptions >= 0 "
                                    "and exposed_node_hours >= 0; delete it to start afresh")
        out[(parts[0], parts[1], parts[2])] = (n, float(h))
    return out


def record(cloud: str, region: str, instance_type: str, *, preemptions: int, node_hours: float,
           path: Path | None = None) -> None:
    """Add a run's ``preemptions`` over ``node_hours`` of spot on that pool to the store."""
    if preemptions < 0 or not (math.isfinite(node_hours) and node_hours >= 0):
        raise LearnedRatesError(f"preemptions={preemptions} and node_hours={node_hours} must be >= 0")
    path = path or store_path()
    seen = load(path)
    n, h = seen.get((cloud, region, instance_type), (0, 0.0))
    seen[(cloud, region, instance_type)] = (n + preemptions, h + node_hours)
    body = {":".join(k): {"preemptions": v[0], "exposed_node_hours": v[1]} for k, v in sorted(seen.items())}
    atomic_file.write_text(path, json.dumps(body, indent=1))
