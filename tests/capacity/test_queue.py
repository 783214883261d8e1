"""Queue mode: the schedule equals a brute force on a small queue, meets every deadline it can,
and an infeasible queue is one message naming the job, exit 2."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
from pathlib import Path

import pytest

from planner.capacity.queue import Option, job_options, schedule, window
from planner.capacity.queue_spec import load_queue
from planner.cli import main
from runtime.control.queue_run import job_for_run
from pricing.pool import HELD
from pricing.sources import resolve_catalog as load_catalog_path
from tests.run.helpers import HEADER

# T4 nodes: 1-GPU on-demand $0.60/h and spot $0.20/h (no interruptions, so spot's effective
# throughput is its raw one), and a 4-GPU type the team holds.
CATALOG = [
    "aws,us-east-1,,g4dn.xlarge,T4,1,16,4,16,0.60,0.20,,,0.0,,2026-11-30,test catalog",
    "aws,us-east-1,,g4dn.12xlarge,T4,4,16,48,192,3.90,1.40,,,0.0,,2026-11-30,test catalog",
]


def write(tmp_path: Path, body: str) -> tuple[Path, Path]:
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(HEADER + "\n" + "\n".join(CATALOG) + "\n")
    queue = tmp_path / "queue.toml"
    queue.write_text(body)
    return queue, catalog


def job(name: str, steps: float, deadline: float | None, *, submit: float = 0, nodes: int = 4, extra: str = "") -> str:
    dl = f"deadline_hours = {deadline}\n" if deadline is not None else ""
    return (f"\n[[job]]\nname = \"{name}\"\nsubmit_hours = {submit}\n[job.workload]\nsteps = {steps}\n"
            f"[job.workload.throughput]\nT4 = 1.0\n[job.constraints]\n{dl}max_nodes = {nodes}\n{extra}")


HELD_4 = '\n[[reservation]]\ncloud = "aws"\nregion = "us-east-1"\ninstance_type = "g4dn.12xlarge"\ncount = 1\n'


def brute_force(spec, options, works) -> float:
    """Every choice of (idle or one configuration) per job and slot that fits the held capacity;
    each start on a configuration (not the same one in the slot before) loses the job's restart
    time at that configuration's rate, and each job then runs the cheapest shares of its chosen
    slots (a fractional knapsack)."""
    cells = [(j, t) for j, job in enumerate(spec.jobs) for t in window(job, spec)]
    choices = [[None, *[k for k, o in enumerate(options[j]) if o.held is None or t < spec.horizon_slots]]
               for j, t in cells]
    best = math.inf
    h = spec.slot_hours
    for pick in itertools.product(*choices):
        held = {}
        for (j, t), k in zip(cells, pick):
            if k is not None and options[j][k].held is not None:
                held[t] = held.get(t, 0) + options[j][k].nodes
        if any(n > spec.reservations[0].count for n in held.values()):
            continue
        total = 0.0
        for j in range(len(spec.jobs)):
            chosen = {t: k for (jj, t), k in zip(cells, pick) if jj == j and k is not None}
            restart_h = spec.jobs[j].spec.overheads.restart_minutes / 60
            need = works[j] + sum(options[j][k].units_per_hour * restart_h for t, k in chosen.items()
                                  if chosen.get(t - 1) != k)
            mine = sorted((options[j][k] for k in chosen.values()), key=lambda o: o.usd_per_hour / o.units_per_hour)
            for o in mine:
                share = min(1.0, need / (o.units_per_hour * h))
                total += share * h * o.usd_per_hour
                need -= share * h * o.units_per_hour
                if need <= 1e-9:
                    break
            if need > 1e-6:
                total = math.inf
                break
        best = min(best, total)
    return best


@pytest.mark.parametrize("steps", [(30000, 20000), (40000, 12000), (25000, 25000)])
def test_small_queue_equals_brute_force(tmp_path: Path, steps: tuple[float, float]) -> None:
    body = 'name = "q"\nslot_hours = 1.0\n' + HELD_4 + job("a", steps[0], 3, nodes=4) + job("b", steps[1], 3, nodes=4)
    queue, catalog_path = write(tmp_path, body)
    spec = load_queue(queue)
    catalog = load_catalog_path(catalog_path)
    today = dt.date(2026, 1, 1)
    options = [job_options(j, spec, catalog, today=today) for j in spec.jobs]
    assert all(any(o.held is not None for o in opts) for opts in options)
    # a small catalog, so few configurations: the brute force stays exhaustive
    options = [[o for o in opts if o.nodes in (1, 4) or o.held is not None] for opts in options]
    result = schedule(spec, catalog, today=today, options=options)
    expected = brute_force(spec, options, list(steps))
    assert result.cost_usd == pytest.approx(expected, rel=1e-6, abs=1e-6)
    for j, w in zip(result.jobs, steps):
        assert sum(s.work for s in j.segments) >= w * (1 - 1e-6)  # net of every restart


def test_deadlines_met_held_capacity_respected_and_nodes_per_slot(tmp_path: Path, capsys) -> None:
    body = ('name = "q"\nslot_hours = 0.5\nhorizon_slots = 16\n' + HELD_4 + job("late", 6000, 6, submit=2)
            + job("early", 20000, 3) + job("open", 5000, None, nodes=1))
    queue, catalog = write(tmp_path, body)
    assert main(["capacity", "--queue", str(queue), "--catalog", str(catalog), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    by = {j["name"]: j for j in data["jobs"]}
    for j in data["jobs"]:
        assert j["meets_deadline"], j
        assert sum(s["work"] for s in j["segments"]) == pytest.approx(j["work"], rel=1e-6)
        for s in j["segments"]:
            assert s["start_hours"] >= j["submit_hours"] - 1e-9
    assert by["late"]["segments"][0]["start_slot"] >= 4  # submitted at 2 h: slot 4 of 0.5 h
    assert by["early"]["finish_hours"] <= 3 + 1e-9
    for t in data["slots"]:
        assert t["held_nodes"] <= 1
        assert t["held_nodes"] + t["spot_nodes"] + t["on_demand_nodes"] == sum(p["nodes"] for p in t["pools"])
    # the held node is free: the plan uses it before paying for spot
    assert any(s["purchase"] == HELD for j in data["jobs"] for s in j["segments"])
    assert data["cost_usd"] == pytest.approx(sum(j["cost_usd"] for j in data["jobs"]))


def test_a_job_that_cannot_finish_alone_is_named_with_the_deadline_it_needs(tmp_path: Path, capsys) -> None:
    # at most 4 nodes of 4 T4s at 1 step/s/GPU: 57,600 steps an hour; 1,000,000 steps need 17.4 h.
    body = 'name = "q"\nslot_hours = 1.0\n' + job("fine", 1000, 4) + job("huge", 1_000_000, 4)
    queue, catalog = write(tmp_path, body)
    code = main(["capacity", "--queue", str(queue), "--catalog", str(catalog)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "job 'huge'" in err and "extend its constraints.deadline_hours to" in err
    assert "'fine'" not in err


def test_jobs_that_only_fail_together_name_the_one_that_does_not_fit(tmp_path: Path, capsys) -> None:
    # Only the held 4-GPU node (no elastic capacity): each job alone needs 2 of its 3 slots.
    body = ('name = "q"\nslot_hours = 1.0\n[purchase]\nallow = []\n' + HELD_4
            + job("first", 25000, 3) + job("second", 25000, 3))
    queue, catalog = write(tmp_path, body)
    code = main(["capacity", "--queue", str(queue), "--catalog", str(catalog)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "job 'second' cannot meet its deadline together with 'first'" in err


@pytest.mark.parametrize(("text", "needle"), [
    ('name = "q"\n', "job: "),
    ('name = "q"\nslot_hours = -1\n[[job]]\nfile = "x.toml"\n', "slot_hours"),
    ('name = "q"\n[[job]]\nfile = "missing.toml"\n', "missing.toml: invalid job file"),
    ('name = "q"\nhorizon_slots = 4\n[[job]]\nname = "a"\n[job.workload]\nstepz = 3\n', "did you mean"),
    ('name = "q"\n' + job("a", 10, None), "horizon_slots: required because job 'a'"),
])
def test_bad_queue_file_is_one_message_and_exit_2(tmp_path: Path, capsys, text: str, needle: str) -> None:
    queue, catalog = write(tmp_path, text)
    code = main(["capacity", "--queue", str(queue), "--catalog", str(catalog)])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and "Traceback" not in err, err


def test_options_are_effective_throughput(tmp_path: Path) -> None:
    queue, catalog_path = write(tmp_path, 'name = "q"\nslot_hours = 1.0\n' + HELD_4 + job("a", 1000, 2))
    spec = load_queue(queue)
    opts = job_options(spec.jobs[0], spec, load_catalog_path(catalog_path), today=dt.date(2026, 1, 1))
    held = [o for o in opts if o.held is not None]
    assert held and all(o.usd_per_hour == 0 for o in held)
    # on-demand T4s are no faster than spot ones that never get interrupted here: pruned as dominated
    assert {o.pool.purchase for o in opts if o.held is None} == {"spot"}
    one = next(o for o in opts if o.pool.gpus_per_node == 1 and o.nodes == 1)
    assert one.units_per_hour == pytest.approx(3600.0)  # 1 step/s on one T4
    assert isinstance(one, Option) and one.usd_per_hour == pytest.approx(0.20)
    four = next(o for o in opts if o.pool.gpus_per_node == 4 and o.nodes == 2 and o.held is None)
    assert four.units_per_hour == pytest.approx(8 * 3600.0) and four.usd_per_hour == pytest.approx(2.80)


def test_the_runs_of_a_queue_target_the_reservation_its_file_names(tmp_path: Path) -> None:
    held = HELD_4 + 'reservation_id = "cr-0123456789abcdef0"\n'
    body = 'name = "q"\nslot_hours = 1.0\nhorizon_slots = 4\n' + held + job("a", 1000, 4)
    queue, catalog_path = write(tmp_path, body)
    spec = load_queue(queue)
    today = dt.date(2026, 1, 1)
    planned = schedule(spec, load_catalog_path(catalog_path), today=today)
    (js,) = planned.jobs
    (entry,) = job_for_run(js, planned, today=today).purchase.held
    assert (entry.instance_type, entry.reservation_id) == ("g4dn.12xlarge", "cr-0123456789abcdef0")
