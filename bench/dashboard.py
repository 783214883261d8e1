"""How fast the dashboard answers, and what tracking costs the training loop.

Run by hand (a few seconds)::

    python bench/dashboard.py [--runs 50] [--repeat 7] [--json]

It writes ``--runs`` finished synthetic runs (tests/report/builders.py: the runtime's own
writers), serves them with the dashboard in this process and measures, median of
``--repeat``: the runs list (``GET /api/runs``) cold (every run read: state, events and a
private copy of the ledger) and warm (nothing changed: signatures only), one run's page
data, and the live stream's first event. Then the cost on the training thread of one
tracker record (``TrackerHub.log_metrics``: a queue put), with a backend that keeps
nothing. Wall and CPU seconds (this process: server and client together) and the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx

from runtime.dashboard.app import DashboardConfig
from runtime.dashboard.server import start_in_thread
from runtime.tracking.hub import TrackerHub
from tests.report.builders import finished_run


def timed(fn, repeat: int) -> dict[str, float]:
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return {"wall_s": round(statistics.median(walls), 4), "cpu_s": round(statistics.median(cpus), 4)}


class Null:
    name = "null"

    def open(self, *, resumed_step):
        pass

    def log_metrics(self, step, metrics):
        pass

    def close(self):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out: dict[str, object] = {"runs": args.runs, "repeat": args.repeat, "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        root.mkdir()
        for i in range(args.runs):
            finished_run(root, name=f"run-{i:03d}")
        served = start_in_thread(DashboardConfig(runs_dir=root, poll_s=0.05))
        client = httpx.Client(base_url=served.url, timeout=60)
        try:
            def cold() -> None:
                for p in root.iterdir():  # a touched state.json: every run is read again
                    if p.is_dir():
                        os.utime(p / "state.json")
                assert len(client.get("/api/runs").json()["runs"]) == args.runs

            out["runs_list_cold"] = timed(cold, args.repeat)
            out["runs_list_warm"] = timed(lambda: client.get("/api/runs"), args.repeat)
            out["run_detail"] = timed(lambda: client.get("/api/runs/run-000"), args.repeat)

            def first_event() -> None:
                with client.stream("GET", "/api/runs/run-000/stream") as answer:
                    for line in answer.iter_lines():
                        if line.startswith("data: "):
                            return

            out["stream_first_event"] = timed(first_event, args.repeat)
        finally:
            client.close()
            served.stop()
    n = 100_000
    hub = TrackerHub([Null()], max_queue=n + 1)  # the hand-over alone, nothing dropped
    w, c = time.perf_counter(), time.process_time()
    for step in range(n):
        hub.log_metrics(step, {"loss": 0.5, "danlu/spend_usd": 1.0})
    out["tracker_record_us"] = {"wall": round((time.perf_counter() - w) / n * 1e6, 2),
                                "cpu": round((time.process_time() - c) / n * 1e6, 2)}
    hub.close(60)
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
