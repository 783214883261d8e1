"""How long ``planner simulate`` takes on its largest case: a 72-hour window of a 32-second trace.

Run by hand from the repository root::

    nice python bench/simulate_speed.py [--runs 5]

It simulates every policy and the hindsight optimum (what ``planner simulate
--policy all`` does) on ``preemption/1-node/aws-04-22-2023/us-east-1c_v100_1.json``
(8,100 ticks for D = 72 h; C = 36 h is the widest slack table, C = 60 h the tightest
deadline) and prints the median CPU and wall seconds of ``--runs`` runs with the
machine's load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from planner.simulate import JobModel, simulate_policies, tick_grid
from pricing.traces import read_traces

ROOT = Path(__file__).resolve().parents[1]
TRACE = Path("traces/skypilot-spot-traces/preemption/1-node/aws-04-22-2023/us-east-1c_v100_1.json")
NAMES = ("on_demand", "greedy", "uniform_progress", "danlu", "optimal")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    shared = Path(os.environ.get("DANLU_SHARED", ROOT / ".." / "shared"))
    trace = read_traces([shared / TRACE])
    print("| C / D / d (h) | ticks | median CPU s | median wall s | load average |")
    print("|---|---:|---:|---:|---:|")
    for model in (JobModel(36.0, 72.0, 0.2), JobModel(60.0, 72.0, 0.2)):
        window = trace.window(0, tick_grid(model, trace.tick_hours).horizon_ticks(model))
        cpu, wall = [], []
        for _ in range(args.runs):
            c, w = time.process_time(), time.perf_counter()
            simulate_policies(window, model, NAMES)
            cpu.append(time.process_time() - c)
            wall.append(time.perf_counter() - w)
        ticks = tick_grid(model, trace.tick_hours).last_tick + 1
        print(f"| {model.job_hours:g} / {model.deadline_hours:g} / {model.restart_hours:g} | {ticks} | "
              f"{statistics.median(cpu):.2f} | {statistics.median(wall):.2f} | {os.getloadavg()[0]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
