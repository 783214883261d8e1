"""Benchmark `planner quote`: median end-to-end wall time (a fresh process, as a user runs
it) and the solve alone (in process), on the embedded catalog and on ../shared's SkyPilot
catalog.  Run by hand: ``python bench/quote.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DANLU_SHARED", REPO.parent / "shared"))
JOBS = ["examples/gpt-7b-finetune.toml", "examples/resnet50-imagenet.toml"]


def end_to_end(job: str, catalog: str | None, repeat: int) -> float:
    argv = [sys.executable, "-m", "planner.cli", "quote", job, "--json", "--no-cache"]
    if catalog:
        argv += ["--catalog", catalog]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, cwd=REPO, check=False, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def solve_only(job_path: str, catalog_path: str | None, repeat: int) -> tuple[float, float, int, int]:
    from planner.job import load_job
    from planner.milp import solve
    from planner.pools import candidate_configs
    from planner.quote import limits_for, make_quote
    from planner.workload import work_model
    from pricing.sources import resolve_catalog

    job = load_job(REPO / job_path)
    catalog = resolve_catalog(catalog_path, use_cache=False)
    work = work_model(job)
    cands = candidate_configs(job, catalog, work)
    solves, quotes = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        solve(cands.configs, work.work, limits_for(job), job.objective.minimize)
        solves.append(time.perf_counter() - start)
        start = time.perf_counter()
        make_quote(job, catalog)
        quotes.append(time.perf_counter() - start)
    return statistics.median(solves), statistics.median(quotes), cands.considered, len(cands.configs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    catalogs = [("embedded", None)]
    if (SHARED / "catalog" / "skypilot").is_dir():
        catalogs.append(("skypilot (../shared)", str(SHARED / "catalog" / "skypilot")))
    else:
        print(f"note: {SHARED / 'catalog' / 'skypilot'} absent; benchmarking the embedded catalog only")
    print("| job | catalog | configs (in MILP) | one solve | quote (solve + alternatives + frontier) | "
          "`planner quote` end to end |")
    print("|---|---|---|---|---|---|")
    for job in JOBS:
        for name, path in catalogs:
            solve_s, quote_s, considered, kept = solve_only(job, path, args.repeat)
            e2e = end_to_end(job, path, args.repeat)
            print(f"| {Path(job).stem} | {name} | {considered} ({kept}) | {solve_s * 1000:.0f} ms | "
                  f"{quote_s * 1000:.0f} ms | {e2e * 1000:.0f} ms |")


if __name__ == "__main__":
    main()
