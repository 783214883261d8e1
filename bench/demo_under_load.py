"""The README's demo run, repeated on a busy machine: does it complete every time?

    python bench/demo_under_load.py [--runs 5] [--busy 2] [--keep DIR]

Runs ``planner run examples/digits-local.toml --time-scale 60 --chaos "at=12s" --json``
``--runs`` times from the repository root while ``--busy`` processes spin on the CPU
(two by default: both cores of the reference machine), and prints per run the status,
the spend, the simulated hours against the deadline, preemptions, re-plans, wall and
CPU time, and the load average. Exits 1 unless every run completed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.load import busy_loops, load_average

DEMO = ["examples/digits-local.toml", "--time-scale", "60", "--chaos", "at=12s", "--json"]


def one_run(run_dir: Path) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "planner.cli", "run", *DEMO, "--run-dir", str(run_dir)],
                          cwd=REPO, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    summary_file = run_dir / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
    return {"rc": proc.returncode, "status": summary.get("status", "no summary"), "cause": summary.get("cause"),
            "cost_usd": summary.get("cost_usd"), "hours": summary.get("hours"),
            "deadline_hours": summary.get("deadline_hours"), "preemptions": summary.get("preemptions"),
            "replans": summary.get("replans"), "wall_s": wall, "cpu_s": cpu, "load": load_average()[0],
            "stderr": proc.stderr[-2000:] if proc.returncode not in (0, 1) else ""}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--busy", type=int, default=2, help="spinning processes to run meanwhile (default 2)")
    ap.add_argument("--keep", metavar="DIR", help="keep the run directories under DIR")
    args = ap.parse_args()
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="danlu-demo-"))
    results = []
    with busy_loops(args.busy):
        for i in range(args.runs):
            r = one_run(base / f"run-{i + 1}")
            results.append(r)
            print(f"run {i + 1}: {r['status']:<10} ${r['cost_usd'] or 0:.3f}  {r['hours'] or 0:.3f} h of "
                  f"{r['deadline_hours']} h  preemptions {r['preemptions']}  re-plans {r['replans']}  "
                  f"wall {r['wall_s']:.1f} s  cpu {r['cpu_s']:.1f} s  load {r['load']:.2f}"
                  + (f"  cause: {r['cause']}" if r["cause"] else ""), flush=True)
            if r["stderr"]:
                print(r["stderr"], file=sys.stderr)
    done = sum(r["status"] == "completed" for r in results)
    print(f"completed {done} of {len(results)}; median wall {statistics.median(r['wall_s'] for r in results):.1f} s, "
          f"median cpu {statistics.median(r['cpu_s'] for r in results):.1f} s, busy loops {args.busy}")
    return 0 if done == len(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
