"""What every tracker backend does, and how the configured ones are built.

A backend is opened in the hub's thread (its import and start-up may take seconds: MLflow
imports ~3 s, W&B starts a service process) and is only ever called from that thread.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from runtime.tracking.launch import TrackingLaunch

__all__ = ["Backend", "build_backends"]


class Backend(Protocol):
    name: str

    def open(self, *, resumed_step: int | None) -> None:
        """Find the run's tracker run by its key (or start it).

        ``resumed_step``: a training launch's starting step (0 from scratch), after which it logs;
        None when the controller opens the tracker (set-up, rewind, the final report).
        """

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None: ...

    def set_tags(self, step: int, tags: dict[str, str]) -> None: ...

    def log_file(self, path: Path, name: str) -> None:
        """Attach a file (the run report) to the run."""

    def close(self) -> None: ...


def build_backends(launch: TrackingLaunch, *, cwd: str | os.PathLike[str] | None = None) -> list[Backend]:
    """One backend per configured tracker; nothing is imported yet (that happens in :meth:`Backend.open`)."""
    spec = launch.spec
    base = Path(cwd) if cwd is not None else Path.cwd()
    out: list[Backend] = []
    if spec.mlflow is not None:
        from runtime.tracking.mlflow_backend import MlflowBackend

        out.append(MlflowBackend(launch, spec.mlflow))
    if spec.wandb is not None:
        from runtime.tracking.wandb_backend import WandbBackend

        out.append(WandbBackend(launch, spec.wandb, base))
    if spec.tensorboard is not None:
        from runtime.tracking.tensorboard_backend import TensorboardBackend

        out.append(TensorboardBackend(launch, spec.tensorboard, base))
    return out
