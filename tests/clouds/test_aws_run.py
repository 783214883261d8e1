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
    Interrupter,
    billed_from_events,
    download,
    events,
    straight_run,
    write_catalog,
    write_job,
    write_project,
)
from tests.clouds.conftest import running_instances
from tests.run.helpers import final_tensors

pytestmark = pytest.mark.ddp

STEPS = 60
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
    with Interrupter(aws_plane, moto.client("ec2"), run_dir, count=2, lead_s=6.0) as chaos:
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

    # Same world size throughout: bitwise equal to a straight run.
    reference = final_tensors(straight_run(tmp_path / "straight", project, steps=STEPS))
    final = final_tensors(download(f"s3://{moto.bucket}/ckpt", tmp_path / "s3-copy"))
    assert final.keys() == reference.keys() and final
    for key, tensor in reference.items():
        assert (final[key] == tensor).all(), f"{key} differs from the uninterrupted run"
