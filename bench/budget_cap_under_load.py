"""Does the hard budget cap hold on a busy machine?  The budget test's scenario, N times, under load.

Run by hand (about a minute a run on 2 cores)::

    python bench/budget_cap_under_load.py [--runs 10] [--busy 2] [--budget-usd 0.045] [--json]

It starts ``--busy`` CPU-bound loops (``python -c "while 1: pass"``), then runs
tests/run/test_run_budget.py's job -- the digits example on one $0.16/h T4 spot node at
30x simulated time, with a budget the plan fits in but the launch does not -- through
``planner run`` in a fresh run directory each time.  Per run it prints the spend against
the cap, the run's status, the step it stopped at, the controller's CPU and wall time
and the load average; it exits 1 if any run spent more than its cap (or did not stop at
the cap with a checkpoint), 0 otherwise.  The busy loops are killed on every exit path.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.load import busy_loops
from tests.run.helpers import (  # the test's own job
    digits_entrypoint,
    write_catalog,
    write_job,
)
from tests.run.test_run_budget import BUDGET, SPEED, STEPS

TIME_SCALE = 30


def one_run(workdir: Path, budget_usd: float, steps: int) -> dict:
    catalog = write_catalog(workdir / "catalog.csv")
    job = write_job(workdir / "job.toml", entrypoint=digits_entrypoint(steps), steps=steps, speed=SPEED, nproc=1,
                    budget_usd=budget_usd)
    run_dir = workdir / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", "import sys; from planner.cli import main; sys.exit(main())",
                           "run", str(job), "--catalog", str(catalog), "--run-dir", str(run_dir),
                           "--time-scale", str(TIME_SCALE)],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=900, check=False)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    cap_events = []
    events_path = run_dir / "events.jsonl"
    if events_path.exists():
        cap_events = [e for e in map(json.loads, events_path.read_text().splitlines()) if e["event"] == "budget_cap"]
    spent = summary.get("cost_usd")
    return {
        "rc": proc.returncode,
        "status": summary.get("status"),
        "spent_usd": spent,
        "budget_usd": budget_usd,
        "over_usd": None if spent is None else max(0.0, spent - budget_usd),
        "steps": summary.get("steps"),
        "checkpoint": summary.get("final_checkpoint") is not None,
        "cap_reason": cap_events[0]["reason"] if cap_events else None,
        "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2),
        "wall_s": round(wall, 2),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "stderr_tail": proc.stderr[-400:] if proc.returncode not in (0, 1) else "",
    }


def held(run: dict) -> bool:
    return run["spent_usd"] is not None and run["over_usd"] == 0.0 and run["status"] == "budget_cap" \
        and run["checkpoint"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="how many runs (default 10)")
    parser.add_argument("--busy", type=int, default=2, help="CPU-bound loops to run alongside (default 2)")
    parser.add_argument("--budget-usd", type=float, default=BUDGET, help=f"the cap (default: the test's, ${BUDGET})")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"training steps (default: the test's, {STEPS})")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args(argv)

    runs = []
    with busy_loops(args.busy):
        if not args.json:
            print(f"{args.busy} busy loops, {args.runs} runs, cap ${args.budget_usd:.4f}, {os.cpu_count()} CPUs")
            print(f"{'run':>3} {'status':<11} {'spent':>8} {'cap':>8} {'over':>8} {'step':>5} {'cpu_s':>6} "
                  f"{'wall_s':>6}  load avg")
        for i in range(1, args.runs + 1):
            with tempfile.TemporaryDirectory(prefix="danlu-cap-") as tmp:
                run = one_run(Path(tmp), args.budget_usd, args.steps)
            runs.append(run)
            if not args.json:
                spent = f"{run['spent_usd']:.4f}" if run["spent_usd"] is not None else "-"
                over = f"{run['over_usd']:.4f}" if run["over_usd"] is not None else "-"
                print(f"{i:>3} {run['status']!s:<11} {spent:>8} {run['budget_usd']:>8.4f} {over:>8} "
                      f"{run['steps']!s:>5} {run['cpu_s']:>6} {run['wall_s']:>6}  "
                      f"{' '.join(map(str, run['load_avg']))}" + ("" if held(run) else "  <-- FAILED"), flush=True)
                if run["stderr_tail"]:
                    print("    " + run["stderr_tail"].replace("\n", "\n    "))
    failed = [i for i, run in enumerate(runs, 1) if not held(run)]
    if args.json:
        print(json.dumps({"runs": runs, "failed": failed}, indent=2))
    else:
        spent = [r["spent_usd"] for r in runs if r["spent_usd"] is not None]
        if spent:
            print(f"spent: min {min(spent):.4f}, max {max(spent):.4f} against a cap of {args.budget_usd:.4f}; "
                  f"{len(failed)} of {len(runs)} runs failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
