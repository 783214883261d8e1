"""Acceptance on real windows (a small slice of bench/simulate_sweep.py): danlu meets every
deadline, costs no more than Uniform Progress on average in one zone, and clearly less
with several zones."""

from __future__ import annotations

import numpy as np
import pytest

from planner.optimal import optimal_costs
from planner.policy import make_policy
from planner.simulate import JobModel, simulate, tick_grid
from pricing.traces import read_traces

TRACES = ("traces", "skypilot-spot-traces", "availability", "1-node", "aws-02-15-2023")
SETTINGS = (JobModel(48.0, 52.0, 0.2), JobModel(24.0, 30.0, 0.2))
pytestmark = pytest.mark.shared


def _costs(trace, model, policy, starts):
    grid = tick_grid(model, trace.tick_hours)
    results = [simulate(trace.window(s, grid.horizon_ticks(model)), model, policy) for s in starts]
    assert all(r.deadline_met for r in results), policy.name
    return np.array([r.cost_usd for r in results])


def _starts(trace, model, count=6):
    last = trace.ticks - tick_grid(model, trace.tick_hours).last_tick - 1
    return [int(s) for s in np.linspace(0, last, count)]


def test_danlu_is_no_worse_than_uniform_progress_in_one_zone(shared):
    trace = read_traces([shared(*TRACES)])
    ratios = {"uniform_progress": [], "danlu": []}
    for zone in ("us-east-1c", "us-east-1d", "us-east-1f", "us-east-2b"):
        one = trace.select([zone])
        for model in SETTINGS:
            starts = _starts(one, model)
            best = optimal_costs(one, model, starts)
            for name, found in ratios.items():
                found.extend(_costs(one, model, make_policy(name), starts) / best)
    assert np.mean(ratios["danlu"]) <= np.mean(ratios["uniform_progress"])


def test_danlu_is_clearly_cheaper_with_several_zones(shared):
    trace = read_traces([shared(*TRACES)]).select(["us-east-1a", "us-east-1c", "us-east-1d", "us-east-1f"])
    for model in SETTINGS:
        starts = _starts(trace, model)
        danlu = _costs(trace, model, make_policy("danlu"), starts).mean()
        pinned = np.mean([_costs(trace, model, make_policy("uniform_progress", home_pool=z), starts).mean()
                          for z in trace.pools])
        assert danlu < 0.8 * pinned
