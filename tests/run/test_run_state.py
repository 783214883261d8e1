"""The run directory's files: state round trip, event log, plan files, CLI refusals (no processes)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from planner.cli import main
from planner.job import load_job
from pricing.pool import Pool
from runtime.control.clock import ManualClock, WallClock
from runtime.control.events import EventLog, read_events
from runtime.control.run_start import new_state, plan_pool
from runtime.control.run_state import LaunchRecord, RunStateError, load_state, save_state
from runtime.control.run_summary import write_summary
from tests.run.helpers import write_catalog, write_job

POOL = Pool("aws", "us-east-1", "use1-az1", "g4dn.xlarge", "T4", 1, "spot", 0.16)


def _state(tmp_path: Path, **changes):
    job_path = write_job(tmp_path / "job.toml", entrypoint=["python", "train.py"], **changes)
    return new_state(job_path=job_path, job=load_job(job_path), run_dir=tmp_path / "run", catalog=None,
                     provider="local", time_scale=60, policy="danlu", chaos=["at=20s"])


def test_sim_clock_scales_from_its_origin() -> None:
    clock = WallClock(origin=1000.0, scale=60)
    assert clock.sim(1000.0) == 1000.0
    assert clock.sim(1010.0) == 1600.0
    assert clock.real_seconds(120) == 2
    manual = ManualClock(origin=1000.0, scale=60)
    manual.sleep(10)
    assert (manual.wall(), manual.now()) == (1010.0, 1600.0)
    assert ManualClock(origin=1000.0, scale=60, at=1020.0).now() == 2200.0


def test_state_round_trips_through_the_file(tmp_path: Path) -> None:
    state = _state(tmp_path)
    state.launches.append(LaunchRecord(launch_id="l-1", pool=POOL, nodes=1, world_size=2, start_step=0,
                                       provisioned_at=5.0, hosts=[{"id": "l-1-n0"}]))
    state.cooling["aws:x:y"] = 12.5
    state.refuse(Pool("aws", "us-east-1", None, "g4dn.xlarge", "T4", 1, "on_demand", 0.526), 30.0)
    save_state(tmp_path / "run", state)
    loaded = load_state(tmp_path / "run")
    assert loaded == state
    assert loaded.refused_at(29.0) == {("aws:us-east-1:g4dn.xlarge", "on_demand")}
    assert loaded.refused_at(30.0) == frozenset()  # the cool-down is over
    # A state written before `refused` existed reads as one with nothing refused.
    path = tmp_path / "run" / "state.json"
    path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "refused"}))
    assert load_state(tmp_path / "run").refused == {}
    assert (tmp_path / "run" / "state.json").stat().st_mode & 0o777 == 0o600
    assert loaded.checkpoint_dir == str((tmp_path / "run" / "ckpt").resolve())


def test_the_rate_a_run_plans_with_blends_its_measurement_with_the_table_by_steps_seen(tmp_path: Path) -> None:
    # A loaded machine ran the first steps at half speed: two steps must not halve every forecast.
    state = _state(tmp_path, speed=0.85)
    table = state.known_rate(load_job(tmp_path / "job.toml"), POOL, 1)
    job = load_job(tmp_path / "job.toml")
    assert table == pytest.approx(0.85 * 3600)
    state.learn_throughput(POOL, 1, units=2, hours=2 / (table / 2), steps=2)
    glance = state.known_rate(job, POOL, 1)
    assert table * 0.98 < glance < table
    state.learn_throughput(POOL, 1, units=4000, hours=4000 / (table / 2), steps=4000)
    settled = state.known_rate(job, POOL, 1)
    assert table / 2 < settled < table * 0.55


def test_a_new_run_directory_and_its_state_are_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        state = _state(tmp_path)
        write_summary(tmp_path / "run", {"job": state.job["name"]})
    finally:
        os.umask(old)
    assert (tmp_path / "run").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "run" / "state.json").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "run" / "summary.json").stat().st_mode & 0o777 == 0o600


def test_a_run_directory_is_never_started_twice(tmp_path: Path) -> None:
    _state(tmp_path)
    with pytest.raises(RunStateError, match="--resume"):
        _state(tmp_path)


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "no run state here"), ("{nope", "not a run state"), ('{"format": 9}', "state format 9")],
)
def test_unreadable_states_say_what_to_do(tmp_path: Path, text: str, message: str) -> None:
    if text:
        (tmp_path / "state.json").write_text(text)
    with pytest.raises(RunStateError, match=message):
        load_state(tmp_path)


def test_jobs_planner_run_cannot_follow_are_refused(tmp_path: Path) -> None:
    job_path = write_job(tmp_path / "job.toml", entrypoint=[])
    with pytest.raises(RunStateError, match="run.entrypoint is empty"):
        new_state(job_path=job_path, job=load_job(job_path), run_dir=tmp_path / "run", catalog=None,
                  provider="local", time_scale=1, policy="danlu", chaos=[])


def test_plan_files_name_the_missing_key() -> None:
    with pytest.raises(RunStateError, match="plan.phases"):
        plan_pool({"plan": {"phases": []}}, source="plan.json")
    with pytest.raises(RunStateError, match="key 'nodes'"):
        plan_pool({"phases": [{"cloud": "aws", "region": "r", "instance_type": "t", "gpu": "T4",
                               "gpus_per_node": 1, "purchase": "spot", "hourly_usd": 1}]}, source="plan.json")
    pool, nodes = plan_pool({"plan": {"phases": [{"cloud": "aws", "region": "r", "zone": "z", "instance_type": "t",
                                           "gpu": "T4", "gpus_per_node": 1, "nodes": 2, "purchase": "spot",
                                           "hourly_usd": 1.5}]}}, source="plan.json")
    assert pool == Pool("aws", "r", "z", "t", "T4", 1, "spot", 1.5) and pool.id == "aws:r/z:t" and nodes == 2


def test_a_plan_the_jobs_constraints_rule_out_is_refused_before_anything_runs(tmp_path: Path) -> None:
    # The helpers' job: max_nodes = 1, spot and on-demand, any cloud and region.
    job_path = write_job(tmp_path / "job.toml", entrypoint=["python", "train.py"], allow=("spot",))
    job = load_job(job_path)
    spot = {**POOL.to_dict(), "nodes": 1}
    plans = {
        "over constraints.max_nodes = 1": {"job": "digits-test", "plan": {"phases": [{**spot, "nodes": 4}]}},
        "buys on_demand, not in purchase.allow": {"phases": [{**spot, "zone": None, "purchase": "on_demand"}]},
        "quoted for job 'gpt-7b-finetune', not 'digits-test'": {"job": "gpt-7b-finetune", "plan": {"phases": [spot]}},
    }
    for i, (message, plan) in enumerate(plans.items()):
        path = tmp_path / f"plan-{i}.json"
        path.write_text(json.dumps(plan))
        with pytest.raises(RunStateError, match=message):
            new_state(job_path=job_path, job=job, run_dir=tmp_path / f"run-{i}", catalog=None, provider="local",
                      time_scale=60, policy="danlu", chaos=[], plan_path=path)
        assert not (tmp_path / f"run-{i}").exists()  # nothing written for a refused plan
    path = tmp_path / "good.json"
    # A later phase is re-planned under the job's constraints: only the first one is checked.
    path.write_text(json.dumps({"job": "digits-test", "plan": {"phases": [spot, {"cloud": "aws", "nodes": 9}]}}))
    state = new_state(job_path=job_path, job=job, run_dir=tmp_path / "run", catalog=None, provider="local",
                      time_scale=60, policy="danlu", chaos=[], plan_path=path)
    assert state.pool == POOL


def test_event_log_survives_a_torn_last_line(tmp_path: Path) -> None:
    log = EventLog(tmp_path, clock=lambda: 100.0)
    log.emit("run_started", job="x")
    log.close()
    with (tmp_path / "events.jsonl").open("a") as f:
        f.write('{"seq": 1, "event": "node_u')  # SIGKILL mid-write
    assert [e["event"] for e in read_events(tmp_path / "events.jsonl")] == ["run_started"]
    log = EventLog(tmp_path, clock=lambda: 200.0)
    record = log.emit("run_resumed", t=150.0)
    log.close()
    events = read_events(tmp_path / "events.jsonl")
    assert [e["event"] for e in events] == ["run_started", "run_resumed"]
    assert record["seq"] == 1 and events[-1]["t"] == 150.0 and events[0]["t"] == 100.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--provider", "nocloud"], "provider 'nocloud' is not registered; registered providers: "),
        (["--chaos", "when=3s"], "--chaos"),
        (["--chaos", "at=soon"], "not a duration"),
        (["--deadline-in", "2"], "--deadline-in goes with --resume RUN_DIR"),
    ],
)
def test_cli_refuses_bad_options_before_starting(tmp_path: Path, capsys, argv: list[str], message: str) -> None:
    job = write_job(tmp_path / "job.toml", entrypoint=["python", "train.py"])
    assert main(["run", str(job), "--run-dir", str(tmp_path / "run"), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_an_infeasible_job_ends_without_launching(tmp_path: Path, capsys) -> None:
    catalog = write_catalog(tmp_path / "catalog.csv")
    (tmp_path / "train.py").write_text("")  # never run: nothing is launched
    job = write_job(tmp_path / "job.toml", entrypoint=["python", str(tmp_path / "train.py")], budget_usd=0.0001)
    run_dir = tmp_path / "run"
    assert main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(run_dir), "--json"]) == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "infeasible" and "the job cannot be planned" in summary["cause"]
    assert "budget_usd" in summary["cause"]  # the smallest relaxation, as `planner quote` words it
    assert summary["launches"] == [] and summary["cost_usd"] == 0
    out = capsys.readouterr().out
    assert json.loads(out[out.index("\n{\n") + 1:]) == summary
    assert oct(os.stat(run_dir / "summary.json").st_mode & 0o777) == "0o600"  # the run's own: owner only


def _no_budget_run(tmp_path: Path) -> Path:
    job_path = write_job(tmp_path / "job.toml", entrypoint=["python", "train.py"])
    job_path.write_text(job_path.read_text().replace("budget_usd = 5.0\n", ""))
    catalog = write_catalog(tmp_path / "catalog.csv")
    new_state(job_path=job_path, job=load_job(job_path), run_dir=tmp_path / "run", catalog=str(catalog),
              provider="local", time_scale=60, policy="danlu", chaos=[])
    return tmp_path / "run"


@pytest.mark.parametrize(("flag", "value"), [
    *(("--budget-usd", v) for v in ("-5", "0", "nan")),
    *(("--deadline-in", v) for v in ("-1", "0", "nan", "inf")),
])
def test_a_resume_with_a_bad_budget_or_deadline_is_refused_and_the_run_stays_resumable(
    tmp_path: Path, capsys, flag: str, value: str,
) -> None:
    from tests.run.fake_run import open_run, script

    run_dir = _no_budget_run(tmp_path)
    before = (run_dir / "state.json").read_bytes()
    assert main(["run", "--resume", str(run_dir), flag, value]) == 2
    err = capsys.readouterr().err
    assert f"{flag} {value}" in err and "must be a positive number" in err and "Traceback" not in err
    assert (run_dir / "state.json").read_bytes() == before
    assert open_run(run_dir, script()).run()["status"] == "completed"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s.update(status="bogus"), "status: Input should be 'running'"),
        (lambda s: s.update(time_scale=0), "time_scale: Input should be greater than 0"),
        (lambda s: s.update(policy="yolo"), "policy: Value error, unknown policy 'yolo'"),
        (lambda s: s["job"]["constraints"].update(budget_usd=-5), "job: Value error, the job does not validate: "
                                                                  "constraints.budget_usd"),
        (lambda s: s.update(pool={**POOL.to_dict(), "purchase": "lease"}, nodes=1), "pool: Value error, purchase="),
        (lambda s: s.update(pool=POOL.to_dict(), nodes=None), "keys 'pool' and 'nodes' go together"),
        (lambda s: s.update(launches=[{"launch_id": "l-1", "pool": POOL.to_dict(), "nodes": 0, "world_size": 1,
                                       "start_step": 0, "provisioned_at": 1.0}]),
         "launches.0.nodes: Input should be greater than or equal to 1"),
        (lambda s: s.update(surprise=1), "surprise: Extra inputs are not permitted"),
    ],
)
def test_a_bad_state_file_is_refused_naming_the_key(tmp_path: Path, change, message: str) -> None:
    _state(tmp_path)
    path = tmp_path / "run" / "state.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    with pytest.raises(RunStateError, match=re.escape(message)):
        load_state(tmp_path / "run")


def test_a_bad_value_never_reaches_the_file(tmp_path: Path) -> None:
    state = _state(tmp_path)
    with pytest.raises(ValidationError, match="status"):
        state.status = "bogus"
    with pytest.raises(ValidationError, match="budget_usd"):
        state.job = {**state.job, "constraints": {**state.job["constraints"], "budget_usd": -5}}
    state.cooling["aws:x:y"] = float("nan")  # a nested change is caught when the state is written
    with pytest.raises(RunStateError, match="refusing to write an invalid run state: cooling.aws:x:y"):
        save_state(tmp_path / "run", state)
    assert load_state(tmp_path / "run").cooling == {}


def test_plan_files_with_held_and_reserved_pools_are_runnable(tmp_path: Path) -> None:
    for purchase, extra in [("reserved_held", {"term_hours": 100.0}), ("reserved_3y", {"term_usd": 9.0})]:
        pool, nodes = plan_pool({"phases": [{**POOL.to_dict(), "zone": None, "purchase": purchase, "hourly_usd": 0,
                                             "nodes": 3, **extra}]}, source="plan.json")
        assert (pool.purchase, pool.hourly_usd, nodes) == (purchase, 0.0, 3)
    with pytest.raises(RunStateError, match="plan.phases\\[0\\]: purchase='lease' is not one of"):
        plan_pool({"phases": [{**POOL.to_dict(), "purchase": "lease", "nodes": 1}]}, source="plan.json")
