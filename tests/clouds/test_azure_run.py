"""`planner run --provider azure` end to end: the local ARM server, Azurite, and the data plane.

The control plane is the real azure-mgmt-compute SDK (DefaultAzureCredential through a
managed-identity endpoint) against :mod:`tests.clouds.arm_server` on 127.0.0.1; checkpoints,
the code bundle and the controller <-> node traffic go to Azure Blob on Azurite through adlfs.
The data plane boots every VM the server reports running by executing its ``customData``
(the real bootstrap, node agent and torchrun agents: 2 nodes x 1 process, gloo).

Two interruptions are injected the way Azure does them: a Scheduled Events ``Preempt`` on
the node's metadata service; the controller checkpoints and acknowledges it (the node agent
POSTs ``StartRequests``), and that acknowledgement evicts the VM through the server's eviction
hook (policy Delete: the VM, its NIC and disk go). The final parameters must be bitwise
equal to a straight run with the same world size.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("azure.mgmt.compute")
pytest.importorskip("adlfs")

from planner.cli import main
from runtime.accounting.ledger import Ledger
from tests.clouds.arm_server import ARM_ERRORS, ArmServer, arm_server_fixture
from tests.clouds.aws_job import (
    billed_from_events,
    download,
    events,
    straight_run,
    write_project,
)
from tests.clouds.azurite import Azurite, azurite_session, clear_adlfs_cache
from tests.clouds.dataplane import DataPlane, Interrupter, Running
from tests.run.helpers import HEADER, final_tensors

pytestmark = pytest.mark.ddp

# Long enough that the second notice lands while the second launch still trains: on a loaded
# machine the stop takes ~7 s (two heartbeats through the object store) from notice to checkpoint,
# and with 60 steps the resumed launch finished first (one preemption instead of two).
STEPS = 120
SLEEP = 0.15
LEAD_S = 30.0  # longer than a checkpoint takes: the eviction comes from the acknowledgement
SUBNET = ("/subscriptions/00000000-0000-0000-0000-0000000000a2/resourceGroups/net/providers/Microsoft.Network/"
          "virtualNetworks/vnet/subnets/default")
# Three T4 spot pools in three zones of one region: each preempted pool cools down, so each
# interruption moves the job to the next zone (a re-plan, a new pool, new VMs).
ROWS = [("eastus", "eastus-1", 0.20), ("eastus", "eastus-2", 0.21), ("eastus", "eastus-3", 0.22)]


@pytest.fixture(scope="module")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    yield from azurite_session(tmp_path_factory)


@pytest.fixture
def arm(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[ArmServer]:
    server = arm_server_fixture(tmp_path_factory, monkeypatch)
    yield server
    server.stop()


@pytest.fixture
def container(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> str:
    import fsspec

    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string)
    clear_adlfs_cache()  # fsspec keys its instances by arguments, not by this variable: drop other Azurites'
    name = f"run-{uuid.uuid4().hex[:10]}"
    fsspec.filesystem("az", connection_string=azurite.connection_string, skip_instance_cache=True).mkdir(name)
    return name


@pytest.fixture
def plane(arm: ArmServer, azurite: Azurite, tmp_path: Path) -> Iterator[DataPlane]:
    def running() -> list[Running]:
        return [Running(vm["id"], vm["tags"].get("danlu-node", vm["name"]), vm["custom_data"])
                for vm in arm.running() if "danlu-run" in vm["tags"]]

    def evict(vm_id: str) -> None:
        # Called on the acknowledgement and again when the lead time is up: the second finds it gone.
        name = vm_id.rsplit("/", 1)[-1]
        if any(vm["name"] == name for vm in arm.vms()):
            arm.evict(name)

    with DataPlane(list_running=running, terminate=evict, sandbox=tmp_path / "nodes", env=azurite.environment()) as dp:
        yield dp
    assert not dp.node_processes(), "a node process outlived its VM"


def _catalog(path: Path) -> Path:
    lines = [HEADER] + [f"azure,{region},{zone},Standard_NC4as_T4_v3,T4,1,16,4,28,0.526,{spot},,,0.5,,2026-11-30,test"
                        for region, zone, spot in ROWS]
    path.write_text("\n".join(lines) + "\n")
    return path


def _job(path: Path, container: str) -> Path:
    options = {"resource_group": "danlu-e2e", "subnet_id": SUBNET, "heartbeat_s": 0.5, "poll_interval_s": 0.2}
    table = "\n".join(f"{k} = {json.dumps(v)}" for k, v in options.items())
    path.write_text(f"""
name = "tiny-azure"

[workload]
steps = {STEPS}
checkpoint_gb = 0.001

[workload.throughput]
T4 = 2.0

[constraints]
deadline_hours = 2
budget_usd = 5.0
max_nodes = 2
clouds = ["azure"]

[purchase]
allow = ["spot"]

[objective]
minimize = "time"

[overheads]
restart_minutes = 1

[run]
entrypoint = ["python", "train.py", "--steps", "{STEPS}", "--sleep", "{SLEEP}"]
provider = "azure"
nproc_per_node = 1
max_restarts = 1
checkpoint_dir = "az://{container}/ckpt"

[run.options]
{table}
""")
    return path


def test_two_preempts_acknowledged_then_evicted_complete_with_blob_checkpoints(
    arm: ArmServer, plane: DataPlane, container: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    project = write_project(tmp_path / "project")
    catalog = _catalog(tmp_path / "catalog.csv")
    job = _job(tmp_path / "job.toml", container)
    run_dir = tmp_path / "run"
    monkeypatch.chdir(project)
    def victims(launch: str) -> list[str]:
        return [vm["id"] for vm in arm.running() if vm["tags"].get("danlu-launch") == launch]

    with Interrupter(plane, run_dir, victims, count=2, lead_s=LEAD_S) as chaos:
        rc = main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(run_dir), "--provider", "azure",
                   "--cooldown", "240"])
    summary = json.loads((run_dir / "summary.json").read_text())
    found = events(run_dir)
    assert rc == 0, (summary, [e for e in found if e["event"] in ("failure", "launch_end", "run_end")])
    assert not chaos.errors and len(chaos.done) == 2 and not plane.errors
    assert summary["status"] == "completed" and summary["steps"] == STEPS
    assert summary["preemptions"] == 2 and summary["world_sizes"] == [2, 2, 2]

    # The notices came from the nodes' Scheduled Events, each was acknowledged, and the
    # acknowledgement (not the 30 s lead) evicted the VM through ARM.
    notices = [e for e in found if e["event"] == "notice" and e["kind"] == "interruption"]
    assert [n["cloud"] for n in notices] == ["azure", "azure"]
    for _, victim in chaos.done:
        node = plane.nodes[victim]
        assert node.server.acknowledged, f"{victim}: the Preempt event was never acknowledged"
        assert ("POST", "/metadata/scheduledevents") in node.server.requests
    assert sorted(arm._state.evictions) == sorted(v for _, v in chaos.done)
    ends = [e for e in found if e["event"] == "launch_end"]
    assert [e["outcome"] for e in ends] == ["preempted", "preempted", "completed"]
    assert len({launch["pool_id"] for launch in summary["launches"]}) == 3

    # Checkpoints are in Blob Storage (Azurite).
    import fsspec

    fs = fsspec.filesystem("az", skip_instance_cache=True, use_listings_cache=False)
    assert fs.exists(f"{container}/ckpt/step-{STEPS}/manifest.json")

    # Every VM is billed from its create request to ARM's confirmation that it is gone, once.
    ledger = Ledger(run_dir)
    try:
        intervals = ledger.intervals()
    finally:
        ledger.disconnect()
    assert len(intervals) == 6 and all(not i.is_open for i in intervals)
    assert summary["cost_usd"] == pytest.approx(billed_from_events(found), rel=1e-9)

    # Nothing is left: no VM on the ARM server, no node process here.
    assert arm.vms() == []
    assert len(arm.deleted) == 6
    plane.wait_for(lambda: not plane.live(), 30, "the data plane saw every VM go")

    # Same world size throughout: bitwise equal to a straight run.
    reference = final_tensors(straight_run(tmp_path / "straight", project, steps=STEPS))
    final = final_tensors(download(f"az://{container}/ckpt", tmp_path / "blob-copy"))
    assert final.keys() == reference.keys() and final
    for key, tensor in reference.items():
        assert (final[key] == tensor).all(), f"{key} differs from the uninterrupted run"


@pytest.mark.parametrize("code", ["SkuNotAvailable", "AllocationFailed", "OperationNotAllowed"])
def test_a_capacity_refusal_mid_provision_is_a_provider_error_that_holds_nothing(
    arm: ArmServer, container: str, tmp_path: Path, code: str,
) -> None:
    """What the controller re-plans on (ProviderError from provision) -- with node 0 already created."""
    from pricing.pool import Pool
    from runtime.providers.azure import AzureProvider
    from runtime.providers.base import ProviderError
    from runtime.providers.cloud_api import CapacityError

    options = AzureProvider.parse_options({"resource_group": "danlu-e2e", "subnet_id": SUBNET, "poll_interval_s": 0.1})
    provider = AzureProvider(AzureProvider.compute(options), run_id="cap", options=options,
                             state_dir=tmp_path / "provider", stage=f"az://{container}/ckpt/_danlu/cap")
    pool = Pool(cloud="azure", region="eastus", zone="eastus-1", instance_type="Standard_NC4as_T4_v3", gpu="T4",
                gpus_per_node=1, purchase="spot", hourly_usd=0.2)
    arm.fail_next_create(code, skip=1)
    with pytest.raises(ProviderError) as caught:
        provider.provision(pool, nodes=2, launch_id="l-1")
    assert isinstance(caught.value, CapacityError) and caught.value.code == code
    # Node 0 is deleted; so is node 1 when ARM accepted it and failed its allocation (a Failed VM is left).
    refused_on_put = ARM_ERRORS[code][0] is not None
    assert arm.vms() == [] and len(arm.deleted) == (1 if refused_on_put else 2)
    provider.close()
