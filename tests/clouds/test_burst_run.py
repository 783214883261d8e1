"""`planner run` of a plan "the team's cluster, then spot on AWS" as one run: ``provider = "auto"``.

The job's ``[[purchase.cluster]]`` pool (1 T4 pod at an internal $0.05/h) is the cheapest, but
the team may hold it only ``max_hours``, less than the job needs, so the quote plans the
cluster first and spot on AWS for the rest. The cluster is tests/clouds/k8s_server.py behind
the real ``kubernetes`` client, AWS is moto's EC2 and S3; one data plane runs every pod the
fake kubelet reports Running and every instance moto reports running (the real bootstrap,
node agent and torchrun: 1 node x 2 processes, gloo). When the cluster's hours are up the
controller asks the workers to checkpoint, releases the pod, leaves the cluster and re-plans:
spot on AWS resumes from the S3 checkpoint and finishes. The final parameters must be
bitwise equal to an uninterrupted run of the same world size, each side billed at its own
price, and nothing may be left: no pod, Job or Service with danlu's labels, no EC2 instance.
A second test SIGKILLs the controller during the AWS phase: `--resume` releases the instance
the dead controller left (and sweeps the cluster it used before) and completes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("kubernetes", reason="the kubernetes client is not installed (pip install 'danlu[kubernetes]')")

from planner.cli import main
from runtime.accounting.ledger import Ledger
from tests.clouds.aws_job import IMAGE, billed_from_events, download, events, straight_run, wait, write_catalog, \
    write_project
from tests.clouds.conftest import aws_running, aws_terminate, running_instances
from tests.clouds.dataplane import DataPlane, repo_pythonpath
from tests.clouds.k8s_server import FakeKube, FakeNode
from tests.clouds.test_kubernetes_run import k8s_running
from tests.run.helpers import final_tensors

pytestmark = pytest.mark.ddp

CLUSTER = "kubernetes:lab/ml:t4"
AWS = "aws:us-east-1/use1-az1:g4dn.xlarge"
SELECTOR = {"nvidia.com/gpu.product": "Tesla-T4"}
# The cluster's hours (real time here, 54 s): long enough for the pod to boot and train a while on
# a loaded machine (its start-up took 53 s at load 11 on 2 cores), shorter than the training's own
# sleep (STEPS x SLEEP = 60 s), so the cluster never finishes. 120 steps: the AWS test's reference run.
MAX_HOURS = 0.015
STEPS = 120
SLEEP = 0.5


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKube]:
    server = FakeKube([FakeNode("t4-node", 1, dict(SELECTOR))], stop_s=2.0).start()
    monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig(tmp_path / "kubeconfig", context="lab", namespace="ml")))
    yield server
    server.stop()


@pytest.fixture
def plane(kube: FakeKube, moto, tmp_path: Path) -> Iterator[DataPlane]:
    """Both data planes in one: the cluster's running pods and moto's running instances."""
    pods, instances = k8s_running(kube), aws_running(moto)
    both = DataPlane(list_running=lambda: [*pods(), *instances()], terminate=aws_terminate(moto),
                     sandbox=tmp_path / "nodes", env={**moto.env, "KUBECONFIG": str(tmp_path / "kubeconfig")})
    with both:
        yield both
    assert not both.node_processes(), "a node's process outlived its pod or instance"


def write_job(path: Path, *, bucket: str, kubeconfig: Path, steps: int, entrypoint: list[str],
              max_hours: float = MAX_HOURS) -> Path:
    path.write_text(f"""
name = "tiny-burst"

[workload]
steps = {steps}
checkpoint_gb = 0.001

[workload.throughput]
T4 = 1.0

[constraints]
deadline_hours = 2
budget_usd = 5.0
max_nodes = 1
clouds = ["aws"]

[purchase]
allow = ["spot"]

[[purchase.cluster]]
name = "t4"
context = "lab"
namespace = "ml"
gpu = "T4"
gpus_per_node = 1
max_gpus = 1
gpu_hour_usd = 0.05
node_selector = {{ "nvidia.com/gpu.product" = "Tesla-T4" }}
queue_wait_hours = 0
max_hours = {max_hours}

[overheads]
restart_minutes = 0.1

[objective]
tolerance = 0  # the exact optimum: the cluster, then spot

[run]
entrypoint = {json.dumps(entrypoint)}
provider = "auto"
nproc_per_node = 2
max_restarts = 1
checkpoint_dir = "s3://{bucket}/ckpt"

[run.options]
heartbeat_s = 1.0

[run.options.aws]
image_id = "{IMAGE}"

[run.options.kubernetes]
kubeconfig = "{kubeconfig}"
heartbeat_s = 0.5
rendezvous = "pod-ip"
grace_s = 30
schedule_timeout_s = 120
""")
    return path


def _intervals(run_dir: Path):
    ledger = Ledger(run_dir)
    try:
        return ledger.intervals()
    finally:
        ledger.disconnect()


def test_the_cluster_then_spot_on_aws_as_one_run_bitwise_billed_at_each_price_and_nothing_left(
    kube: FakeKube, moto, plane: DataPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("s3fs")
    project = write_project(tmp_path / "project")
    catalog = write_catalog(tmp_path / "catalog.csv")  # three g4dn spot pools, $0.16-0.18/h
    job = write_job(tmp_path / "job.toml", bucket=moto.bucket, kubeconfig=tmp_path / "kubeconfig", steps=STEPS,
                    entrypoint=["python", "train.py", "--steps", str(STEPS), "--sleep", str(SLEEP)])
    run_dir = tmp_path / "run"
    monkeypatch.chdir(project)

    # The quote: the cluster first, then spot on AWS, and it says why.
    assert main(["quote", str(job), "--catalog", str(catalog), "--json", "--top", "0"]) == 0
    quote = json.loads(capsys.readouterr().out)
    assert [(p["cloud"], p["purchase"]) for p in quote["plan"]["phases"]] == [("kubernetes", "cluster"),
                                                                               ("aws", "spot")]
    (note,) = quote["cluster"]
    assert note["used"] and note["reason"].startswith("does not fit in time") and "may hold it" in note["reason"]

    rc = main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(run_dir)])
    summary = json.loads((run_dir / "summary.json").read_text())
    found = events(run_dir)
    assert rc == 0, (summary, [e for e in found if e["event"] in ("failure", "launch_end", "run_end", "phase_end")])
    assert summary["status"] == "completed" and summary["steps"] == STEPS

    # The cluster trained and checkpointed; its phase ended; AWS resumed from that checkpoint.
    cluster, cloud = summary["launches"]
    assert cluster["pool_id"] == CLUSTER and cluster["outcome"] == "phase_end" and cluster["end_step"] > 0
    assert cloud["pool_id"] == AWS and cloud["outcome"] == "completed" and cloud["start_step"] == cluster["end_step"]
    assert summary["world_sizes"] == [2, 2] and summary["preemptions"] == 0
    (end,) = [e for e in found if e["event"] == "phase_end"]
    assert end["pool"] == CLUSTER and end["hours"] >= MAX_HOURS
    assert [e["action"] for e in found if e["event"] == "checkpoint_request"] == ["stop"]
    assert json.loads((run_dir / "provider" / "routes.json").read_text()) == ["aws", "kubernetes"]

    # Each side at its own price: the pod at the internal $0.05/h, the instance at spot's $0.16/h.
    ups = {e["launch"]: e for e in found if e["event"] == "node_up"}
    assert ups["l-1"]["hourly_usd"] == 0.05 and ups["l-2"]["hourly_usd"] == 0.16
    intervals = _intervals(run_dir)
    assert len(intervals) == 2 and all(not i.is_open for i in intervals)
    pools = {p["pool"]: p for p in summary["pools"]}
    for interval in intervals:
        pool = CLUSTER if interval.key.launch_id == "l-1" else AWS
        assert pools[pool]["cost_usd"] == pytest.approx((interval.end - interval.start) * interval.hourly_usd / 3600,
                                                        rel=1e-6)
    assert summary["cost_usd"] == pytest.approx(billed_from_events(found), rel=1e-9)

    # Nothing is left: no pod, Job or Service with danlu's labels, no EC2 instance, no node process.
    assert kube.alive() == [], kube.alive()
    assert running_instances(moto) == []
    plane.wait_for(lambda: not plane.live(), 60, "the data plane saw every pod and instance go")

    # Same world size throughout: bitwise equal to a straight run.
    reference = final_tensors(straight_run(tmp_path / "straight", project, steps=STEPS))
    final = final_tensors(download(f"s3://{moto.bucket}/ckpt", tmp_path / "s3-copy"))
    assert final.keys() == reference.keys() and final
    for key, tensor in reference.items():
        assert (final[key] == tensor).all(), f"{key} differs from the uninterrupted run"


def test_sigkill_in_the_cloud_phase_then_resume_releases_what_each_provider_holds(
    kube: FakeKube, moto, plane: DataPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    project = write_project(tmp_path / "project")
    catalog = write_catalog(tmp_path / "catalog.csv")
    # The contract-only worker: a launch is a torchrun agent, not a model; 100 table-seconds of work.
    job = write_job(tmp_path / "job.toml", bucket=moto.bucket, kubeconfig=tmp_path / "kubeconfig", steps=100,
                    entrypoint=["python", "contract_only.py", "--seconds", "25"], max_hours=0.004)
    run_dir = tmp_path / "run"
    env = {**os.environ, **moto.env, "KUBECONFIG": str(tmp_path / "kubeconfig"), "PYTHONPATH": repo_pythonpath()}
    controller = subprocess.Popen(
        [sys.executable, "-c", "import sys; from planner.cli import main; sys.exit(main(sys.argv[1:]))", "run",
         str(job), "--catalog", str(catalog), "--run-dir", str(run_dir)],
        cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait(lambda: any(e["event"] == "training" and e["launch"] == "l-2" for e in events(run_dir)), 300,
             "the AWS launch to train")
    finally:
        controller.send_signal(signal.SIGKILL)
        controller.wait(30)
    [orphan] = [i for i in plane.nodes if i.startswith("us-east-1/")]
    assert running_instances(moto) == [orphan.split("/")[1]]  # the dead controller's instance runs on
    assert [e["outcome"] for e in events(run_dir) if e["event"] == "launch_end"] == ["phase_end"]
    assert kube.alive() == []  # the cluster's launch was released at its phase's end

    monkeypatch.chdir(project)
    rc = main(["run", "--resume", str(run_dir)])
    found = events(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert rc == 0 and summary["status"] == "completed", summary
    (recovered,) = [e for e in found if e["event"] == "recovered"]
    assert recovered["launch"] == "l-2" and len(recovered["stale_nodes"]) == 1
    assert [launch["pool_id"] for launch in summary["launches"]] == [CLUSTER, AWS, AWS]  # never back to the cluster
    assert running_instances(moto) == [] and plane.nodes[orphan].gone
    assert kube.alive() == []
    # One billing interval per node, each closed once: nothing billed twice, each at its price.
    intervals = _intervals(run_dir)
    keys = [(i.key.launch_id, i.key.node) for i in intervals]
    assert len(keys) == 3 and len(set(keys)) == 3 and all(not i.is_open for i in intervals)
    assert [i.hourly_usd for i in sorted(intervals, key=lambda i: i.key.launch_id)] == [0.05, 0.16, 0.16]
    assert summary["cost_usd"] == pytest.approx(billed_from_events(found), rel=1e-9)
    plane.wait_for(lambda: not plane.live(), 60, "the data plane saw every pod and instance go")
