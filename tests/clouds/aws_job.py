"""Job files, catalogs and checks shared by the AWS tests (moto's EC2 and S3 on 127.0.0.1)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.clouds.dataplane import repo_pythonpath
from tests.run.helpers import HEADER

WORKER = Path(__file__).with_name("workers") / "train_tiny.py"
CONTRACT_WORKER = Path(__file__).with_name("workers") / "contract_only.py"
IMAGE = "ami-03cf127a"  # one of the AMIs moto ships

# Three g4dn spot pools in three zones: each preempted pool cools down, so every
# interruption moves the job to the next zone (a re-plan with a new pool).
AWS_ROWS = [
    ("aws", "us-east-1", "use1-az1", "g4dn.xlarge", 0.526, 0.16),
    ("aws", "us-east-1", "use1-az2", "g4dn.xlarge", 0.526, 0.17),
    ("aws", "us-east-1", "use1-az4", "g4dn.xlarge", 0.526, 0.18),
]


def write_catalog(path: Path, rows=AWS_ROWS) -> Path:
    lines = [HEADER] + [
        f"{cloud},{region},{zone},{itype},T4,1,16,4,16,{od},{spot},,,0.5,,2026-11-30,test catalog"
        for cloud, region, zone, itype, od, spot in rows
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_project(root: Path) -> Path:
    """The user's working directory: the training scripts."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(WORKER, root / "train.py")
    shutil.copy(CONTRACT_WORKER, root / "contract_only.py")
    return root


def write_job(path: Path, *, bucket: str, steps: int, sleep: float, options: dict[str, Any] | None = None,
              max_restarts: int = 1, max_nodes: int = 2, entrypoint: list[str] | None = None,
              extra: str = "") -> Path:
    argv = entrypoint or ["python", "train.py", "--steps", str(steps), "--sleep", str(sleep)]
    opts = {"image_id": IMAGE, "heartbeat_s": 1.0, **(options or {})}
    table = "\n".join(f"{k} = {json.dumps(v)}" for k, v in opts.items())
    path.write_text(f"""
name = "tiny-aws"

[workload]
steps = {steps}
checkpoint_gb = 0.001

[workload.throughput]
T4 = 2.0

[constraints]
deadline_hours = 2
budget_usd = 5.0
max_nodes = {max_nodes}
clouds = ["aws"]

[purchase]
allow = ["spot"]

[objective]
minimize = "time"

[overheads]
restart_minutes = 1

[run]
entrypoint = {json.dumps(argv)}
provider = "aws"
nproc_per_node = 1
max_restarts = {max_restarts}
checkpoint_dir = "s3://{bucket}/ckpt"

[run.options]
{table}
{extra}""")
    return path


def events(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line being written
    return out


def billed_from_events(found: list[dict[str, Any]]) -> float:
    up = {(e["launch"], e["node"]): e for e in found if e["event"] == "node_up"}
    down = {(e["launch"], e["node"]): e for e in found if e["event"] == "node_down"}
    assert up.keys() == down.keys(), f"every node that came up went down: up {sorted(up)}, down {sorted(down)}"
    return sum((down[k]["t"] - up[k]["t"]) * up[k]["hourly_usd"] / 3600 for k in up)


_STRAIGHT: dict[tuple[str, int, int], Path] = {}


def straight_run(tmp: Path, project: Path, *, steps: int, nproc: int = 2) -> Path:
    """The same script without danlu's controller: torchrun --standalone, a local checkpoint dir.

    The three clouds' e2e tests train the same script for the same steps: its reference run is
    made once per session (keyed by the script's bytes), not once per cloud.
    """
    key = (hashlib.sha256((project / "train.py").read_bytes()).hexdigest(), steps, nproc)
    if key in _STRAIGHT and _STRAIGHT[key].exists():
        return _STRAIGHT[key]
    _STRAIGHT[key] = _straight_run(tmp, project, steps=steps, nproc=nproc)
    return _STRAIGHT[key]


def _straight_run(tmp: Path, project: Path, *, steps: int, nproc: int) -> Path:
    ckpt, run_dir = tmp / "ckpt", tmp / "work"
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("DANLU_")}, "OMP_NUM_THREADS": "1",
           "DANLU_CHECKPOINT_DIR": str(ckpt), "DANLU_RUN_DIR": str(run_dir), "PYTHONPATH": repo_pythonpath(),
           "GLOO_SOCKET_IFNAME": "lo"}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                    "train.py", "--steps", str(steps), "--sleep", "0"], cwd=project, env=env, check=True,
                   timeout=300, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    return ckpt


def download(url: str, dest: Path) -> Path:
    import fsspec.core

    fs, path = fsspec.core.url_to_fs(url)
    fs.invalidate_cache()
    fs.get(path.rstrip("/") + "/", str(dest), recursive=True)
    return dest


def launch_instances(ec2: Any) -> Callable[[str], list[str]]:
    """The running instance ids (``region/i-...``) of a launch, for :class:`tests.clouds.dataplane.Interrupter`."""
    def victims(launch: str) -> list[str]:
        reply = ec2.describe_instances(Filters=[{"Name": "tag:danlu-launch", "Values": [launch]},
                                                {"Name": "instance-state-name", "Values": ["running"]}])
        return [f"us-east-1/{raw['InstanceId']}" for r in reply["Reservations"] for raw in r["Instances"]]
    return victims


def wait(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.1)
