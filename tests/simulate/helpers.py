"""Small builders shared by the simulate tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from planner.policy import PolicyMemory, PolicyState
from pricing.traces import MultiPoolTrace


def trace_of(*rows, gap_seconds: float = 3600.0, prices=None) -> MultiPoolTrace:
    """A multi-pool trace from rows of availability (1/True = spot usable), pools p0, p1, ..."""
    available = np.array(rows, dtype=bool).reshape(len(rows), -1)
    spot = np.full(available.shape, np.nan) if prices is None else np.array(prices, dtype=float)
    return MultiPoolTrace(tuple(f"p{i}" for i in range(len(rows))), gap_seconds, available, spot)


def write_trace(path: Path, data, gap_seconds: float = 195, prices=None) -> Path:
    """A trace file in the SkyPilot format (``data`` as stored: 1 = unavailable for 0/1 files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"metadata": {"gap_seconds": gap_seconds}, "data": list(data)}
    if prices is not None:
        body["prices"] = list(prices)
    path.write_text(json.dumps(body), encoding="utf-8")
    return path


def state(**overrides) -> PolicyState:
    """A mid-job state: 48 h job due at 52 h, d = 0.2 h, ticks of 0.05 h, idle, no spot."""
    values = {
        "elapsed_hours": 10.0,
        "work_done_hours": 10.0,
        "job_hours": 48.0,
        "deadline_hours": 52.0,
        "restart_hours": 0.2,
        "tick_hours": 0.05,
        "current": None,
        "overhead_left_hours": 0.0,
        "spot_prices": {},
        "on_demand_price": 3.06,
        "preempted": None,
        "memory": PolicyMemory(),
    }
    return PolicyState(**(values | overrides))
