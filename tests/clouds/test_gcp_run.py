"""`planner run` with provider "gcp" end to end: the real SDKs against a local GCE API and GCS emulator.

google-cloud-compute (REST) talks to tests/clouds/gce_server.py; gcsfs to the
gcp-storage-emulator package (both on 127.0.0.1). The data plane fixture boots every VM the
fake API reports RUNNING by executing its ``startup-script`` metadata -- the real
bootstrap, node agent and torchrun agents (gloo, 2 nodes x 1 process) that train,
checkpoint to the emulator and resume. Two spot preemptions are injected the way GCE does
them: ``instance/preempted`` turns TRUE on the node's metadata server, then, after a short
lead, the API preempts the VM (TERMINATED, then gone: termination action DELETE). The
reference is the same script run straight under torchrun with the same world size: the
final parameters must be bitwise equal.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from planner.cli import main
from runtime.accounting.ledger import Ledger
from runtime.control.run_state import load_state
from runtime.providers.gcp import label_value
from tests.clouds.aws_job import (
    billed_from_events,
    download,
    events,
    straight_run,
    write_catalog,
    write_project,
)
from tests.clouds.dataplane import DataPlane, Interrupter, Running
from tests.clouds.gce_server import FakeGce
from tests.clouds.gcs import BUCKET, gcs, gcs_emulator  # noqa: F401 (fixtures)
from tests.run.helpers import final_tensors

pytestmark = pytest.mark.ddp

# Long enough that the second notice lands while the second launch still trains: on a loaded
# machine the stop takes ~7 s (two heartbeats through the object store) from notice to checkpoint,
# and with 60 steps the resumed launch finished first (one preemption instead of two).
STEPS = 120
SLEEP = 0.15
# Three N1+T4 spot pools in three zones: each preempted pool cools down, so every
# interruption moves the job to the next zone (a re-plan with a new pool).
GCP_ROWS = [
    ("gcp", "us-central1", "us-central1-a", "n1-standard-4+T4:1", 0.54, 0.16),
    ("gcp", "us-central1", "us-central1-b", "n1-standard-4+T4:1", 0.54, 0.17),
    ("gcp", "us-central1", "us-central1-c", "n1-standard-4+T4:1", 0.54, 0.18),
]


@pytest.fixture
def gce() -> Iterator[FakeGce]:
    server = FakeGce().start()
    yield server
    server.stop()


def gce_running(gce: FakeGce):
    """The data plane's view: RUNNING VMs labelled danlu-run, with their startup-script."""
    def running() -> list[Running]:
        return [Running(vm["id"], vm["name"], vm["startup_script"]) for vm in gce.running()
                if "danlu-run" in vm["labels"]]
    return running


@pytest.fixture
def gcp_plane(gce: FakeGce, gcs, tmp_path: Path) -> Iterator[DataPlane]:  # noqa: F811
    plane = DataPlane(list_running=gce_running(gce), terminate=gce.preempt, sandbox=tmp_path / "nodes", env=gcs.env)
    with plane:
        yield plane
    assert not plane.node_processes(), "a node process outlived its VM"


def write_job(path: Path, *, gce: FakeGce, steps: int, sleep: float) -> Path:
    options = {"project": gce.project, "api_endpoint": gce.url, "anonymous": True, "heartbeat_s": 0.5,
               "image": "projects/debian-cloud/global/images/family/debian-12"}
    table = "\n".join(f"{k} = {json.dumps(v)}" for k, v in options.items())
    path.write_text(f"""
name = "tiny-gcp"

[workload]
steps = {steps}
checkpoint_gb = 0.001

[workload.throughput]
T4 = 2.0

[constraints]
deadline_hours = 2
budget_usd = 5.0
max_nodes = 2
clouds = ["gcp"]

[purchase]
allow = ["spot"]

[objective]
minimize = "time"

[overheads]
restart_minutes = 1

[run]
entrypoint = ["python", "train.py", "--steps", "{steps}", "--sleep", "{sleep}"]
provider = "gcp"
nproc_per_node = 1
max_restarts = 1
checkpoint_dir = "gs://{BUCKET}/ckpt"

[run.options]
{table}
""")
    return path


def _ls(fs: Any, path: str) -> list[str]:
    fs.invalidate_cache()
    return [p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(path, detail=False)]


def test_two_preemptions_complete_with_gcs_checkpoints_and_every_vm_billed(
    gce: FakeGce, gcs, gcp_plane: DataPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
) -> None:
    project = write_project(tmp_path / "project")
    catalog = write_catalog(tmp_path / "catalog.csv", rows=GCP_ROWS)
    job = write_job(tmp_path / "job.toml", gce=gce, steps=STEPS, sleep=SLEEP)
    run_dir = tmp_path / "run"
    monkeypatch.chdir(project)
    labels: list[dict[str, str]] = []

    def victims(launch: str) -> list[str]:
        vms = [vm for vm in gce.running() if vm["labels"].get("danlu-launch") == label_value(launch)]
        labels.extend(vm["labels"] for vm in vms)
        return [vm["id"] for vm in vms]

    with Interrupter(gcp_plane, run_dir, victims, count=2, lead_s=6.0) as chaos:
        rc = main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(run_dir), "--provider", "gcp",
                   "--cooldown", "240"])
    summary = json.loads((run_dir / "summary.json").read_text())
    found = events(run_dir)
    assert rc == 0, (summary, [e for e in found if e["event"] in ("failure", "launch_end", "run_end")])
    assert not chaos.errors and len(chaos.done) == 2
    assert summary["status"] == "completed" and summary["steps"] == STEPS
    assert summary["preemptions"] == 2 and summary["world_sizes"] == [2, 2, 2]

    # The notices came from the nodes' GCE metadata servers (instance/preempted), via heartbeats.
    notices = [e for e in found if e["event"] == "notice" and e["kind"] == "interruption"]
    assert [n["cloud"] for n in notices] == ["gcp", "gcp"]
    assert [e["outcome"] for e in found if e["event"] == "launch_end"] == ["preempted", "preempted", "completed"]
    assert len({launch["pool_id"] for launch in summary["launches"]}) == 3

    # What danlu asked GCE for: spot N1 VMs with their T4, labelled, the bootstrap as startup-script.
    assert len(gce.ever) == 6
    assert [i.rsplit("/", 1)[0] for i in gce.ever] == ["us-central1-a"] * 2 + ["us-central1-b"] * 2 + \
        ["us-central1-c"] * 2

    # Each VM carries the run's id and its runs directory's home (what a resume and `planner gc` go by).
    state = load_state(run_dir)
    home = (tmp_path / ".danlu-home").read_text().strip()
    assert state.home == home and state.run_id == f"run-{home[:6]}"
    assert labels and all((vm["danlu-run"], vm["danlu-home"]) == (state.run_id, home) for vm in labels)

    # Checkpoints are in the GCS emulator, nowhere on this disk.
    import fsspec.core

    fs, _ = fsspec.core.url_to_fs(f"gs://{BUCKET}/ckpt")
    assert f"step-{STEPS}" in _ls(fs, f"{BUCKET}/ckpt")
    assert fs.exists(f"{BUCKET}/ckpt/step-{STEPS}/manifest.json")

    # Every VM is billed from its insert request to its confirmed end, once.
    ledger = Ledger(run_dir)
    try:
        intervals = ledger.intervals()
    finally:
        ledger.disconnect()
    assert len(intervals) == 6 and all(not i.is_open for i in intervals)
    assert summary["cost_usd"] == pytest.approx(billed_from_events(found), rel=1e-9)
    up = {e["node"]: e["t"] for e in found if e["event"] == "node_up"}
    down = {e["node"]: e["t"] for e in found if e["event"] == "node_down"}
    assert all(down[n] > up[n] for n in up)

    # Nothing is left on the fake GCE, nor on this machine.
    assert gce.alive() == []
    gcp_plane.wait_for(lambda: not gcp_plane.live(), 30, "the data plane saw every VM go")

    # Same world size throughout: bitwise equal to a straight run.
    reference = final_tensors(straight_run(tmp_path / "straight", project, steps=STEPS))
    final = final_tensors(download(f"gs://{BUCKET}/ckpt", tmp_path / "gcs-copy"))
    assert final.keys() == reference.keys() and final
    for key, tensor in reference.items():
        assert (final[key] == tensor).all(), f"{key} differs from the uninterrupted run"
