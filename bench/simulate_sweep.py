"""Sweep the spot policies against the hindsight optimum on the 45-day p3.2xlarge traces.

Run by hand from the repository root, after ``pip install -e .`` (a few minutes on
2 cores)::

    python bench/simulate_sweep.py [--offsets 40] [--workers 2] [--traces DIR]

For each (C, D, d) setting and each of ``--offsets`` start ticks spread evenly over
the trace, it simulates the policies of ``planner simulate`` and prints markdown
tables: mean cost as a ratio to ``optimal`` (and the worst window), deadline misses,
and the saving against on-demand only.

* **Single zone**: every zone on its own (9 zones x offsets windows per setting);
  ``danlu`` sees only that zone, as the paper's policies do.
* **Several zones**: the zones of a region, and all 9, as one multi-pool trace.
  ``danlu`` and ``optimal`` use every zone; ``uniform_progress (home zone)`` is the
  paper's policy run in one zone of the set (averaged over each choice of home
  zone), ``(best zone)`` the same in the zone with the most spot over the 45 days;
  ``uniform_progress (any zone)`` is its multi-region variant from the authors'
  later artifact (spot = any available zone).

Data: ``$DANLU_SHARED`` (default ``../shared``) ``/traces/skypilot-spot-traces/
availability/1-node/aws-02-15-2023`` (SOURCE.md there: 1 = spot unavailable).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from planner.optimal import optimal_costs
from planner.policy import make_policy
from planner.simulate import JobModel, simulate, tick_grid
from pricing.traces import MultiPoolTrace, read_traces

ROOT = Path(__file__).resolve().parents[1]

SETTINGS = ((48.0, 52.0, 0.2), (48.0, 70.0, 0.2), (48.0, 70.0, 0.05), (24.0, 30.0, 0.2))
"""(C, D, d) in hours: the paper's tight and loose deadlines for a 48-hour job with a
12- and a 3-minute restart, plus a shorter job."""

ZONE_SETS = {
    "us-east-1 (a, c, d, f)": ("us-east-1a", "us-east-1c", "us-east-1d", "us-east-1f"),
    "us-east-2 (a, b)": ("us-east-2a", "us-east-2b"),
    "us-west-2 (a, b, c)": ("us-west-2a", "us-west-2b", "us-west-2c"),
    "all 9 zones": None,
}

_TRACE: MultiPoolTrace | None = None


def _init(trace: MultiPoolTrace) -> None:
    global _TRACE
    _TRACE = trace


def _starts(trace: MultiPoolTrace, model: JobModel, count: int) -> list[int]:
    grid = tick_grid(model, trace.tick_hours)
    last_start = trace.ticks - (grid.last_tick + 1)
    return sorted({int(s) for s in np.linspace(0, last_start, count)})


def _run(job: tuple[str, tuple[str, ...], tuple[float, float, float], int]) -> tuple[str, tuple, tuple, dict]:
    """One zone set and setting: {policy: list of (cost / optimal, missed, cost / on-demand)}."""
    group, pools, setting, count = job
    assert _TRACE is not None
    trace = _TRACE.select(pools)
    model = JobModel(*setting)
    grid = tick_grid(model, trace.tick_hours)
    starts = _starts(trace, model, count)
    best = optimal_costs(trace, model, starts)
    horizon = grid.horizon_ticks(model)
    on_demand = simulate(trace.window(0, horizon), model, make_policy("on_demand")).cost_usd
    if len(pools) == 1:
        policies = {name: [make_policy(name)] for name in ("greedy", "uniform_progress", "danlu")}
    else:
        best_zone = pools[int(np.argmax(trace.available.mean(axis=1)))]
        policies = {
            "uniform_progress (home zone)": [make_policy("uniform_progress", home_pool=p) for p in pools],
            f"uniform_progress (best zone, {best_zone})": [make_policy("uniform_progress", home_pool=best_zone)],
            "uniform_progress (any zone)": [make_policy("uniform_progress")],
            "danlu": [make_policy("danlu")],
        }
    rows: dict[str, list[tuple[float, bool, float]]] = defaultdict(list)
    for start, optimum in zip(starts, best, strict=True):
        window = trace.window(start, horizon)
        rows["optimal"].append((1.0, False, optimum / on_demand))
        for name, variants in policies.items():
            for policy in variants:
                result = simulate(window, model, policy)
                rows[name].append((result.cost_usd / optimum, not result.deadline_met, result.cost_usd / on_demand))
    return group, pools, setting, dict(rows)


def _table(title: str, results: dict[tuple, dict[str, list]], windows: str) -> str:
    lines = [
        f"#### {title} ({windows})",
        "",
        "| C / D / d (h) | policy | cost ÷ optimal (mean) | worst window | deadline misses | saving vs on-demand |",
        "|---|---|---:|---:|---:|---:|",
    ]
    overall: dict[str, list[float]] = defaultdict(list)
    for setting in SETTINGS:
        merged: dict[str, list] = defaultdict(list)
        for (_, s), per_policy in results.items():  # key: (pools, setting)
            if s == setting:
                for name, rows in per_policy.items():
                    merged[name].extend(rows)
        label = " / ".join(f"{v:g}" for v in setting)
        for name, rows in merged.items():
            ratio = np.array([r[0] for r in rows])
            missed = sum(r[1] for r in rows)
            saving = 1 - np.mean([r[2] for r in rows])
            overall[name].append(float(ratio.mean()))
            lines.append(
                f"| {label} | {name} | {ratio.mean():.3f} | {ratio.max():.3f} | {missed} / {len(rows)} | {saving:.1%} |"
            )
    summary = ", ".join(f"{name} {np.mean(v):.3f}" for name, v in overall.items())
    lines += ["", f"Mean cost ÷ optimal over the settings: {summary}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    shared = Path(os.environ.get("DANLU_SHARED", ROOT / ".." / "shared"))
    default = shared / "traces" / "skypilot-spot-traces" / "availability" / "1-node" / "aws-02-15-2023"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=Path, default=default, help="folder of the 9 zone traces")
    parser.add_argument("--offsets", type=int, default=40, help="start ticks per zone set and setting")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    args = parser.parse_args(argv)
    if not args.traces.is_dir():
        parser.error(f"{args.traces} is not a folder; set DANLU_SHARED or pass --traces")
    began = time.perf_counter()
    trace = read_traces([args.traces])
    jobs = [("single", (zone,), s, args.offsets) for zone in trace.pools for s in SETTINGS]
    jobs += [(name, zones or trace.pools, s, args.offsets) for name, zones in ZONE_SETS.items() for s in SETTINGS]
    with ProcessPoolExecutor(max_workers=args.workers, initializer=_init, initargs=(trace,)) as pool:
        done = list(pool.map(_run, jobs))
    single = {(p, s): r for g, p, s, r in done if g == "single"}
    print(
        f"Traces: {args.traces} ({len(trace.pools)} zones, {trace.ticks} ticks of {trace.gap_seconds:g} s); "
        f"{args.offsets} start offsets per zone set and setting; on-demand $3.06/h, spot $0.9701/h.\n"
    )
    print(_table("Single zone, each of the 9 zones", single, f"{len(trace.pools)} zones x {args.offsets} starts"))
    for name in ZONE_SETS:
        group = {(p, s): r for g, p, s, r in done if g == name}
        print(_table(f"Several zones: {name}", group, f"{args.offsets} starts"))
    print(f"_{len(jobs)} sweeps in {time.perf_counter() - began:.0f} s with {args.workers} workers._")
    return 0


if __name__ == "__main__":
    sys.exit(main())
