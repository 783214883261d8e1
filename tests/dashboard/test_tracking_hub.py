"""The session's side of tracking, in-process: what is logged at which step, and trackers that fail."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from planner.cli import main
from planner.job_tracking import Tracking
from runtime.errors import ContractError
from runtime.tracking.hub import TrackerHub
from runtime.tracking.launch import ENV_TRACKING, TrackingLaunch, run_key
from runtime.tracking.meter import Meter, write_meter
from runtime.tracking.session_hook import SessionTracking


class Recorder:
    """A tracker backend that keeps what it is given."""

    name = "recorder"

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.closed = threading.Event()

    def open(self, *, resumed_step):
        self.calls.append(("open", resumed_step))

    def log_metrics(self, step, metrics):
        self.calls.append(("metrics", step, metrics))

    def set_tags(self, step, tags):
        self.calls.append(("tags", step, tags))

    def log_file(self, path, name):
        self.calls.append(("file", name))

    def close(self):
        self.closed.set()


class Broken(Recorder):
    name = "broken"

    def log_metrics(self, step, metrics):
        raise ConnectionError("store unreachable")


def _meter(work: Path, **changes) -> None:
    fields = {"t": 1.0, "spent_usd": 0.5, "burn_usd_per_hour": 0.18, "forecast_usd": 2.0, "budget_usd": 5.0,
              "preemptions": 1, "replans": 1, "lost_steps": 3, "launch": "l-2", "pool": "1x n1 spot gcp:us-central1",
              "purchase": "spot", "cloud": "gcp", "region": "us-central1", "instance_type": "n1"}
    write_meter(work, Meter(**{**fields, **changes}))


def test_a_failing_tracker_is_reported_once_and_the_others_go_on() -> None:
    reports: list[str] = []
    good, bad = Recorder(), Broken()
    hub = TrackerHub([bad, good], report=reports.append)
    for step in range(1, 51):
        hub.log_metrics(step, {"loss": 1.0 / step})
    assert hub.close(timeout_s=60)
    assert len(reports) == 1 and reports[0].startswith("broken failed (log_metrics: ConnectionError")
    assert "training goes on without it" in reports[0]
    assert [c[1] for c in good.calls if c[0] == "metrics"] == list(range(1, 51))
    assert good.closed.is_set() and not bad.closed.is_set()  # a failed tracker is left alone, not even closed


def test_a_missing_extra_is_one_line_naming_the_pip_install(monkeypatch, tmp_path) -> None:
    from runtime.tracking.mlflow_backend import MlflowBackend

    monkeypatch.setitem(__import__("sys").modules, "mlflow", None)  # import mlflow -> ImportError
    launch = TrackingLaunch(key="k", job="j", run_dir=str(tmp_path), spec=Tracking(mlflow={}))
    reports: list[str] = []
    hub = TrackerHub([MlflowBackend(launch, launch.spec.mlflow)], report=reports.append)
    for step in range(1, 11):
        hub.log_metrics(step, {"loss": 1.0})
    assert hub.close(timeout_s=60)
    assert len(reports) == 1, "once, however many records follow"
    assert reports[0].startswith("mlflow failed (open: MissingExtra: [tracking.mlflow] needs mlflow, which is not "
                                 "installed. To fix: pip install 'danlu[mlflow]'")
    assert reports[0].endswith("training goes on without it")


def test_a_tracker_slower_than_training_never_holds_it_up() -> None:
    release = threading.Event()

    class Stuck(Recorder):
        name = "stuck"

        def open(self, *, resumed_step):
            release.wait(120)

    reports: list[str] = []
    hub = TrackerHub([Stuck()], max_queue=5, report=reports.append)
    for step in range(100):  # returns at once although the tracker takes nothing
        hub.log_metrics(step, {"loss": 0.0})
    assert reports == ["stuck falls behind the training; its records are being dropped"]
    release.set()
    assert hub.close(timeout_s=60)


def test_trackers_open_one_after_another() -> None:
    # Two heavy imports in parallel threads are much slower on a loaded machine than in turn.
    opening = threading.Lock()
    overlaps: list[str] = []

    class Exclusive(Recorder):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        def open(self, *, resumed_step):
            if not opening.acquire(blocking=False):
                overlaps.append(self.name)
                return
            try:
                time.sleep(0.3)  # an import
                super().open(resumed_step=resumed_step)
            finally:
                opening.release()

    backends = [Exclusive(f"t{i}") for i in range(3)]
    hub = TrackerHub(backends, report=pytest.fail)
    hub.log_metrics(1, {"loss": 1.0})
    assert hub.close(timeout_s=60)
    assert overlaps == []
    assert all(b.calls == [("open", None), ("metrics", 1, {"loss": 1.0})] for b in backends)


def test_a_tracker_slow_to_open_holds_up_no_other_tracker() -> None:
    release = threading.Event()

    class SlowToOpen(Recorder):
        name = "slow"

        def open(self, *, resumed_step):
            release.wait(120)  # MLflow starting its store, W&B logging in
            super().open(resumed_step=resumed_step)

    class Waited(Recorder):
        name = "waited"

        def __init__(self) -> None:
            super().__init__()
            self.got_last = threading.Event()

        def log_metrics(self, step, metrics):
            super().log_metrics(step, metrics)
            if step == 20:
                self.got_last.set()

    slow, fast = SlowToOpen(), Waited()
    hub = TrackerHub([slow, fast], open_grace_s=0.5, report=pytest.fail)
    for step in range(1, 21):
        hub.log_metrics(step, {"loss": 1.0 / step})
    assert fast.got_last.wait(60), "the other tracker's records wait for the slow one's open"
    assert slow.calls == [], "the slow tracker is still opening"
    release.set()
    assert hub.close(timeout_s=60)
    for backend in (slow, fast):  # both get everything, in order, and are closed
        assert [c[1] for c in backend.calls if c[0] == "metrics"] == list(range(1, 21))
        assert backend.closed.is_set()


def test_close_gives_up_on_a_hung_tracker_and_names_it() -> None:
    release = threading.Event()

    class Hung(Recorder):
        name = "hung"

        def log_metrics(self, step, metrics):
            release.wait(120)

    reports: list[str] = []
    good = Recorder()
    hub = TrackerHub([Hung(), good], report=reports.append)
    hub.log_metrics(1, {"loss": 1.0})
    assert not hub.close(timeout_s=1)
    assert reports == ["gave up on hung after 1 s with records still queued; training was not held up"]
    assert good.closed.is_set(), "the healthy tracker was delivered and closed all the same"
    release.set()


def test_danlus_figures_go_beside_the_users_metrics_at_the_same_step(tmp_path) -> None:
    work = tmp_path / "work"
    launch = TrackingLaunch(key="k", job="j", run_dir=str(tmp_path), spec=Tracking(every_steps=5, tensorboard={
        "log_dir": "tb"}))
    backend = Recorder()
    tracking = SessionTracking(launch, TrackerHub([backend], report=pytest.fail), work)
    tracking.on_step(3, 0.9)  # before the controller wrote a meter, not a logged step
    tracking.on_step(5, 0.8)  # logged, no meter yet: the loss alone
    _meter(work)
    tracking.on_step(10, 0.7)
    tracking.log(10, {"lr": 0.01})  # the user's metric at the same step: danlu's figures not repeated
    _meter(work, spent_usd=0.9, pool="1x p3 on_demand aws:us-east-1", purchase="on_demand", launch="l-3")
    tracking.log(12, {"accuracy": 0.5})
    tracking.on_step(15, 0.6)
    tracking.close(timeout_s=60)
    metrics = [(c[1], c[2]) for c in backend.calls if c[0] == "metrics"]
    assert metrics[0] == (5, {"loss": 0.8})
    assert metrics[1][0] == 10 and metrics[1][1]["loss"] == 0.7 and metrics[1][1]["danlu/spend_usd"] == 0.5
    assert metrics[1][1]["danlu/forecast_budget_fraction"] == pytest.approx(0.4)
    assert metrics[2] == (10, {"lr": 0.01})
    assert metrics[3][0] == 12 and metrics[3][1]["accuracy"] == 0.5 and metrics[3][1]["danlu/spend_usd"] == 0.9
    assert metrics[4][0] == 15 and metrics[4][1]["danlu/lost_steps"] == 3.0
    tags = [(c[1], c[2]["danlu.purchase"]) for c in backend.calls if c[0] == "tags"]
    assert tags == [(10, "spot"), (12, "on_demand")], "tags are sent when the pool changes, not at every step"


def test_the_launch_variable_round_trips_and_keys_tell_same_named_runs_apart(tmp_path) -> None:
    launch = TrackingLaunch(key=run_key(tmp_path / "a" / "run"), job="j", run_dir=str(tmp_path),
                            spec=Tracking(wandb={"project": "p", "mode": "offline"}))
    assert TrackingLaunch.from_env(launch.to_env()) == launch
    assert TrackingLaunch.from_env({}) is None
    assert run_key(tmp_path / "a" / "run") != run_key(tmp_path / "b" / "run")
    assert run_key(tmp_path / "<b>x'y").startswith("b_x_y-")
    with pytest.raises(ContractError, match=ENV_TRACKING):
        TrackingLaunch.from_env({ENV_TRACKING: '{"key": 1}'})


def test_tracking_section_errors_name_the_key(tmp_path, capsys) -> None:
    job = tmp_path / "job.toml"
    job.write_text('name = "x"\n[workload]\nsteps = 5\n[workload.throughput]\nT4 = 1\n'
                   '[tracking.wandb]\nproject = "p"\nmode = "sometimes"\n'
                   '[tracking.mlflow]\ntracking_uri = "https://me:secret@mlflow.example"\n')
    assert main(["quote", str(job)]) == 2
    err = capsys.readouterr().err
    assert "tracking.wandb.mode" in err and "tracking.mlflow.tracking_uri" in err
    assert "secret" not in err


def test_a_launch_that_starts_over_after_a_lost_one_replaces_its_tensorboard_values(tmp_path) -> None:
    """No checkpoint had committed when the first launch was lost: the next one trains from step 0 again,
    and TensorBoard shows its values only (the restart marker at step 1, as after a resume at N)."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from runtime.tracking.session_hook import open_for_session

    launch = TrackingLaunch(key="k", job="j", run_dir=str(tmp_path), spec=Tracking(every_steps=1, tensorboard={
        "log_dir": str(tmp_path / "tb")}))
    for number, steps in ((1.0, range(1, 6)), (2.0, range(1, 9))):
        tracking = open_for_session(tmp_path / "work", resumed_step=None, environ=launch.to_env())
        for step in steps:
            tracking.log(step, {"launch": number})
        tracking.close(timeout_s=60)
    events = EventAccumulator(str(tmp_path / "tb" / "k"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("launch")] == [(s, 2.0) for s in range(1, 9)]


def test_an_mlflow_rewind_is_idempotent_and_clears_a_copy_a_crash_left(tmp_path, monkeypatch) -> None:
    pytest.importorskip("mlflow")
    from mlflow.entities import Param
    from mlflow.tracking import MlflowClient

    from runtime.tracking.mlflow_backend import KEY_TAG, REWINDING_TAG, SUPERSEDED_TAG, MlflowBackend

    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    launch = TrackingLaunch(key="k", job="j", run_dir=str(tmp_path), spec=Tracking(mlflow={
        "tracking_uri": uri, "experiment": "e"}))
    backend = MlflowBackend(launch, launch.spec.mlflow)
    backend.open(resumed_step=0)
    for step in range(1, 8):
        backend.log_metrics(step, {"loss": 1.0 / step})
    backend.client.log_batch(backend.run_id, params=[Param("lr", "0.1")])
    first = backend.run_id
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("e").experiment_id
    half = client.create_run(experiment, tags={REWINDING_TAG: "k"}).info.run_id  # a rewind that crashed mid-copy

    assert backend.rewind(7) is None  # nothing past step 7: nothing to do
    assert "goes on with its 4 values up to step 4" in backend.rewind(4)
    assert backend.rewind(4) is None  # done already
    second = backend.run_id
    assert client.get_run(half).info.lifecycle_stage == "deleted"
    assert [(m.step, m.value) for m in client.get_metric_history(second, "loss")] == [
        (s, 1.0 / s) for s in range(1, 5)]
    assert client.get_run(second).data.params == {"lr": "0.1"} and client.get_run(second).data.tags[KEY_TAG] == "k"
    for step in range(5, 7):
        backend.log_metrics(step, {"loss": 0.5})
    assert "goes on with its 5 values up to step 5" in backend.rewind(5)  # a second preemption
    third = backend.run_id
    live = client.search_runs([experiment])
    assert {r.info.run_id for r in live} == {first, second, third}
    assert {r.info.run_id: r.data.tags.get("mlflow.parentRunId") for r in live if r.info.run_id != third} == {
        first: third, second: third}, "every superseded run is nested under the run that goes on"
    assert all(r.data.tags.get(SUPERSEDED_TAG) == "k" for r in live if r.info.run_id != third)
    found = client.search_runs([experiment], filter_string=f"tags.`{KEY_TAG}` = 'k'")
    assert [r.info.run_id for r in found] == [third]
    backend.close()
