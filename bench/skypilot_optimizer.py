"""CPU of SkyPilot's optimizer against `planner quote` for the same request, on the same catalog.

    python bench/skypilot_optimizer.py --sky-python /path/to/venv/bin/python [--repeat N]

SkyPilot is never a dependency of danlu: install it into a separate virtual environment
(``python -m venv /tmp/skyvenv && /tmp/skyvenv/bin/pip install skypilot``) and pass that
interpreter (or set ``SKYPILOT_PYTHON``); without one the script says so and exits 0.

The request is the GPT example (``examples/gpt-7b-finetune.toml``) on the SkyPilot catalog in
``../shared/catalog/skypilot``: every GPU of that catalog with the job's 40 GB and a throughput
figure in danlu's table, 1, 2, 4 or 8 per node, spot or on-demand, at each node count up to the
job's ``max_nodes``, cheapest expected cost.  SkyPilot gets it as one ``sky.Task`` per node count
(a task has one node count) whose ``resources`` are that set, with a time estimator giving the hours
at danlu's per-GPU speed and DDP scaling, handed to ``sky.optimizer.Optimizer.optimize``.  danlu's
figure is the whole ``planner quote --json`` (plan, simplest plan, three alternatives, frontier).

Offline, SkyPilot needs two things its own catalog repository ships and ../shared lacks: one
``vms.csv`` per cloud (here the excerpts of ../shared concatenated) and ``common/accelerators.csv``
and ``common/metadata.csv`` (here derived from those rows: each GPU name with its clouds, and its
memory).  They go into a temporary ``$HOME/.sky/catalogs/v8``; the enabled clouds (which SkyPilot
otherwise finds by checking credentials) are set to AWS, GCP and Azure in the measured process.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DANLU_SHARED", REPO.parent / "shared"))
SKY_CATALOG = SHARED / "catalog" / "skypilot"
GPT = REPO / "examples" / "gpt-7b-finetune.toml"
CLOUDS = {"aws": "AWS", "gcp": "GCP", "azure": "Azure", "lambda": "Lambda"}

RUNNER = r"""
import json, sys
from sky import Dag, Resources, Task, check, clouds, optimizer
from sky.utils import common

# Offline: no credentials to find the enabled clouds with.
check.get_cached_enabled_clouds_or_refresh = lambda *a, **k: [clouds.AWS(), clouds.GCP(), clouds.Azure()]
request = json.loads(sys.argv[1])
speeds, work, eff = request["speeds"], request["work"], request["efficiency"]

def seconds(resources, nodes):
    (gpu, count), = resources.accelerators.items()
    gpus = count * nodes
    return work / (speeds[gpu] * gpus * eff ** __import__("math").log2(gpus))

best = []
for nodes in range(1, request["max_nodes"] + 1):
    task = Task(run="python train.py", num_nodes=nodes)
    task.set_resources({Resources(accelerators={gpu: count}, use_spot=spot)
                        for gpu in speeds for count in (1, 2, 4, 8) for spot in (True, False)})
    task.set_time_estimator(lambda r, nodes=nodes: seconds(r, nodes))
    dag = Dag()
    dag.add(task)
    optimizer.Optimizer.optimize(dag, minimize=common.OptimizeTarget.COST, quiet=True)
    best.append(str(task.best_resources))
print(json.dumps(best))
"""


def sky_home(root: Path) -> Path:
    """A $HOME whose ~/.sky/catalogs/v8 holds the shared SkyPilot catalog and the two files derived from it."""
    catalogs = root / ".sky" / "catalogs" / "v8"
    names: dict[str, set[str]] = defaultdict(set)
    memory: dict[str, float] = {}
    for cloud in CLOUDS:
        files = sorted((SKY_CATALOG / cloud).glob("*.csv"))
        if not files:
            continue
        (catalogs / cloud).mkdir(parents=True, exist_ok=True)
        with open(catalogs / cloud / "vms.csv", "w", newline="") as out:
            for i, file in enumerate(files):
                lines = file.read_text().splitlines(keepends=True)
                out.writelines(lines if i == 0 else lines[1:])
        with open(catalogs / cloud / "vms.csv", newline="") as fh:
            for row in csv.DictReader(fh):
                if row.get("AcceleratorName"):
                    names[row["AcceleratorName"]].add(CLOUDS[cloud])
                    mib = re.search(r"'SizeInMiB':\s*([0-9.]+)", row.get("GpuInfo") or "")
                    if mib:
                        memory.setdefault(row["AcceleratorName"], float(mib.group(1)) / 1024)
    (catalogs / "common").mkdir(parents=True, exist_ok=True)
    with open(catalogs / "common" / "accelerators.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["AcceleratorName", "Clouds"])
        writer.writerows([name, ", ".join(sorted(c))] for name, c in sorted(names.items()))
    with open(catalogs / "common" / "metadata.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["GPU", "MemoryGB", "Manufacturer"])
        writer.writerows([name, memory.get(name, 0.0), "NVIDIA"] for name in sorted(names))
    return root


def request() -> dict:
    """The GPT job as SkyPilot sees it: per-GPU speeds (tokens/s) of the catalog's GPUs that fit it."""
    sys.path.insert(0, str(REPO))
    from planner.job import load_job
    from planner.workload import work_model
    from pricing.skypilot import read_skypilot_catalog

    job = load_job(GPT)
    work = work_model(job)
    catalog = read_skypilot_catalog(SKY_CATALOG)
    speeds = {o.gpu: work.speed(o.gpu) for o in catalog
              if o.gpu_memory_gb >= work.min_gpu_memory_gb and work.speed(o.gpu)}
    return {"speeds": speeds, "work": work.work, "efficiency": work.efficiency_per_doubling,
            "max_nodes": job.constraints.max_nodes}


def cpu_of(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sky-python", default=os.environ.get("SKYPILOT_PYTHON"),
                        help="a Python interpreter that can import sky (default: $SKYPILOT_PYTHON)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not SKY_CATALOG.is_dir():
        print(f"skipped: no SkyPilot catalog at {SKY_CATALOG}")
        return 0
    probe = args.sky_python and subprocess.run([args.sky_python, "-c", "import sky"], capture_output=True)
    if not probe or probe.returncode:
        print("skipped: SkyPilot is not installed; install it into a separate venv "
              "(python -m venv /tmp/skyvenv && /tmp/skyvenv/bin/pip install skypilot) and pass "
              "--sky-python /tmp/skyvenv/bin/python")
        return 0
    spec = request()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "HOME": str(sky_home(Path(tmp))), "OMP_NUM_THREADS": "1"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        sky_argv = [args.sky_python, "-c", RUNNER, json.dumps(spec)]
        danlu_env = {**env, "PYTHONPATH": str(REPO), "DANLU_DATA_DIR": str(Path(tmp) / "danlu")}
        danlu_argv = [sys.executable, "-m", "planner.cli", "quote", str(GPT), "--json", "--no-cache",
                      "--catalog", str(SKY_CATALOG)]
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs; "
              f"median of {args.repeat} runs after one warm-up; GPUs {', '.join(sorted(spec['speeds']))}, "
              f"1-{spec['max_nodes']} nodes")
        rows = {}
        for name, argv, run_env in (("SkyPilot Optimizer.optimize", sky_argv, env),
                                    ("planner quote --json", danlu_argv, danlu_env)):
            _, warm = cpu_of(argv, run_env)
            if warm.returncode:
                print(f"{name} failed:\n{warm.stderr[-2000:]}")
                return 1
            rows[name] = statistics.median(cpu_of(argv, run_env)[0] for _ in range(args.repeat))
            if name.startswith("SkyPilot"):
                print(f"SkyPilot's choice at 1 node: {json.loads(warm.stdout.strip().splitlines()[-1])[0]}")
        print()
        print("| process | CPU s |")
        print("|---|---|")
        for name, cpu in rows.items():
            print(f"| {name} | {cpu:.2f} |")
        sky_cpu, danlu_cpu = rows.values()
        print(f"\nSkyPilot / danlu: {sky_cpu / danlu_cpu:.0f}x; "
              f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
