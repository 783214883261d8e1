"""Job files, a three-cloud catalog and process checks for the `planner run` tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "examples" / "train_digits.py"

# Four T4 spot pools in three clouds, cheapest first: a re-plan after each preemption
# moves to the next one (the preempted pool cools down), so each cloud's notice
# protocol is exercised in turn. Prices are per node-hour.
CATALOG_ROWS = [
    ("aws", "us-east-1", "use1-az1", "g4dn.xlarge", 0.526, 0.16),
    ("gcp", "us-central1", "us-central1-a", "n1-standard-4-t4", 0.55, 0.18),
    ("azure", "eastus", "", "Standard_NC4as_T4_v3", 0.60, 0.20),
    ("aws", "us-east-1", "use1-az2", "g4dn.xlarge", 0.526, 0.24),
]
HEADER = ("cloud,region,zone,instance_type,gpu,gpus_per_node,gpu_memory_gb,vcpus,memory_gb,on_demand,spot,"
          "reserved_1y,reserved_3y,interruption_rate,interruption_bucket,as_of,source")


def write_catalog(path: Path, rows=CATALOG_ROWS) -> Path:
    lines = [HEADER] + [
        f"{cloud},{region},{zone},{itype},T4,1,16,4,16,{od},{spot},,,0.5,,2026-11-30,test catalog"
        for cloud, region, zone, itype, od, spot in rows
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_job(
    path: Path, *, entrypoint: list[str], steps: int = 300, nproc: int | None = 2, deadline_hours: float = 1.5,
    budget_usd: float = 5.0, speed: float = 0.85, max_restarts: int = 1, restart_minutes: float = 5.0,
    allow: tuple[str, ...] = ("spot", "on_demand"), extra: str = "", max_nodes: int = 1,
) -> Path:
    path.write_text(f"""
name = "digits-test"

[workload]
steps = {steps}
checkpoint_gb = 0.001

[workload.throughput]
T4 = {speed}

[constraints]
deadline_hours = {deadline_hours}
budget_usd = {budget_usd}
max_nodes = {max_nodes}

[purchase]
allow = {json.dumps(list(allow))}

[overheads]
restart_minutes = {restart_minutes}

[run]
entrypoint = {json.dumps(entrypoint)}
provider = "local"
{"" if nproc is None else f"nproc_per_node = {nproc}"}
max_restarts = {max_restarts}
{extra}
""")
    return path


def cluster_table(max_hours: float | None = None, *, price: float = 0.05) -> str:
    """A ``[[purchase.cluster]]`` entry (append it with ``write_job(extra=...)``): one T4 pod of the
    team's cluster ``kubernetes:lab/ml:t4`` at an internal ``price`` per GPU-hour, held at most ``max_hours``."""
    cap = f"max_hours = {max_hours}" if max_hours is not None else ""
    return f"""
[[purchase.cluster]]
name = "t4"
context = "lab"
namespace = "ml"
gpu = "T4"
gpus_per_node = 1
max_gpus = 1
gpu_hour_usd = {price}
{cap}
"""


def digits_entrypoint(steps: int, *, min_step_seconds: float = 0.0) -> list[str]:
    paced = ["--min-step-seconds", f"{min_step_seconds:g}"] if min_step_seconds else []
    return [sys.executable, str(DIGITS), "--steps", str(steps), "--log-every", "100", *paced]


def processes_of(marker: str) -> list[int]:
    """Live processes whose environment mentions ``marker`` (a run directory path)."""
    found = []
    needle = marker.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def final_tensors(checkpoint_dir: Path) -> dict[str, Any]:
    """Model and optimizer tensors of the newest committed checkpoint, read with DCP.

    Incremental checkpoints keep unchanged tensors in the step directory that first
    held them (their *home*, in the manifest), so each is read from there.
    """
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader

    steps = sorted(int(p.name[5:]) for p in checkpoint_dir.glob("step-*") if (p / "manifest.json").exists())
    manifest = json.loads((checkpoint_dir / f"step-{steps[-1]}" / "manifest.json").read_text())
    homes: dict[int, list[str]] = {}
    for key, record in manifest["tensors"].items():
        if key.startswith(("model/", "optim/")):
            homes.setdefault(record["home"], []).append(key)
    tensors: dict[str, Any] = {}
    for home, keys in homes.items():
        reader = FileSystemReader(str(checkpoint_dir / f"step-{home}"))
        meta = reader.read_metadata().state_dict_metadata
        part = {k: torch.empty(meta[k].size, dtype=meta[k].properties.dtype) for k in keys}
        with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
            warnings.simplefilter("ignore", UserWarning)
            dcp.load(part, storage_reader=reader, no_dist=True)
        tensors.update(part)
    return tensors


_UNINTERRUPTED: dict[tuple[int, int], dict[str, Any]] = {}


def uninterrupted_tensors(tmp_root: Path, *, steps: int, nproc: int) -> dict[str, Any]:
    """Final model and optimizer tensors of a straight digits run, made once per session per (steps, nproc).

    Only the script, its steps and the world size decide them (not the time scale, the
    checkpoint interval or the catalog), so the tests that compare an interrupted run with
    an uninterrupted one share this reference instead of training it again.
    """
    key = (steps, nproc)
    if key not in _UNINTERRUPTED:
        from planner.cli import main

        tmp_root.mkdir(parents=True, exist_ok=True)
        job = write_job(tmp_root / "job.toml", entrypoint=digits_entrypoint(steps), steps=steps, nproc=nproc,
                        deadline_hours=24, budget_usd=50)
        catalog = write_catalog(tmp_root / "catalog.csv")
        assert main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(tmp_root / "run")]) == 0
        _UNINTERRUPTED[key] = final_tensors(tmp_root / "run" / "ckpt")
    return _UNINTERRUPTED[key]


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, process: subprocess.Popen) -> None:
    """Poll ``predicate`` until it holds; fail when ``process`` exits first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if process.poll() is not None:
            raise AssertionError(f"the process exited ({process.returncode}) before {what}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def queue_job_toml(name: str, submit: float, *, steps: int, deadline_hours: float,
                   min_step_seconds: float = 0.0) -> str:
    """A ``[[job]]`` of a queue file: a digits run of ``steps`` on one T4 node."""
    return f"""
[[job]]
name = "{name}"
submit_hours = {submit}
[job.workload]
steps = {steps}
checkpoint_gb = 0.001
[job.workload.throughput]
T4 = 0.85
[job.overheads]
restart_minutes = 0.1
[job.constraints]
deadline_hours = {deadline_hours}
budget_usd = 5
max_nodes = 1
[job.run]
entrypoint = {json.dumps(digits_entrypoint(steps, min_step_seconds=min_step_seconds))}
nproc_per_node = 1
"""
