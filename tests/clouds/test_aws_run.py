"""`planner run --provider aws` end to end against moto's EC2 and S3 on 127.0.0.1.

moto runs the control plane (RunInstances, DescribeInstances, TerminateInstances, S3);
the data plane fixture boots every instance moto reports running by executing its user
data -- the real bootstrap, the real node agent, real torchrun agents (gloo, 2 nodes x 1
process) that train, checkpoint to S3 on moto and resume. Two spot interruptions are
injected the way AWS does them: the notice on the node's IMDSv2, then the instance is
terminated through the EC2 API after a short lead. The reference is the same script run
straight under torchrun with the same world size: the final parameters must be bitwise equal.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cli import main
from runtime.accounting.ledger import Ledger
from tests.clouds.aws_job import (
    billed_from_events,
    download,
    events,
    launch_instances,
    straight_run,
    wait,
    write_catalog,
    write_job,
    write_project,
)
from tests.clouds.conftest import boto3_session, running_instances
from tests.clouds.dataplane import Interrupter, repo_pythonpath
from tests.run.helpers import final_tensors

pytestmark = pytest.mark.ddp

# Long enough that the second notice lands while the second launch still trains: on a loaded
# machine the stop takes ~7 s (two heartbeats through the object store) from notice to checkpoint,
# and with 60 steps the resumed launch finished first (one preemption instead of two).
STEPS = 120
SLEEP = 0.15


def test_two_interruptions_complete_with_s3_checkpoints_and_every_instance_billed(
    moto, aws_plane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("s3fs")
    project = write_project(tmp_path / "project")
    catalog = write_catalog(tmp_path / "catalog.csv")
    job = write_job(tmp_path / "job.toml", bucket=moto.bucket, steps=STEPS, sleep=SLEEP)
    run_dir = tmp_path / "run"
    monkeypatch.chdir(project)
    with Interrupter(aws_plane, run_dir, launch_instances(moto.client("ec2")), count=2, lead_s=8.0) as chaos:
        rc = main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(run_dir), "--provider", "aws",
                   "--cooldown", "240"])
    summary = json.loads((run_dir / "summary.json").read_text())
    found = events(run_dir)
    assert rc == 0, (summary, [e for e in found if e["event"] in ("failure", "launch_end", "run_end")])
    assert not chaos.errors and len(chaos.done) == 2
    assert summary["status"] == "completed" and summary["steps"] == STEPS
    assert summary["preemptions"] == 2 and summary["world_sizes"] == [2, 2, 2]

    # The notices came from the nodes' IMDSv2, through their heartbeats.
    notices = [e for e in found if e["event"] == "notice" and e["kind"] == "interruption"]
    assert [n["cloud"] for n in notices] == ["aws", "aws"]
    ends = [e for e in found if e["event"] == "launch_end"]
    assert [e["outcome"] for e in ends] == ["preempted", "preempted", "completed"]
    assert len({launch["pool_id"] for launch in summary["launches"]}) == 3

    # Checkpoints are in S3 (moto), nowhere on this disk.
    import fsspec.core

    fs, _ = fsspec.core.url_to_fs(f"s3://{moto.bucket}/ckpt")
    fs.invalidate_cache()
    committed = [p for p in fs.ls(f"{moto.bucket}/ckpt", detail=False) if p.rsplit("/", 1)[-1].startswith("step-")]
    assert any(p.endswith(f"step-{STEPS}") for p in committed)
    assert fs.exists(f"{moto.bucket}/ckpt/step-{STEPS}/manifest.json")

    # Every instance is billed from its launch request to its confirmed termination, once.
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

    # Nothing is left running, on moto or on this machine.
    assert running_instances(moto) == []
    aws_plane.wait_for(lambda: not aws_plane.live(), 30, "the data plane saw every instance go")

    # The two preemptions are learned for the next quotes (pool by pool, with their node-hours).
    from pricing import learned

    rates = learned.load()
    assert sum(n for n, _ in rates.values()) == 2 and all(h > 0 for _, h in rates.values())

    # Same world size throughout: bitwise equal to a straight run.
    reference = final_tensors(straight_run(tmp_path / "straight", project, steps=STEPS))
    final = final_tensors(download(f"s3://{moto.bucket}/ckpt", tmp_path / "s3-copy"))
    assert final.keys() == reference.keys() and final
    for key, tensor in reference.items():
        assert (final[key] == tensor).all(), f"{key} differs from the uninterrupted run"


ZONES = [f"use1-az{i}" for i in range(1, 8)]


def test_each_capacity_code_blocks_its_pool_and_the_run_moves_on(
    moto, aws_plane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Six pools refuse with the six EC2 capacity/quota codes in turn; the seventh runs the job."""
    from runtime.providers.aws import AwsCompute, AwsOptions, AwsProvider
    from tests.clouds.test_aws_compute import ISSUE_CODES, inject

    answers: list[str | None] = list(ISSUE_CODES)
    seen: list[list[str]] = []

    def compute(cls, options):  # the real client, with botocore's hook answering the first calls
        api = AwsCompute(boto3_session(), options=AwsOptions.model_validate(options.model_dump()))
        seen.append(inject(api.client("us-east-1"), answers))
        return api

    monkeypatch.setattr(AwsProvider, "compute", classmethod(compute))
    project = write_project(tmp_path / "project")
    rows = [("aws", "us-east-1", zone, "g4dn.xlarge", 0.526, 0.16 + 0.01 * i) for i, zone in enumerate(ZONES)]
    catalog = write_catalog(tmp_path / "catalog.csv", rows)
    job = write_job(tmp_path / "job.toml", bucket=moto.bucket, steps=10, sleep=0, max_nodes=1, max_restarts=6,
                    entrypoint=["python", "contract_only.py", "--seconds", "1"])
    run_dir = tmp_path / "run"
    monkeypatch.chdir(project)
    rc = main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(run_dir), "--cooldown", "240"])
    found = events(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert rc == 0 and summary["status"] == "completed", summary
    failed = [e for e in found if e["event"] == "provision_failed"]
    assert len(failed) == len(ISSUE_CODES)
    for event, code, zone in zip(failed, ISSUE_CODES, ZONES, strict=False):
        assert code in event["reason"] and zone in event["pool"]
    # Each refusal blocks its pool (it cools down) and the planner picks the next one.
    plans = [e for e in found if e["event"] in ("plan", "replan") and e.get("pool")]
    assert [p["pool"].rsplit("/", 1)[-1] for p in plans] == ZONES
    assert [launch["pool_id"] for launch in summary["launches"]] == [f"aws:us-east-1/{ZONES[-1]}:g4dn.xlarge"]
    assert seen == [[*ISSUE_CODES, "moto"]]  # one provider, seven RunInstances calls
    assert running_instances(moto) == []
    assert summary["cost_usd"] == pytest.approx(billed_from_events(found), rel=1e-9)


def test_sigkill_after_provisioning_then_resume_leaves_nothing_running_or_billed_twice(
    moto, aws_plane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os
    import signal
    import subprocess
    import sys

    project = write_project(tmp_path / "project")
    catalog = write_catalog(tmp_path / "catalog.csv")
    job = write_job(tmp_path / "job.toml", bucket=moto.bucket, steps=10, sleep=0, max_nodes=1,
                    entrypoint=["python", "contract_only.py", "--seconds", "1"])
    run_dir = tmp_path / "run"
    env = {**os.environ, **moto.env, "PYTHONPATH": repo_pythonpath()}
    controller = subprocess.Popen(
        [sys.executable, "-c", "import sys; from planner.cli import main; sys.exit(main(sys.argv[1:]))", "run",
         str(job), "--catalog", str(catalog), "--run-dir", str(run_dir), "--cooldown", "240"],
        cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        aws_plane.wait_for(lambda: len(aws_plane.nodes) >= 1, 120, "the first instance to boot")
    finally:
        controller.send_signal(signal.SIGKILL)
        controller.wait(30)
    [orphan] = list(aws_plane.nodes)
    assert running_instances(moto) == [orphan.split("/")[1]]  # the dead controller's instance runs on

    monkeypatch.chdir(project)
    rc = main(["run", "--resume", str(run_dir)])
    found = events(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert rc == 0 and summary["status"] == "completed", summary
    assert running_instances(moto) == []
    assert aws_plane.nodes[orphan].gone
    # One billing interval per instance that was recorded, each closed once: nothing twice.
    ledger = Ledger(run_dir)
    try:
        intervals = ledger.intervals()
    finally:
        ledger.disconnect()
    keys = [(i.key.launch_id, i.key.node) for i in intervals]
    assert intervals and len(keys) == len(set(keys)) and all(not i.is_open for i in intervals)
    ups = [(e["launch"], e["node"]) for e in found if e["event"] == "node_up"]
    downs = [(e["launch"], e["node"]) for e in found if e["event"] == "node_down"]
    assert len(downs) == len(set(downs)) and set(downs) == set(keys) and set(downs) <= set(ups)
    billed = sum((i.end - i.start) * i.hourly_usd / 3600 for i in intervals)
    assert summary["cost_usd"] == pytest.approx(billed, rel=1e-9)


def test_planner_cancel_of_a_detached_aws_run_terminates_every_instance_and_closes_its_billing(
    moto, aws_plane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    project = write_project(tmp_path / "project")
    catalog = write_catalog(tmp_path / "catalog.csv")
    job = write_job(tmp_path / "job.toml", bucket=moto.bucket, steps=10, sleep=0, max_nodes=1,
                    entrypoint=["python", "contract_only.py", "--seconds", "600"])
    run_dir = tmp_path / "run"
    monkeypatch.chdir(project)
    # The background controller inherits moto's endpoint from the environment, as it would a profile.
    assert main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(run_dir), "--detach"]) == 0
    try:
        wait(lambda: any(e["event"] == "training" for e in events(run_dir)), 240, "the detached run to train")
        assert running_instances(moto)
    finally:
        assert main(["cancel", str(run_dir)]) == 0
    assert running_instances(moto) == []
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "cancelled"
    ledger = Ledger(run_dir)
    try:
        intervals = ledger.intervals()
    finally:
        ledger.disconnect()
    assert intervals and all(not i.is_open for i in intervals)
    assert summary["cost_usd"] == pytest.approx(billed_from_events(events(run_dir)), rel=1e-9)


def test_the_spend_series_reaches_the_trackers_on_the_nodes_while_the_run_trains(
    moto, aws_plane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """[tracking] on a cloud: the controller's meter.json goes up to the stage, each node's agent
    mirrors it into its run dir, and the session logs it beside the loss -- during the run, not
    only the final figures the controller adds at the end."""
    pytest.importorskip("s3fs")
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from runtime.tracking.launch import run_key

    steps = 40
    tb = tmp_path / "tb"
    project = write_project(tmp_path / "project")
    catalog = write_catalog(tmp_path / "catalog.csv")
    job = write_job(tmp_path / "job.toml", bucket=moto.bucket, steps=steps, sleep=0.25, max_nodes=1,
                    extra=f'\n[tracking]\nevery_steps = 2\n\n[tracking.tensorboard]\nlog_dir = "{tb}"\n')
    run_dir = tmp_path / "run"
    monkeypatch.chdir(project)
    rc = main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(run_dir), "--cooldown", "240"])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert rc == 0 and summary["status"] == "completed" and summary["steps"] == steps, summary

    events = EventAccumulator(str(tb / run_key(run_dir)))
    events.Reload()
    spend = sorted(events.Scalars("danlu/spend_usd"), key=lambda e: (e.step, e.wall_time))
    during = [e for e in spend if e.step < steps]  # the controller's own final figures are at the last step
    # A heartbeat a second (controller and node) over ~10 s of training: several distinct figures.
    assert len({e.value for e in during}) >= 3, [(e.step, e.value) for e in spend]
    assert [e.value for e in during] == sorted(e.value for e in during)
    assert 0 < during[0].value and during[-1].value <= summary["cost_usd"] * (1 + 1e-6)
    loss_steps = {e.step for e in events.Scalars("loss")}
    assert {e.step for e in during} <= loss_steps, "danlu's figures are logged at the session's steps"
    assert {"danlu/spend_rate_usd_per_hour", "danlu/forecast_usd"} <= set(events.Tags()["scalars"])
    # The figures went through the run's stage in S3 (moto), beside the launch's control and status files.
    import fsspec.core

    fs, _ = fsspec.core.url_to_fs(f"s3://{moto.bucket}")
    fs.invalidate_cache()
    launch = summary["launches"][0]["launch_id"]
    assert fs.glob(f"{moto.bucket}/ckpt/_danlu/*/launches/{launch}/meter.json")


def test_a_worker_that_fails_on_start_names_its_error_from_the_nodes_log(
    moto, aws_plane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An exit code alone says little: the launch's reason carries the error line of the node's log."""
    project = write_project(tmp_path / "project")
    (project / "broken.py").write_text("raise FileNotFoundError('no shard at /data/train-00000.tar')\n")
    catalog = write_catalog(tmp_path / "catalog.csv")
    job = write_job(tmp_path / "job.toml", bucket=moto.bucket, steps=10, sleep=0, max_nodes=1, max_restarts=0,
                    entrypoint=["python", "broken.py"])
    run_dir = tmp_path / "run"
    monkeypatch.chdir(project)
    rc = main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(run_dir), "--cooldown", "240"])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert rc != 0 and summary["status"] == "failed", summary
    [launch] = summary["launches"]
    assert "workers exited" in launch["reason"] and "no shard at /data/train-00000.tar" in launch["reason"], launch
    assert running_instances(moto) == []
