"""`planner run --resume RUN_DIR --held-from JOB`: a run given the reservations bought or extended since it started.

The runs are on the fake provider and a manual clock dated 2031 (the reservations' dates are the
run clock's, never today's); the command-line cases stop before any node starts.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pytest

from planner.cli import main
from runtime.control import held_update
from runtime.control.events import read_events
from runtime.control.reopen import reopen_stopped
from runtime.control.run_state import RunStateError, load_state, save_state
from tests.run.fake_run import AWS_A, billed, new_run, open_run, script

HELD = "aws:us-east-1:g4dn.xlarge"
DAY = dt.date(2031, 3, 10)
ORIGIN = dt.datetime.combine(DAY, dt.time(), tzinfo=dt.UTC).timestamp()


def held_table(until: dt.date, extra: str = "") -> str:
    return (f'\n[[purchase.held]]\ncloud = "aws"\nregion = "us-east-1"\ninstance_type = "g4dn.xlarge"\ncount = 1\n'
            f"until = {until.isoformat()}\n{extra}")


def dated_run(tmp_path: Path, *, origin: float = ORIGIN, **job) -> Path:
    """A fresh run whose clock starts at ``origin``."""
    run_dir = new_run(tmp_path, restart_minutes=0.1, **job)
    save_state(run_dir, load_state(run_dir).model_copy(update={"origin": origin}))
    return run_dir


def edited(tmp_path: Path, table: str, name: str = "edited.toml") -> Path:
    """The run's job file with ``table`` appended: what a user writes after buying a reservation."""
    path = tmp_path / name
    path.write_text((tmp_path / "job.toml").read_text() + table)
    return path


def test_a_run_no_plan_fit_finishes_on_a_reservation_bought_since_at_no_cost(tmp_path: Path) -> None:
    run_dir = dated_run(tmp_path, budget_usd=0.001)  # no paid pool fits
    first = open_run(run_dir, script())
    assert first.run()["status"] == "infeasible"

    update = held_update.check(run_dir, edited(tmp_path, held_table(DAY + dt.timedelta(days=2))))
    assert update.added == ("1x g4dn.xlarge aws:us-east-1 until 2031-03-12",)
    assert update.removed == () and update.kept == ()
    state = held_update.apply(update, clock=first.clock)
    assert state.status == "running" and state.pool is None  # reopened, to re-plan on the reservation

    resumed = open_run(run_dir, script(), at=first.clock.wall() + 1)
    summary = resumed.run()
    assert summary["status"] == "completed" and summary["steps"] == 300
    assert [launch["pool_id"] for launch in summary["launches"]] == [HELD]
    assert [e["hourly_usd"] for e in resumed.events("node_up")] == [0.0] and summary["cost_usd"] == 0.0
    (change,) = resumed.events("held_changed")
    assert change["added"] == list(update.added) and change["removed"] == []
    assert change["source"] == str((tmp_path / "edited.toml").resolve())
    # The run keeps the new list: a later resume plans with it too.
    assert load_state(run_dir).job_spec().purchase.held[0].until == DAY + dt.timedelta(days=2)


def test_a_cancelled_run_whose_reservation_ended_goes_back_to_it_once_extended(tmp_path: Path) -> None:
    """The reservation ends under the first launch (left for the rest of the run), spot carries on and
    is cancelled; the team extends the reservation and the resumed run moves back onto it."""
    run_dir = dated_run(tmp_path, origin=ORIGIN - 0.04 * 3600, extra=held_table(DAY))
    run = open_run(run_dir, script())
    real_poll = run.provider.poll
    pressed: list[int] = []

    def poll(nodes):
        workers = run.provider._launches.get("l-2")
        if not pressed and workers is not None and workers.step >= 200:
            pressed.append(workers.step)
            raise KeyboardInterrupt  # Ctrl-C, once
        return real_poll(nodes)

    run.provider.poll = poll
    with pytest.raises(KeyboardInterrupt):
        run.run()
    state = load_state(run_dir)
    assert state.status == "cancelled" and state.left_out == {HELD: None}
    assert [launch.outcome for launch in state.launches] == ["phase_end", "cancelled"]
    stopped_at = state.steps

    longer = edited(tmp_path, "", "longer.toml")
    longer.write_text(longer.read_text().replace(f"until = {DAY}", f"until = {DAY + dt.timedelta(days=1)}"))
    update = held_update.check(run_dir, longer)
    assert update.removed == ("1x g4dn.xlarge aws:us-east-1 until 2031-03-10",)
    assert update.added == ("1x g4dn.xlarge aws:us-east-1 until 2031-03-11",)
    assert held_update.apply(update, clock=run.clock).left_out == {}
    assert reopen_stopped(run_dir) == ("cancelled", "interrupted (Ctrl-C)")

    resumed = open_run(run_dir, script(), at=run.clock.wall() + 1)
    summary = resumed.run()
    assert summary["status"] == "completed" and summary["steps"] == 300
    assert [(launch["pool_id"], launch["start_step"]) for launch in summary["launches"][1:]] == [
        (AWS_A, summary["launches"][0]["end_step"]), (HELD, stopped_at)]
    assert [e["hourly_usd"] for e in resumed.events("node_up")] == [0.0, 0.16, 0.0]
    assert summary["cost_usd"] == pytest.approx(billed(resumed.events()), rel=1e-9)


def test_a_file_that_changes_more_than_the_reservations_is_refused_naming_each_key(tmp_path: Path) -> None:
    run_dir = dated_run(tmp_path)
    before = (run_dir / "state.json").read_bytes()
    job = edited(tmp_path, held_table(DAY + dt.timedelta(days=1)))
    job.write_text(job.read_text().replace("max_nodes = 1", "max_nodes = 2").replace('"train.py"', '"other.py"'))
    with pytest.raises(RunStateError) as refused:
        held_update.check(run_dir, job)
    message = str(refused.value)
    assert message.startswith(f"{job}: differs from the job {run_dir} started with in [constraints] max_nodes, "
                              "[run] entrypoint; --held-from takes only its [[purchase.held]]")
    assert "To fix: undo those edits" in message
    assert (run_dir / "state.json").read_bytes() == before


def test_a_budget_or_deadline_the_file_says_otherwise_is_the_runs_own_and_said_so(tmp_path: Path) -> None:
    run_dir = dated_run(tmp_path, budget_usd=40)
    job = edited(tmp_path, held_table(DAY + dt.timedelta(days=1)))
    job.write_text(job.read_text().replace("budget_usd = 40", "budget_usd = 30"))
    update = held_update.check(run_dir, job)
    assert update.kept == (f"budget_usd 40 ({job} says 30; --budget-usd moves it)",)
    held_update.apply(update, clock=open_run(run_dir, script()).clock)
    assert load_state(run_dir).job_spec().constraints.budget_usd == 40


def test_a_reservation_the_runs_catalog_does_not_have_is_refused_before_anything_changes(tmp_path: Path) -> None:
    run_dir = dated_run(tmp_path)
    before = (run_dir / "state.json").read_bytes()
    job = edited(tmp_path, held_table(DAY + dt.timedelta(days=1)).replace("g4dn.xlarge", "g4dn.xlarg"))
    with pytest.raises(RunStateError, match=re.escape(
            f"{job}: purchase.held[0]: g4dn.xlarg in aws:us-east-1 is not in the run's catalog. To fix:")):
        held_update.check(run_dir, job)
    assert (run_dir / "state.json").read_bytes() == before


def test_a_reservation_found_full_is_tried_again_once_changed_and_other_refusals_stand(tmp_path: Path) -> None:
    until = DAY + dt.timedelta(days=1)
    run_dir = dated_run(tmp_path, extra=held_table(until))
    state = load_state(run_dir)
    state.refused = {"reserved_held": {HELD: ORIGIN + 3600}, "on_demand": {HELD: ORIGIN + 3600}}
    save_state(run_dir, state)
    grown = edited(tmp_path, "", "grown.toml")
    grown.write_text(grown.read_text().replace("count = 1", "count = 2"))
    update = held_update.check(run_dir, grown)
    assert update.change == ("added 2x g4dn.xlarge aws:us-east-1 until 2031-03-11; "
                             "removed 1x g4dn.xlarge aws:us-east-1 until 2031-03-11")
    assert held_update.apply(update).refused == {"on_demand": {HELD: ORIGIN + 3600}}


def test_the_same_reservations_change_nothing(tmp_path: Path) -> None:
    run_dir = dated_run(tmp_path, extra=held_table(DAY + dt.timedelta(days=1)))
    before = (run_dir / "state.json").read_bytes()
    update = held_update.check(run_dir, tmp_path / "job.toml")
    assert not update.changed and update.change == ""
    held_update.apply(update)
    assert (run_dir / "state.json").read_bytes() == before and not (run_dir / "events.jsonl").exists()


def test_a_completed_run_takes_no_reservations(tmp_path: Path) -> None:
    run_dir = dated_run(tmp_path)
    assert open_run(run_dir, script()).run()["status"] == "completed"
    with pytest.raises(RunStateError, match="the run ended 'completed'"):
        held_update.check(run_dir, edited(tmp_path, held_table(DAY + dt.timedelta(days=1))))


# -- the command line -----------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    """``tmp_path`` as the directory the run starts in, with the run's script (a resume checks it is there)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    return tmp_path


def test_held_from_goes_with_resume_only(tmp_path: Path, capsys) -> None:
    run_dir = dated_run(tmp_path)
    assert main(["run", str(tmp_path / "job.toml"), "--held-from", str(tmp_path / "job.toml")]) == 2
    assert "--held-from goes with --resume RUN_DIR" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() and load_state(run_dir).launches == []


def test_a_job_file_that_does_not_read_is_refused_naming_it_and_the_run_stays_as_it_was(
        project: Path, tmp_path: Path, capsys) -> None:
    run_dir = dated_run(tmp_path)
    before = (run_dir / "state.json").read_bytes()
    broken = edited(tmp_path, "\n[[purchase.held]]\ncloud = \"aws\"\n")
    assert main(["run", "--resume", str(run_dir), "--held-from", str(broken)]) == 2
    err = capsys.readouterr().err
    assert str(broken) in err and "purchase.held" in err and "Traceback" not in err
    assert (run_dir / "state.json").read_bytes() == before


def test_a_refused_budget_leaves_the_reservations_as_they_were(project: Path, tmp_path: Path, capsys) -> None:
    run_dir = dated_run(tmp_path, budget_usd=0.001)
    assert open_run(run_dir, script()).run()["status"] == "infeasible"
    before = (run_dir / "state.json").read_bytes()
    job = edited(tmp_path, held_table(DAY + dt.timedelta(days=1)))
    assert main(["run", "--resume", str(run_dir), "--held-from", str(job), "--budget-usd", "0.0005"]) == 2
    assert "must be larger than the run's budget" in capsys.readouterr().err
    assert (run_dir / "state.json").read_bytes() == before


def test_the_resume_says_what_changed_and_re_plans_with_it(project: Path, tmp_path: Path, capsys) -> None:
    """The reservation starts long after the run's deadline: the re-plan cannot use it and ends the run
    again at once, billing nothing, but the run holds the new list and the terminal says so."""
    run_dir = new_run(tmp_path, budget_usd=0.001)
    assert open_run(run_dir, script()).run()["status"] == "infeasible"
    starts = dt.date(2999, 1, 1)
    job = edited(tmp_path, held_table(starts + dt.timedelta(days=30), f"starts = {starts}\n"))
    assert main(["run", "--resume", str(run_dir), "--held-from", str(job)]) == 1
    out = capsys.readouterr().out
    assert "held reservation added: 1x g4dn.xlarge aws:us-east-1 from 2999-01-01 until 2999-01-31" in out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "infeasible" and summary["launches"] == [] and summary["cost_usd"] == 0
    kinds = [e["event"] for e in read_events(run_dir / "events.jsonl")]
    assert kinds.index("held_changed") < kinds.index("run_resumed")
    assert load_state(run_dir).job_spec().purchase.held[0].starts == starts


def test_a_run_its_budget_cap_stopped_finishes_on_held_nodes_without_spending_more(tmp_path: Path) -> None:
    """The script is three times slower than the job's table: the cap stops the spot run at a checkpoint
    before its budget is spent. Held nodes cost nothing more, so a reservation lets it finish under the
    same budget."""
    run_dir = dated_run(tmp_path, budget_usd=0.04)
    slow = script(steps_per_s=0.85 * 60 / 3)
    first = open_run(run_dir, slow)
    capped = first.run()
    assert capped["status"] == "budget_cap" and 0 < capped["steps"] < 300, capped

    update = held_update.check(run_dir, edited(tmp_path, held_table(DAY + dt.timedelta(days=2))))
    assert held_update.apply(update, clock=first.clock).status == "running"
    resumed = open_run(run_dir, slow, at=first.clock.wall() + 1)
    summary = resumed.run()
    assert summary["status"] == "completed" and summary["steps"] == 300
    last = summary["launches"][-1]
    assert last["pool_id"] == HELD and last["start_step"] == capped["steps"]
    assert summary["cost_usd"] == pytest.approx(capped["cost_usd"], rel=1e-9) and capped["cost_usd"] < 0.04
