"""Whether each tracker already holds a step, read while a run writes it (MLflow's client, TensorBoard's
EventAccumulator, the W&B offline run files): for the retrained-steps test and its worker."""

from __future__ import annotations

from pathlib import Path

# Imported here, not in holds(): the worker imports this module before its session starts, and an
# import of mlflow on the training thread while the session's tracker thread imports it too fails
# (a partially initialised module).
from mlflow.tracking import MlflowClient
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from runtime.tracking.wandb_backend import wandb_run_id
from tests.dashboard import wandb_records

METRIC = "launch"


def holds(tracking: Path, key: str, step: int, *, experiment: str) -> bool:
    """MLflow, TensorBoard and W&B under ``tracking`` hold ``launch`` at ``step`` of the danlu run ``key``.

    W&B writes a step's row when the next step is logged or the run finishes, so there the
    step before must be in (a torn tail of a file being written reads as not yet).
    """
    client = MlflowClient(tracking_uri=f"sqlite:///{tracking / 'mlflow.db'}")
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id], filter_string=f"tags.`danlu.run` = '{key}'") if found else []
    if not any(m.step == step for r in runs for m in client.get_metric_history(r.info.run_id, METRIC)):
        return False
    if not (tracking / "tb" / key).is_dir():  # TensorBoard opens in its own thread, maybe after MLflow logged
        return False
    events = EventAccumulator(str(tracking / "tb" / key))
    events.Reload()
    if METRIC not in events.Tags()["scalars"] or step not in {e.step for e in events.Scalars(METRIC)}:
        return False
    try:
        rows = [r for f in (tracking / "wandb").glob(f"offline-run-*-{wandb_run_id(key)}/run-*.wandb")
                for r in wandb_records.history(f)]
    except Exception:  # noqa: BLE001 -- a record half-written
        return False
    return any(r.get("_step") == step - 1 and METRIC in r for r in rows)
