"""MLflow: one MLflow run per danlu run, found again by its ``danlu.run`` tag on every launch.

Through :class:`mlflow.tracking.MlflowClient` rather than the fluent API, so the user's own
``mlflow.start_run()`` in the same process is left alone. Any store MLflow reaches works:
``sqlite:///mlflow.db`` (MLflow's default since 3.7), a ``file:`` directory, or a server.
"""

from __future__ import annotations

import time
from pathlib import Path

from danlu.extras import require
from planner.job_tracking import MlflowTracking
from runtime.tracking.launch import TrackingLaunch

__all__ = ["KEY_TAG", "MlflowBackend"]

KEY_TAG = "danlu.run"


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
        found = client.search_runs([experiment_id], filter_string=f"tags.`{KEY_TAG}` = '{self.launch.key}'",
                                   max_results=1)
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
