"""What an MLflow rewind costs the controller between two launches (runtime.tracking.rewind).

Run by hand (a minute or so)::

    python bench/tracking_rewind.py [--steps 10000] [--keys 8] [--repeat 3] [--json]

For each repeat: a fresh MLflow sqlite store, one run holding ``--keys`` metrics at every one
of ``--steps`` steps (what ``every_steps = 1`` and a few user metrics log), then
:meth:`MlflowBackend.rewind` to the middle step -- the values of the first half copied into
the run that goes on, the old run nested under it. Wall and CPU seconds of the rewind alone
(this process), median of the repeats, and the load.
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
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from planner.job_tracking import Tracking  # noqa: E402
from runtime.tracking.launch import TrackingLaunch  # noqa: E402
from runtime.tracking.mlflow_backend import BATCH, MlflowBackend  # noqa: E402


def one(tmp: Path, steps: int, keys: int) -> tuple[float, float, int]:
    from mlflow.entities import Metric

    spec = Tracking(mlflow={"tracking_uri": f"sqlite:///{tmp / 'mlflow.db'}", "experiment": "bench"})
    backend = MlflowBackend(TrackingLaunch(key="bench", job="bench", run_dir=str(tmp), spec=spec), spec.mlflow)
    backend.open(resumed_step=0)
    rows = [Metric(f"m{k}", float(s), 1_700_000_000_000 + s, s) for s in range(1, steps + 1) for k in range(keys)]
    for i in range(0, len(rows), BATCH):
        backend.client.log_batch(backend.run_id, metrics=rows[i:i + BATCH])
    wall, cpu = time.perf_counter(), time.process_time()
    what = backend.rewind(steps // 2)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    backend.close()
    assert what is not None
    return wall, cpu, steps // 2 * keys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    walls, cpus = [], []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="danlu-rewind-") as tmp:
            wall, cpu, copied = one(Path(tmp), args.steps, args.keys)
        walls.append(wall)
        cpus.append(cpu)
    result = {"steps": args.steps, "keys": args.keys, "values_copied": copied, "repeat": args.repeat,
              "rewind_wall_s": round(statistics.median(walls), 3), "rewind_cpu_s": round(statistics.median(cpus), 3),
              "load_1m": round(os.getloadavg()[0], 2)}
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>16}: {value}")


if __name__ == "__main__":
    main()
