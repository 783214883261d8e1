"""Weights & Biases: the run id is derived from danlu's run key, so every launch resumes one W&B run.

``mode = "offline"`` writes ``<dir>/wandb/offline-run-<time>-<id>/`` (one per launch, all with
the run's id: ``wandb sync`` uploads them into the one run); ``online`` needs ``WANDB_API_KEY``
in the environment. W&B's console capture and system-metrics sampling are switched off:
the training log stays the user's, and the tracker costs no CPU between logged steps.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from danlu.extras import require
from planner.job_tracking import WandbTracking
from runtime.tracking.launch import TrackingLaunch

__all__ = ["WandbBackend", "wandb_run_id"]


def wandb_run_id(key: str) -> str:
    """W&B run ids allow no ``/\\#?%:`` and at most 64 characters; a hash of the key has neither problem."""
    return "danlu-" + hashlib.sha256(key.encode()).hexdigest()[:16]


class WandbBackend:
    name = "wandb"

    def __init__(self, launch: TrackingLaunch, config: WandbTracking, cwd: Path):
        self.launch = launch
        self.config = config
        self.dir = (cwd / config.dir) if config.dir else cwd
        self.run = None

    def open(self, *, resumed_step: int | None) -> None:
        wandb = require("wandb", "wandb", feature="[tracking.wandb]")
        self.dir.mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(silent=True, console="off", x_disable_stats=True, x_disable_meta=True)
        self.run = wandb.init(project=self.config.project, entity=self.config.entity, mode=self.config.mode,
                              dir=str(self.dir), id=wandb_run_id(self.launch.key), name=self.launch.key,
                              resume="allow", settings=settings, reinit="create_new",
                              config={"danlu.run": self.launch.key, "danlu.job": self.launch.job,
                                      "danlu.run_dir": self.launch.run_dir})

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def set_tags(self, step: int, tags: dict[str, str]) -> None:
        self.run.config.update(tags, allow_val_change=True)

    def log_file(self, path: Path, name: str) -> None:
        # A copy inside the run's files/: wandb.save of an outside path only links it.
        target = Path(self.run.dir) / name
        shutil.copyfile(path, target)
        self.run.save(str(target), base_path=self.run.dir, policy="now")

    def finish(self, status: str) -> None:
        self.run.finish(exit_code=0 if status == "FINISHED" else 1)
        self.run = None

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None
