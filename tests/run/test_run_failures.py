"""Failures that are not preemptions: bounded retries, stuck rendezvous, hung start-up."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from planner.cli import main
from planner.job import load_job
from runtime.control.controller import Controller, Tuning
from runtime.control.events import read_events
from runtime.control.run_start import new_state
from tests.run.helpers import digits_entrypoint, processes_of, write_catalog, write_job

pytestmark = pytest.mark.ddp

WORKERS = Path(__file__).parent / "workers"


def _billed(events: list[dict]) -> float:
    up = {e["node"]: e for e in events if e["event"] == "node_up"}
    down = {e["node"]: e for e in events if e["event"] == "node_down"}
    assert up.keys() == down.keys()
    return sum((down[n]["t"] - up[n]["t"]) * up[n]["hourly_usd"] / 3600 for n in up)


def _controller(tmp_path: Path, job_path: Path, tuning: Tuning, plan: dict | None = None) -> Controller:
    catalog = write_catalog(tmp_path / "catalog.csv")
    plan_path = None
    if plan is not None:
        plan_path = tmp_path / "plan.json"
        plan_path.write_text(json.dumps(plan))
    new_state(job_path=job_path, job=load_job(job_path), run_dir=tmp_path / "run", catalog=str(catalog),
              provider="local", time_scale=30, policy="danlu", chaos=[], plan_path=plan_path)
    return Controller.open(tmp_path / "run", tuning=tuning)


def test_a_crashing_worker_is_retried_then_fails_the_run_with_its_cause(tmp_path: Path) -> None:
    job = write_job(tmp_path / "job.toml", entrypoint=[sys.executable, str(WORKERS / "crash.py")], nproc=1,
                    max_restarts=1)
    catalog = write_catalog(tmp_path / "catalog.csv")
    rc = main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(tmp_path / "run"),
               "--time-scale", "30"])
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert rc == 1
    assert summary["status"] == "failed" and summary["failures"] == 2
    assert "simulated worker crash" in summary["cause"] and "max_restarts" in summary["cause"]
    assert [launch["outcome"] for launch in summary["launches"]] == ["failed", "failed"]
    assert summary["preemptions"] == 0 and summary["replans"] == 0  # a crash is not a capacity loss
    events = read_events(tmp_path / "run" / "events.jsonl")
    assert [e["failures"] for e in events if e["event"] == "failure"] == [1, 2]
    assert summary["cost_usd"] == pytest.approx(_billed(events), rel=1e-9)
    assert processes_of(str(tmp_path / "run")) == []


def test_the_cause_is_the_first_failing_ranks_error_not_its_peers(tmp_path: Path) -> None:
    """Rank 1 fails too, on the connection rank 0's crash broke, and says so later in the log: the
    cause a user reads is rank 0's bug, with the log to read on."""
    job = write_job(tmp_path / "job.toml", entrypoint=[sys.executable, str(WORKERS / "peer_crash.py")], nproc=2,
                    max_restarts=0)
    catalog = write_catalog(tmp_path / "catalog.csv")
    rc = main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(tmp_path / "run"),
               "--time-scale", "30"])
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert rc == 1 and summary["status"] == "failed", summary
    [launch] = summary["launches"]
    log = tmp_path / "run" / "launches" / launch["launch_id"] / f"{launch['launch_id']}-n0.log"
    assert "Connection closed" in log.read_text()  # rank 1's error is in the log, after rank 0's
    assert "rank 0: RuntimeError: bad batch shape [3, 32] for a model of width 64" in summary["cause"], summary
    assert f"(log: {log})" in summary["cause"]
    assert processes_of(str(tmp_path / "run")) == []


def test_a_failed_run_goes_on_with_resume_once_its_bug_is_fixed(tmp_path: Path, capsys) -> None:
    bug = tmp_path / "BUG"
    bug.write_text("the data loader's off-by-one\n")
    steps = 200
    entrypoint = [sys.executable, str(WORKERS / "fails_until_fixed.py"), str(bug), *digits_entrypoint(steps)[1:]]
    job = write_job(tmp_path / "job.toml", entrypoint=entrypoint, steps=steps, nproc=1, max_restarts=1)
    catalog = write_catalog(tmp_path / "catalog.csv")
    run_dir = tmp_path / "run"
    assert main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(run_dir), "--time-scale", "30"]) == 1
    failed = json.loads((run_dir / "summary.json").read_text())
    assert failed["status"] == "failed" and "the bug recorded in" in failed["cause"], failed
    capsys.readouterr()

    bug.unlink()
    assert main(["run", "--resume", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "continuing the failed run from step 0 (it ended: " in out and "the bug recorded in" in out, out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == steps, summary
    assert [launch["outcome"] for launch in summary["launches"]] == ["failed", "failed", "completed"]
    assert summary["failures"] == 2
    events = read_events(run_dir / "events.jsonl")
    assert [e["status"] for e in events if e["event"] == "run_end"] == ["failed", "completed"]
    assert summary["cost_usd"] == pytest.approx(_billed(events), rel=1e-9)
    assert processes_of(str(run_dir)) == []


def test_a_run_with_too_little_time_goes_on_with_resume_and_a_later_deadline(tmp_path: Path, capsys) -> None:
    steps = 40  # 47 s at the job's 0.85 steps/s: no plan fits in 36 s
    job = write_job(tmp_path / "job.toml", entrypoint=digits_entrypoint(steps), steps=steps, nproc=1,
                    deadline_hours=0.01)
    catalog = write_catalog(tmp_path / "catalog.csv")
    run_dir = tmp_path / "run"
    assert main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(run_dir), "--time-scale", "60"]) == 1
    ended = json.loads((run_dir / "summary.json").read_text())
    assert ended["status"] == "infeasible" and ended["launches"] == [], ended
    mail = (run_dir / "outbox" / "run-ended.eml").read_text()
    assert f"planner run --resume {run_dir} --deadline-in HOURS" in mail.replace("=\n", "")
    capsys.readouterr()

    assert main(["run", "--resume", str(run_dir), "--deadline-in", "2"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == steps, summary
    state = json.loads((run_dir / "state.json").read_text())
    assert 2.0 < state["job"]["constraints"]["deadline_hours"] < 2.0 + summary["hours"]  # two hours from the resume
    events = read_events(run_dir / "events.jsonl")
    assert [e["status"] for e in events if e["event"] == "run_end"] == ["infeasible", "completed"]
    assert processes_of(str(run_dir)) == []


def test_a_script_that_trains_other_steps_than_the_job_says_fails_at_its_first_report(tmp_path: Path) -> None:
    # The job was cut to 30 steps and the script's --steps left at 300: trained on, it would spend past
    # the plan up to the budget cap.
    job = write_job(tmp_path / "job.toml", entrypoint=digits_entrypoint(300), steps=30, nproc=1, max_restarts=3)
    catalog = write_catalog(tmp_path / "catalog.csv")
    run_dir = tmp_path / "run"
    assert main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(run_dir), "--time-scale", "60"]) == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed", summary
    assert (f"the training script trains to step 300 (its max_steps), but [workload] steps = 30 in {job}"
            in summary["cause"]), summary["cause"]
    assert "To fix: make the two agree" in summary["cause"]
    assert [launch["outcome"] for launch in summary["launches"]] == ["failed"]  # not retried: it would repeat
    assert summary["steps"] < 300
    events = read_events(run_dir / "events.jsonl")
    assert [e["launch"] for e in events if e["event"] == "steps_unmatched"] == ["l-1"]
    assert summary["cost_usd"] == pytest.approx(_billed(events), rel=1e-9)
    assert processes_of(str(run_dir)) == []


def test_an_entrypoint_whose_script_is_not_there_is_refused_before_anything_is_billed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """The usual first-run slip: `planner run` started outside the project, so every launch would fail."""
    project = tmp_path / "project"
    (project / "jobs").mkdir(parents=True)
    (project / "train.py").write_text("print('training')\n")
    job = write_job(project / "jobs" / "job.toml", entrypoint=["python", "train.py"], nproc=1)
    catalog = write_catalog(tmp_path / "catalog.csv")
    monkeypatch.chdir(tmp_path)
    rc = main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "[run].entrypoint runs 'train.py', which is not a file in" in err
    assert "start `planner run` in that directory" in err and str(project) in err
    assert not (tmp_path / "run").exists()  # nothing written, nothing launched


def test_a_node_that_never_joins_times_the_rendezvous_out(tmp_path: Path) -> None:
    job = write_job(tmp_path / "job.toml", entrypoint=[sys.executable, str(WORKERS / "sleeper.py")], nproc=1,
                    max_restarts=0, max_nodes=2)
    plan = {"plan": {"phases": [{"cloud": "aws", "region": "us-east-1", "zone": "use1-az1",
                                 "instance_type": "g4dn.xlarge", "gpu": "T4", "gpus_per_node": 1, "nodes": 2,
                                 "purchase": "spot", "hourly_usd": 0.16}]}}
    controller = _controller(tmp_path, job, Tuning(hold_nodes=(1,), rdzv_timeout_s=2, startup_grace_s=30), plan)
    summary = controller.run()
    assert summary["status"] == "failed"
    assert "rendezvous timed out" in summary["cause"]
    assert summary["launches"][0]["nodes"] == 2
    assert processes_of(str(tmp_path / "run")) == []


def test_a_launch_that_never_starts_training_is_a_failure(tmp_path: Path) -> None:
    # 1 simulated minute of restart time at 30x is 2 s: the 3 s grace stands.
    job = write_job(tmp_path / "job.toml", entrypoint=[sys.executable, str(WORKERS / "sleeper.py")], nproc=1,
                    max_restarts=0, restart_minutes=1)
    controller = _controller(tmp_path, job, Tuning(rdzv_timeout_s=1, startup_grace_s=3))
    summary = controller.run()
    assert summary["status"] == "failed"
    assert "did not start training within 4s" in summary["cause"]
    events = read_events(tmp_path / "run" / "events.jsonl")
    assert summary["cost_usd"] == pytest.approx(_billed(events), rel=1e-9)
    assert processes_of(str(tmp_path / "run")) == []


def test_a_cloud_without_on_demand_capacity_is_left_out_and_another_runs_the_job(tmp_path: Path) -> None:
    """`--chaos refuse=aws` answers every AWS launch as EC2 does without capacity. The job allows
    on-demand only: AWS's T4 (the cheapest) refuses, nothing is billed for it, and the re-plan
    leaves that pool out and runs the job on GCP's on-demand T4 to the end."""
    job = write_job(tmp_path / "job.toml", entrypoint=digits_entrypoint(60), steps=60, nproc=1, max_restarts=2,
                    allow=("on_demand",))
    catalog = write_catalog(tmp_path / "catalog.csv")
    rc = main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(tmp_path / "run"),
               "--time-scale", "30", "--chaos", "refuse=aws"])
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert rc == 0 and summary["status"] == "completed" and summary["steps"] == 60
    assert [(launch["pool_id"], launch["purchase"]) for launch in summary["launches"]] == [
        ("gcp:us-central1:n1-standard-4-t4", "on_demand")]
    events = read_events(tmp_path / "run" / "events.jsonl")
    (refused,) = [e for e in events if e["event"] == "provision_failed"]
    assert refused["pool"] == "1x g4dn.xlarge on_demand aws:us-east-1"
    assert "InsufficientInstanceCapacity" in refused["reason"] and "--chaos refuse" in refused["reason"]
    assert summary["failures"] == 1 and [e["pool"] for e in events if e["event"] == "node_up"] == [
        "gcp:us-central1:n1-standard-4-t4"]
    assert summary["cost_usd"] == pytest.approx(_billed(events), rel=1e-9)
    assert processes_of(str(tmp_path / "run")) == []
