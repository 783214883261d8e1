"""MLflow: one MLflow run per danlu run, found again by its ``danlu.run`` tag on every launch.

Through :class:`mlflow.tracking.MlflowClient` rather than the fluent API, so the user's own
``mlflow.start_run()`` in the same process is left alone. Any store MLflow reaches works:
``sqlite:///mlflow.db`` (MLflow's default since 3.7), a ``file:`` directory, or a server.

MLflow keeps every value logged at a step (a metric's history is append-only; there is no
call that replaces or deletes one), so the steps a lost launch trained past its last
checkpoint, trained again after the resume, would hold two values each. :meth:`MlflowBackend.rewind`
does what W&B calls rewinding a run, with MLflow's public API: a new MLflow run takes over
the danlu run's tag with the history up to the checkpoint copied, and the old one -- the lost
launch's values included -- is kept nested under it (``mlflow.parentRunId``), tagged
``danlu.superseded``, status KILLED.
"""

from __future__ import annotations

import time
from pathlib import Path

from danlu.extras import require
from planner.job_tracking import MlflowTracking
from runtime.tracking.launch import TrackingLaunch

__all__ = ["KEY_TAG", "REWINDING_TAG", "SUPERSEDED_TAG", "MlflowBackend"]

KEY_TAG = "danlu.run"
REWINDING_TAG = "danlu.rewinding"  # a copy under way: not the run's yet (a crash leaves it to be deleted)
SUPERSEDED_TAG = "danlu.superseded"
BATCH = 1000  # MLflow's limit of metrics per log_batch


class MlflowBackend:
    name = "mlflow"
    needs_setup = True  # the store's tables: see runtime.tracking.setup

    def __init__(self, launch: TrackingLaunch, config: MlflowTracking):
        self.launch = launch
        self.config = config
        self.client = None
        self.run_id: str | None = None

    def open(self, *, resumed_step: int | None) -> None:
        require("mlflow", "mlflow", feature="[tracking.mlflow]")
        from mlflow.tracking import MlflowClient

        self.client = client = MlflowClient(tracking_uri=self.config.tracking_uri)
        name = self.config.experiment or self.launch.job
        experiment = client.get_experiment_by_name(name)
        if experiment is not None:
            experiment_id = experiment.experiment_id
        else:
            experiment_id = client.create_experiment(name, artifact_location=self._artifact_location())
        # The key holds only [A-Za-z0-9._-] (launch.run_key): safe inside the quoted filter.
        # The newest, should a rewind have stopped between tagging the new run and untagging the old.
        found = client.search_runs([experiment_id], filter_string=f"tags.`{KEY_TAG}` = '{self.launch.key}'",
                                   max_results=1, order_by=["attributes.start_time DESC"])
        if found:
            self.run_id = found[0].info.run_id
            if found[0].info.status != "RUNNING":
                client.update_run(self.run_id, status="RUNNING")
        else:
            tags = {KEY_TAG: self.launch.key, "danlu.job": self.launch.job, "danlu.run_dir": self.launch.run_dir}
            self.run_id = client.create_run(experiment_id, run_name=self.launch.key, tags=tags).info.run_id

    def _artifact_location(self) -> str | None:
        """Where a new experiment keeps its files: as configured, else beside a sqlite store.

        MLflow's own default is ``./mlruns`` of whatever directory the training started in,
        which scatters one run's report over the working directories of its launches.
        """
        if self.config.artifact_location:
            return self.config.artifact_location
        uri = self.config.tracking_uri or ""
        if uri.startswith("sqlite:///"):
            return (Path(uri.removeprefix("sqlite:///")).resolve().parent / "mlartifacts").as_uri()
        return None

    def rewind(self, step: int) -> str | None:
        """Drop the values past ``step`` from the run's view (see the module docstring); None when it holds none.

        Idempotent, and safe to repeat after a crash at any point: a half-made copy carries only
        ``danlu.rewinding`` and is deleted by the next rewind.
        """
        from mlflow.entities import Metric, Param, RunTag

        client, key = self.client, self.launch.key
        old = client.get_run(self.run_id)
        if not any(m.step > step for m in old.to_proto().data.metrics):  # the latest value of each metric
            return None
        experiment_id = old.info.experiment_id
        for stale in client.search_runs([experiment_id], filter_string=f"tags.`{REWINDING_TAG}` = '{key}'"):
            client.delete_run(stale.info.run_id)
        tags = {k: v for k, v in old.data.tags.items() if not k.startswith("mlflow.") and k != KEY_TAG}
        new_id = client.create_run(experiment_id, run_name=old.info.run_name,
                                   tags={**tags, REWINDING_TAG: key}).info.run_id
        kept = [Metric(m.key, m.value, m.timestamp, m.step)
                for name in old.data.metrics for m in client.get_metric_history(self.run_id, name) if m.step <= step]
        for i in range(0, len(kept), BATCH):
            client.log_batch(new_id, metrics=kept[i:i + BATCH])
        params = [Param(k, v) for k, v in old.data.params.items()]
        for i in range(0, len(params), 100):  # MLflow's limit of params per log_batch
            client.log_batch(new_id, params=params[i:i + 100])
        client.set_tag(new_id, KEY_TAG, key)
        client.delete_tag(new_id, REWINDING_TAG)
        superseded = client.search_runs(
            [experiment_id], filter_string=f"tags.`{SUPERSEDED_TAG}` = '{key}'") + [old]
        for run in superseded:  # every earlier rewind's run too: all nested under the run that goes on
            client.set_tag(run.info.run_id, "mlflow.parentRunId", new_id)
        client.delete_tag(self.run_id, KEY_TAG)
        client.log_batch(self.run_id, tags=[RunTag(SUPERSEDED_TAG, key), RunTag("danlu.superseded_by", new_id),
                                            RunTag("danlu.resumed_at_step", str(step))])
        client.set_terminated(self.run_id, status="KILLED")
        client.update_run(self.run_id, name=f"{old.info.run_name} (superseded at step {step})")
        lost, self.run_id = self.run_id, new_id
        return (f"mlflow run {lost} holds values past step {step} that the launch resuming there trains again: "
                f"run {new_id} goes on with its {len(kept)} values up to step {step}, {lost} is kept nested under it")

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in metrics.items()])

    def set_tags(self, step: int, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in tags.items()])

    def log_file(self, path: Path, name: str) -> None:
        self.client.log_artifact(self.run_id, str(path))

    def finish(self, status: str) -> None:
        """End the MLflow run: FINISHED, FAILED or KILLED (the controller's last word)."""
        self.client.set_terminated(self.run_id, status=status)

    def close(self) -> None:
        self.client = None
