"""The online replay: the Wang-Li-Liang rule within its bound, ours better on average and within it too."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pytest

from planner.capacity.demand import quiet_edges
from planner.capacity.offers import ElasticPrice, ReservedOption
from planner.capacity.replay import replay_series, wang_li_liang
from planner.cli import main

OPTION = ReservedOption("aws", "us-east-1", "p.1x", "V100", 1, "reserved_1y", 2.0)
ON_DEMAND = ElasticPrice("aws", "us-east-1", None, "p.1x", 3.0)


def traces() -> list[np.ndarray]:
    """Daily GPU-hours over two years: steady, bursty, declining and a short spike, seeded."""
    rng = np.random.default_rng(11)
    t = np.arange(730)
    steady = 24 * (20 + rng.normal(0, 3, 730)).clip(0)
    bursty = 24 * (10 + 30 * (rng.random(730) < 0.2)).astype(float)
    declining = 24 * np.maximum(0, 40 - t / 12) + rng.uniform(0, 24, 730)
    spike = 24 * np.where((t > 100) & (t < 160), 50, 2).astype(float)
    seasonal = 24 * (20 + 15 * np.sin(2 * np.pi * t / 365)).clip(0)
    return [steady, bursty, declining, spike, seasonal]


@pytest.mark.parametrize("rule", ["pro_rata", "whole"])
def test_baseline_within_bound_and_ours_better_on_average(rule: str) -> None:
    runs = [replay_series(s, "day", OPTION, ON_DEMAND, rule, lookback=28) for s in traces()]
    for r in runs:
        assert r.hindsight_usd <= min(r.baseline_usd, r.ours_usd, r.all_on_demand_usd) * (1 + 1e-9)
        assert r.baseline_ratio <= 2.0 + 1e-9
        assert r.ours_ratio <= 2.0 + 1e-9
    assert statistics.fmean(r.ours_ratio for r in runs) < statistics.fmean(r.baseline_ratio for r in runs)


def test_wang_li_liang_waits_for_the_fee() -> None:
    # One instance of steady demand: on-demand costs 3 * 24 = 72 a day; the 1y fee is 2 * 8760 = 17520,
    # so the rule reserves on the day the window's on-demand spend first reaches the fee (day 243).
    n = np.ones(400)
    bought = wang_li_liang(n, 365, 17520.0, 72.0)
    assert bought.index(1) == int(np.ceil(17520 / 72)) - 1
    assert sum(bought) == 1


def test_replay_cli_json(tmp_path, capsys) -> None:
    rng = np.random.default_rng(5)
    rows = ["submit_time_s,duration_s,num_gpus,gpu_type"]
    for _ in range(300):
        rows.append(f"{int(rng.uniform(0, 60 * 86400))},{int(rng.exponential(3 * 86400))},"
                    f"{int(rng.choice([1, 1, 2, 4, 8]))},")
    trace = tmp_path / "jobs.csv"
    trace.write_text("\n".join(rows) + "\n")
    code = main(["capacity", "replay", str(trace), "--json", "--rotations", "2", "--window-end-s",
                 str(56 * 86400)])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["bound"] == 2.0 and data["window_periods"] == 56 and data["horizon_periods"] == 730
    assert data["worst_ratio"]["baseline"] <= 2.0 + 1e-9
    assert data["mean"]["hindsight_usd"] <= data["mean"]["baseline_usd"]


def test_quiet_edges_are_a_ramp_in_and_a_cut_off_not_a_dip_or_noise() -> None:
    rng = np.random.default_rng(3)
    steady = list(rng.uniform(80, 120, 100))
    assert quiet_edges(steady) == (0, 0)
    ramp = [float(v) for v in range(0, 40, 4)]  # 10 periods climbing to 36, under half the median of 100
    cut = [30.0, 20.0, 10.0, 5.0, 1.0, 0.0]
    assert quiet_edges(ramp + steady + cut) == (10, 6)
    assert quiet_edges(steady[:50] + [0.0] * 10 + steady[50:]) == (0, 0)  # a quiet stretch inside is demand
    assert quiet_edges([0.0] * 2 + steady + [0.0] * 2) == (0, 0)  # 2 of 104: under 5 %, noise
    assert quiet_edges([]) == (0, 0) and quiet_edges([0.0] * 5) == (0, 0)


def test_a_trace_that_ramps_in_gets_a_note_with_the_window_that_leaves_it_out(tmp_path, capsys) -> None:
    # 20 one-day jobs of one GPU start each day from day 10 to day 59; before that, one job a day.
    rows = ["submit_time_s,duration_s,num_gpus,gpu_type"]
    for day in range(60):
        rows += [f"{day * 86400},86400,1,"] * (20 if day >= 10 else 1)
    trace = tmp_path / "jobs.csv"
    trace.write_text("\n".join(rows) + "\n")
    assert main(["capacity", "replay", str(trace), "--json", "--rotations", "1"]) == 0
    (note,) = json.loads(capsys.readouterr().out)["notes"]
    assert "the first 10 days average 5% of the median day" in note and "last" not in note
    assert note.endswith("To replay the 50 days between: --window-start-s 864000 --window-end-s 5184000")
    window = note.split("between: ")[1].split()
    assert main(["capacity", "replay", str(trace), "--rotations", "1", *window]) == 0
    out = capsys.readouterr().out
    assert "50-day window" in out and "note:" not in out


@pytest.mark.shared
def test_philly_replay(shared, capsys) -> None:
    trace = shared("traces", "gpu-demand", "philly_jobs.csv")
    code = main(["capacity", "replay", str(trace), "--json", "--rotations", "2", "--window-start-s", "3628800",
                 "--window-end-s", "10281600"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["window_periods"] == 77
    assert data["mean"]["ours_ratio"] < data["mean"]["baseline_ratio"] <= 2.0
    assert data["worst_ratio"]["ours"] <= 2.0 and data["notes"] == []


@pytest.mark.shared
def test_the_whole_philly_file_is_said_to_ramp_in_and_be_cut_off(shared, capsys) -> None:
    # SOURCE.md: weeks 0-4 are ramp-in survivors, weeks 17-18 right-censored; weeks 6-16 are steady.
    trace = shared("traces", "gpu-demand", "philly_jobs.csv")
    assert main(["capacity", "replay", str(trace), "--json", "--rotations", "1", "--period", "week"]) == 0
    (note,) = json.loads(capsys.readouterr().out)["notes"]
    assert "ramp-in" in note and "cut-off" in note
    assert note.endswith("--window-start-s 3628800 --window-end-s 10281600")  # exactly weeks 6-16
