"""Tune ``danlu``'s parameters on the tuning trace sets only (never the held-out ones).

Run by hand from the repository root (minutes on 2 cores)::

    nice python bench/tune_policy.py [--windows 60] [--seed 1] [--grid GRID.json] [--workers 2]

It draws ``--windows`` windows from each set that ``bench/simulate_sweep.py`` marks
``tune`` (with its own seed, 1 by default, not the report's 17), computes each window's
hindsight optimum once (cached in the system's temporary folder), and prints the mean
cost over the optimum of greedy, Uniform Progress and every ``DanluPolicy`` in the grid:
a JSON list of keyword dicts (default: the shipped parameters and one step either side
of each).  The held-out sets cannot be named here: what is reported on them in
docs/simulate.md was never used to choose a parameter.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from simulate_sweep import (  # beside this script
    ROOT,
    SETS,
    Window,
    draw_windows,
    run_window,
)

from planner.danlu_policy import DanluPolicy
from planner.simulate import JobModel, simulate, tick_grid
from pricing.traces import read_traces

TUNE = [name for name, (_, role, _) in SETS.items() if role == "tune"]


def default_grid() -> list[dict]:
    shipped = DanluPolicy()
    grid = [{}]
    for field, step in (("reserve", 4.0), ("cycle_weight", 0.5), ("exit_run", 1.0), ("line_share", 0.25)):
        value = getattr(shipped, field)
        grid += [{field: v} for v in (value - step, value + step) if v >= 0]
    return grid


def _cost(job: tuple[dict, dict]) -> tuple[float, bool]:
    params, row = job
    trace = read_traces([row["file"]])
    model = JobModel(row["job_hours"], row["deadline_hours"], row["restart_hours"], row["on_demand_price"])
    window = trace.window(row["start"], tick_grid(model, trace.tick_hours).horizon_ticks(model))
    result = simulate(window, model, DanluPolicy(**params))
    return result.cost_usd / row["optimal"], result.deadline_met


def baseline(windows: list[Window], workers: int) -> list[dict]:
    key = hashlib.sha256(json.dumps([dataclasses.asdict(w) for w in windows]).encode()).hexdigest()[:16]
    cache = Path(tempfile.gettempdir()) / f"danlu-tune-{key}.json"
    if cache.is_file():
        return json.loads(cache.read_text(encoding="utf-8"))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        rows = list(pool.map(run_window, windows, chunksize=4))
    cache.write_text(json.dumps(rows), encoding="utf-8")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=60, help="windows per tuning set (default 60)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the tuning draw (default 1)")
    parser.add_argument("--grid", type=Path, help="JSON list of DanluPolicy keyword dicts")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    shared = Path(os.environ.get("DANLU_SHARED", ROOT / ".." / "shared"))
    grid = json.loads(args.grid.read_text(encoding="utf-8")) if args.grid else default_grid()
    rows = baseline(draw_windows(shared, TUNE, args.windows, args.seed), args.workers)
    for name in ("greedy", "uniform_progress"):
        print(f"{name}: {np.mean([r[name] / r['optimal'] for r in rows]):.4f}")
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for params in grid:
            found = list(pool.map(_cost, [(params, r) for r in rows], chunksize=4))
            ratio = np.mean([f[0] for f in found])
            misses = sum(not f[1] for f in found)
            print(f"danlu {json.dumps(params)}: {ratio:.4f} ({misses} misses, {len(rows)} windows of {', '.join(TUNE)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
