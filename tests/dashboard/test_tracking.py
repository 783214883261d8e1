"""Experiment trackers after a real local `planner run` (one preemption, one re-plan).

Each tracker's own reader checks what it holds: MLflow's client on the sqlite store,
TensorBoard's EventAccumulator on the event files, and the W&B offline run files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.tracking.final import REPORT_NAME, SUMMARY_NAME
from runtime.tracking.launch import run_key
from runtime.tracking.wandb_backend import wandb_run_id
from tests.dashboard import wandb_records

# One worker for all of them under pytest-xdist (--dist loadgroup): one tracked run, one browser.
pytestmark = [pytest.mark.ddp, pytest.mark.xdist_group("dashboard-run")]


@pytest.fixture(scope="module")
def finished(tracked_run):
    run_dir = tracked_run.wait()
    return tracked_run, json.loads((run_dir / "summary.json").read_text())


def _spend_steps_beside(metric_steps: dict[str, list[int]]) -> None:
    """The user's metric (lr, logged by the script every 10 steps) has danlu's spend at each of its steps."""
    assert metric_steps["lr"], "the user's own metric reached the tracker"
    assert set(metric_steps["lr"]) <= set(metric_steps["danlu/spend_usd"])


def test_mlflow_store_holds_the_runs_metrics_tags_and_report(finished) -> None:
    from mlflow.tracking import MlflowClient

    run, summary = finished
    client = MlflowClient(tracking_uri=f"sqlite:///{run.tracking / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("digits-dashboard-test")
    found = client.search_runs([experiment.experiment_id])
    assert len(found) == 1, "both launches and the end of the run log to one MLflow run"
    mlrun = found[0]
    assert mlrun.info.status == "FINISHED"
    tags = mlrun.data.tags
    assert tags["danlu.run"] == run_key(run.run_dir) and tags["danlu.status"] == "completed"
    assert tags["danlu.purchase"] == "spot" and "n1-standard-4-t4" in tags["danlu.pool"]  # the pool after the re-plan
    history = {name: client.get_metric_history(mlrun.info.run_id, name)
               for name in ("danlu/spend_usd", "danlu/preemptions", "danlu/spend_rate_usd_per_hour", "lr", "loss")}
    spend = [m.value for m in sorted(history["danlu/spend_usd"], key=lambda m: (m.step, m.timestamp))]
    assert spend == sorted(spend) and spend[-1] == pytest.approx(summary["cost_usd"], rel=1e-9)
    assert max(m.value for m in history["danlu/preemptions"]) == 1
    assert all(m.value > 0 for m in history["danlu/spend_rate_usd_per_hour"])
    _spend_steps_beside({k: [m.step for m in v] for k, v in history.items()})
    artifacts = {a.path for a in client.list_artifacts(mlrun.info.run_id)}
    assert {REPORT_NAME, SUMMARY_NAME} <= artifacts
    local = client.download_artifacts(mlrun.info.run_id, SUMMARY_NAME)
    assert json.loads(Path(local).read_text())["cost_usd"] == summary["cost_usd"]


def test_tensorboard_event_files_hold_the_spend_series(finished) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, summary = finished
    logdir = run.tracking / "tb" / run_key(run.run_dir)
    events = EventAccumulator(str(logdir))
    events.Reload()
    scalars = events.Tags()["scalars"]
    assert {"danlu/spend_usd", "danlu/forecast_usd", "danlu/lost_steps", "loss", "lr"} <= set(scalars)
    spend = events.Scalars("danlu/spend_usd")
    values = [e.value for e in sorted(spend, key=lambda e: (e.step, e.wall_time))]
    assert len(values) >= 3 and values == sorted(values)
    assert values[-1] == pytest.approx(summary["cost_usd"], rel=1e-6)  # float32 in the event file
    _spend_steps_beside({name: [e.step for e in events.Scalars(name)] for name in ("lr", "danlu/spend_usd")})
    assert "danlu/report" in events.Tags()["tensors"]
    assert (logdir / REPORT_NAME).read_text().startswith("<!DOCTYPE html>")


def test_wandb_offline_run_directory_holds_the_figures(finished) -> None:
    run, summary = finished
    files = sorted((run.tracking / "wandb").glob(f"offline-run-*-{wandb_run_id(run_key(run.run_dir))}/run-*.wandb"))
    assert files, "W&B wrote its offline run files"
    rows = [row for f in files for row in wandb_records.history(f)]
    spend = [(row["_step"], row["danlu/spend_usd"]) for row in rows if "danlu/spend_usd" in row]
    assert [v for _, v in spend] == sorted(v for _, v in spend)
    assert spend[-1][1] == pytest.approx(summary["cost_usd"], rel=1e-9)
    lr_steps = [row["_step"] for row in rows if "lr" in row]
    assert lr_steps and all("danlu/spend_usd" in row for row in rows if "lr" in row)
    config = {}
    for f in files:
        config.update(wandb_records.config(f))
    assert config["danlu.purchase"] == "spot" and config["danlu.status"] == "completed"
    saved = [name for f in files for name in wandb_records.files(f)]
    assert REPORT_NAME in saved
    report = next(f.parent / "files" / REPORT_NAME for f in files if (f.parent / "files" / REPORT_NAME).exists())
    assert "preempted at step" in report.read_text()


def test_the_tracked_run_itself_was_not_disturbed(finished) -> None:
    run, summary = finished
    assert (summary["status"], summary["steps"], summary["preemptions"]) == ("completed", 60, 1)
    events = [json.loads(line) for line in (run.run_dir / "events.jsonl").read_text().splitlines()]
    assert not [e for e in events if e["event"] == "tracking_problem"]
    logs = "".join(p.read_text(errors="replace") for p in (run.run_dir / "launches").rglob("*.log"))
    assert "danlu tracking:" not in logs, "no tracker reported a problem"
    assert json.loads((run.run_dir / "work" / "meter.json").read_text())["preemptions"] == 1
