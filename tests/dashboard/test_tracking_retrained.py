"""What each tracker holds after a preemption that lost steps, read back with the tracker's own reader.

One real local `planner run` (module fixture): the first launch trains past its checkpoint at
step 10 to step 13 and parks there once the checkpoint committed and every tracker holds what it
logged (tests/dashboard/workers/park_then_train.py); the test then
reclaims its node the way ``--chaos`` does (:meth:`LocalProvider.preempt`: the notice on the
node's metadata server, the kill after the cloud's lead time), but only once the worker has
parked, so that the outcome does not depend on this machine's load. The parked worker cannot
honour the stop, so steps 11..13 are lost; the next launch resumes at 10 and trains 11..30
again. Every step logs ``launch``: 1 or 2, the launch that trained it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest

from planner.cli import main
from runtime.providers.local import LocalProvider
from runtime.tracking.launch import run_key
from runtime.tracking.wandb_backend import wandb_run_id
from tests.dashboard import wandb_records
from tests.run.helpers import REPO, write_catalog, write_job

pytestmark = pytest.mark.ddp

STEPS, EVERY, PARK = 30, 5, 13
KEPT = 10  # the last checkpoint before the park: where the second launch resumes
WORKER = Path(__file__).with_name("workers") / "park_then_train.py"


class _Reclaimer(threading.Thread):
    """Reclaims the first launch's node once its worker parked (with every tracker holding what it logged)."""

    def __init__(self, parked: Path):
        super().__init__(daemon=True)
        self.parked = parked
        self.providers: list[LocalProvider] = []
        self.launched: list = []
        self.done = threading.Event()
        self.reclaimed = False

    def run(self) -> None:
        while not self.done.wait(0.2):
            if self.parked.exists() and self.launched:
                self.providers[-1].preempt(self.launched[0][-1])
                self.reclaimed = True
                return


@pytest.fixture(scope="module")
def retrained(tmp_path_factory):
    base = tmp_path_factory.mktemp("retrained")
    tracking = base / "tracking"
    tracking.mkdir()
    extra = f"""
[tracking]
every_steps = 1

[tracking.mlflow]
tracking_uri = "sqlite:///{tracking / 'mlflow.db'}"
experiment = "retrained"

[tracking.wandb]
project = "retrained"
mode = "offline"
dir = "{tracking}"

[tracking.tensorboard]
log_dir = "{tracking / 'tb'}"
"""
    job = write_job(base / "job.toml", entrypoint=[sys.executable, str(WORKER), "--steps", str(STEPS),
                                                   "--park-at", str(PARK), "--tracking", str(tracking),
                                                   "--experiment", "retrained"],
                    steps=STEPS, nproc=1, extra=extra)
    run_dir = base / "runs" / "retrained"
    reclaimer = _Reclaimer(run_dir / "work" / "parked")
    real_from_context, real_run = LocalProvider.from_context.__func__, LocalProvider.run

    def from_context(cls, context):
        reclaimer.providers.append(real_from_context(cls, context))
        return reclaimer.providers[-1]

    def run(self, nodes, launch):
        started = real_run(self, nodes, launch)
        reclaimer.launched.append(started)
        return started

    with pytest.MonkeyPatch.context() as patch:
        # The workers inherit these: the checkpoint interval, and this repository for the worker's reads.
        patch.setenv("DANLU_CHECKPOINT_EVERY_STEPS", str(EVERY))
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        patch.setattr(LocalProvider, "from_context", classmethod(from_context))
        patch.setattr(LocalProvider, "run", run)
        patch.chdir(base)
        reclaimer.start()
        try:
            rc = main(["run", str(job), "--catalog", str(write_catalog(base / "catalog.csv")), "--run-dir",
                       str(run_dir), "--time-scale", "30", "--cooldown", "120"])
        finally:
            reclaimer.done.set()
            reclaimer.join(10)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert rc == 0 and reclaimer.reclaimed, [e for e in events if e["event"] in ("launch_end", "run_end")]
    logs = "".join(p.read_text(errors="replace") for p in (run_dir / "launches").rglob("*.log"))
    assert "danlu tracking:" not in logs and not [e for e in events if e["event"] == "tracking_problem"], logs
    first_end = next(e for e in events if e["event"] == "launch_end")
    # The premise: the first launch was reclaimed past its last checkpoint, and the next resumed there.
    assert first_end["outcome"] == "preempted" and first_end["committed_step"] == KEPT, first_end
    assert [e["start_step"] for e in events if e["event"] == "launch"] == [0, KEPT]
    return tracking, run_dir, events


def _by_step(points) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for step, value in points:
        out.setdefault(step, []).append(value)
    return out


def _retrained_win(values: dict[int, list[float]]) -> None:
    """One value per step, from the launch that went on for every step after the checkpoint."""
    assert sorted(values) == list(range(1, STEPS + 1))
    assert {s: v for s, v in values.items() if len(v) != 1} == {}
    assert all(values[s] == [1.0] for s in range(1, KEPT + 1))
    assert all(values[s] == [2.0] for s in range(KEPT + 1, STEPS + 1))


def test_tensorboard_shows_the_retrained_values_only(retrained) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracking, run_dir, _ = retrained
    logdir = tracking / "tb" / run_key(run_dir)
    assert len(list(logdir.glob("events.out.tfevents.*"))) >= 3  # both launches' files and the report's
    events = EventAccumulator(str(logdir))
    events.Reload()
    _retrained_win(_by_step((e.step, e.value) for e in events.Scalars("launch")))
    spend = sorted((e.step, e.value) for e in events.Scalars("danlu/spend_usd") if e.step < STEPS)
    assert [v for _, v in spend] == sorted(v for _, v in spend)


def test_mlflow_run_goes_on_with_the_retrained_values_and_keeps_the_lost_ones_nested(retrained) -> None:
    from mlflow.tracking import MlflowClient

    tracking, run_dir, events = retrained
    client = MlflowClient(tracking_uri=f"sqlite:///{tracking / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("retrained")
    runs = {r.info.run_id: r for r in client.search_runs([experiment.experiment_id])}
    [current] = [r for r in runs.values() if r.data.tags.get("danlu.run") == run_key(run_dir)]
    [lost] = [r for r in runs.values() if r.info.run_id != current.info.run_id]
    assert len(runs) == 2
    assert current.info.status == "FINISHED" and current.data.tags["danlu.status"] == "completed"
    _retrained_win(_by_step((m.step, m.value) for m in client.get_metric_history(current.info.run_id, "launch")))
    spend = sorted((m.step, m.value) for m in client.get_metric_history(current.info.run_id, "danlu/spend_usd"))
    assert [v for _, v in spend] == sorted(v for _, v in spend)

    # The lost launch's values are kept, in the run it wrote them to, nested under the one that went on.
    assert lost.info.status == "KILLED"
    tags = lost.data.tags
    assert tags["mlflow.parentRunId"] == current.info.run_id and tags["danlu.superseded"] == run_key(run_dir)
    assert tags["danlu.resumed_at_step"] == str(KEPT) and "danlu.run" not in tags
    history = _by_step((m.step, m.value) for m in client.get_metric_history(lost.info.run_id, "launch"))
    assert history == {s: [1.0] for s in range(1, PARK + 1)}
    [rewind] = [e for e in events if e["event"] == "tracking_rewind"]
    assert rewind["step"] == KEPT and lost.info.run_id in rewind["message"]


def test_wandb_offline_directories_hold_each_launchs_own_values(retrained) -> None:
    """W&B's history only grows in step order: nothing is rewound; each launch's directory keeps what it
    trained, and W&B's own rule (a value at a step the run has passed is ignored) decides what syncs."""
    tracking, run_dir, _ = retrained
    files = sorted((tracking / "wandb").glob(f"offline-run-*-{wandb_run_id(run_key(run_dir))}/run-*.wandb"))
    launches = [rows for rows in ([r for r in wandb_records.history(f) if "launch" in r] for f in files) if rows]
    # The lost launch's row of its last step was still pending (W&B writes a row when the next step
    # begins) when the reclaim killed it; the rows before it are on disk beside the re-trained ones.
    assert [[(r["_step"], r["launch"]) for r in rows] for rows in launches] == [
        [(s, 1.0) for s in range(1, PARK)],
        [(s, 2.0) for s in range(KEPT + 1, STEPS + 1)],
    ]
