"""`planner run` with provider "kubernetes" end to end: the official client against the local API server.

The job's ``[[purchase.cluster]]`` pool is the cheapest, so the plan runs there at its internal
price: an indexed Job of 2 pods (1 GPU each) and a headless Service on tests/clouds/k8s_server.py.
The data plane runs every pod the fake kubelet reports Running -- its container command is the
real bootstrap, node agent and torchrun agent (gloo, 2 nodes x 1 process), checkpoints go to
moto's S3. Once it trains, pod 1 is evicted through the Eviction API (``POST .../pods/{name}/
eviction``, what ``kubectl drain`` sends): its ``DisruptionTarget`` condition is the
interruption, the workers checkpoint in the pod's grace period, the controller re-plans and the
cluster runs it again. The final parameters must be bitwise equal to an uninterrupted run of the
same world size, and no pod, Job or Service with danlu's labels may remain.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("kubernetes", reason="the kubernetes client is not installed (pip install 'danlu[kubernetes]')")

from planner.cli import main
from runtime.accounting.ledger import Ledger
from tests.clouds.aws_job import (
    billed_from_events,
    download,
    events,
    straight_run,
    write_catalog,
    write_project,
)
from tests.clouds.dataplane import DataPlane, Running
from tests.clouds.k8s_server import FakeKube, FakeNode
from tests.run.helpers import final_tensors

pytestmark = pytest.mark.ddp

STEPS = 60
SLEEP = 0.15
SELECTOR = {"nvidia.com/gpu.product": "Tesla-T4"}


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKube]:
    # stop_s: how long an evicted pod keeps running (its grace period, shortened for the test).
    server = FakeKube([FakeNode("t4-node", 2, dict(SELECTOR))], stop_s=8.0).start()
    monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig(tmp_path / "kubeconfig", context="lab", namespace="ml")))
    yield server
    server.stop()


def k8s_running(kube: FakeKube):
    """The data plane's view: Running pods labelled danlu-run, their container command and index."""
    def running() -> list[Running]:
        found = []
        for pod in kube.running():
            labels = pod["metadata"]["labels"]
            if "danlu-run" not in labels:
                continue
            command = pod["spec"]["containers"][0]["command"]
            assert command[:2] == ["python3", "-c"]
            index = labels["batch.kubernetes.io/job-completion-index"]
            found.append(Running(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}",
                                 pod["metadata"]["name"], command[2], {"JOB_COMPLETION_INDEX": index}))
        return found
    return running


def _evict_once_training(kube: FakeKube, run_dir: Path, done: list[str], errors: list[str]) -> None:
    """When launch l-1 trains: evict its pod of index 1 through the real client's Eviction API."""
    import time

    from kubernetes import client

    from pricing.cluster_queue import kube_api_client

    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if any(e["event"] == "training" and e["launch"] == "l-1" for e in events(run_dir)):
                break
            time.sleep(0.2)
        else:
            raise AssertionError("launch l-1 never trained")
        time.sleep(1.0)
        (pod,) = [p for p in kube.running() if p["metadata"]["labels"].get("danlu-launch") == "l-1"
                  and p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "1"]
        name = pod["metadata"]["name"]
        api = kube_api_client("lab")
        client.CoreV1Api(api).create_namespaced_pod_eviction(
            name, "ml", client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace="ml")))
        api.close()
        done.append(name)
    except Exception as exc:  # noqa: BLE001 -- the test asserts on it
        errors.append(repr(exc))


def write_job(path: Path, *, bucket: str, kubeconfig: Path) -> Path:
    options = {"kubeconfig": str(kubeconfig), "heartbeat_s": 0.5, "rendezvous": "pod-ip", "grace_s": 30,
               "schedule_timeout_s": 120}
    table = "\n".join(f"{k} = {json.dumps(v)}" for k, v in options.items())
    path.write_text(f"""
name = "tiny-k8s"

[workload]
steps = {STEPS}
checkpoint_gb = 0.001

[workload.throughput]
T4 = 2.0

[constraints]
deadline_hours = 2
budget_usd = 5.0
max_nodes = 2
clouds = ["aws"]

[purchase]
allow = ["on_demand"]

[[purchase.cluster]]
name = "t4"
context = "lab"
namespace = "ml"
gpu = "T4"
gpus_per_node = 1
max_gpus = 2
gpu_hour_usd = 0.05
node_selector = {json.dumps(SELECTOR).replace(":", " =")}
queue_wait_hours = 0

[overheads]
restart_minutes = 1

[objective]
tolerance = 0  # the exact optimum: both pods (a simpler plan within tolerance would be one)

[run]
entrypoint = ["python", "train.py", "--steps", "{STEPS}", "--sleep", "{SLEEP}"]
provider = "kubernetes"
nproc_per_node = 1
max_restarts = 1
checkpoint_dir = "s3://{bucket}/ckpt"

[run.options]
{table}
""")
    return path


def test_a_cluster_run_survives_an_eviction_bitwise_and_leaves_nothing_behind(
    kube: FakeKube, moto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("s3fs")
    project = write_project(tmp_path / "project")
    catalog = write_catalog(tmp_path / "catalog.csv")  # three aws g4dn pools: dearer than the cluster
    kubeconfig = tmp_path / "kubeconfig"  # the kube fixture wrote it
    job = write_job(tmp_path / "job.toml", bucket=moto.bucket, kubeconfig=kubeconfig)
    run_dir = tmp_path / "run"
    monkeypatch.chdir(project)
    done: list[str] = []
    errors: list[str] = []
    plane = DataPlane(list_running=k8s_running(kube), terminate=lambda _i: None, sandbox=tmp_path / "pods",
                      env={**moto.env, "KUBECONFIG": str(kubeconfig)})
    evictor = threading.Thread(target=_evict_once_training, args=(kube, run_dir, done, errors), daemon=True)
    with plane:
        evictor.start()
        rc = main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(run_dir)])
        evictor.join(30)
        plane.wait_for(lambda: not plane.live(), 60, "the data plane saw every pod go")
    assert not plane.node_processes(), "a pod's process outlived it"
    summary = json.loads((run_dir / "summary.json").read_text())
    found = events(run_dir)
    assert rc == 0, (summary, [e for e in found if e["event"] in ("failure", "launch_end", "run_end")])
    assert not errors and len(done) == 1
    assert summary["status"] == "completed" and summary["steps"] == STEPS
    assert summary["preemptions"] == 1 and summary["world_sizes"] == [2, 2]

    # It ran on the cluster pool both times, at its internal price; the eviction was the interruption.
    assert {launch["pool_id"] for launch in summary["launches"]} == {"kubernetes:lab/ml:t4"}
    assert [e["outcome"] for e in found if e["event"] == "launch_end"] == ["preempted", "completed"]
    notices = [e for e in found if e["event"] == "notice" and e["kind"] == "interruption"]
    assert [n["cloud"] for n in notices] == ["kubernetes"]
    ups = [e for e in found if e["event"] == "node_up"]
    assert len(ups) == 4 and {e["hourly_usd"] for e in ups} == {0.05}
    ledger = Ledger(run_dir)
    try:
        intervals = ledger.intervals()
    finally:
        ledger.disconnect()
    assert len(intervals) == 4 and all(not i.is_open for i in intervals)
    assert summary["cost_usd"] == pytest.approx(billed_from_events(found), rel=1e-9)

    # Two indexed Jobs of 2 pods each were created, with the pool's GPU and selector; nothing is left.
    assert len(kube.ever_pods) == 4
    assert kube.alive() == [], kube.alive()

    # Same world size throughout: bitwise equal to a straight run.
    reference = final_tensors(straight_run(tmp_path / "straight", project, steps=STEPS))
    final = final_tensors(download(f"s3://{moto.bucket}/ckpt", tmp_path / "s3-copy"))
    assert final.keys() == reference.keys() and final
    for key, tensor in reference.items():
        assert (final[key] == tensor).all(), f"{key} differs from the uninterrupted run"
