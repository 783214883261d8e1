"""`planner capacity`: the JSON contract, the chart, and bad input as one message with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "capacity" / "team.toml"

SMALL = """
name = "small"
period = "month"
horizon_periods = 8
[[demand]]
gpu = "A100"
gpu_hours = [3000, 4000, 5000, 4500]
preemptible_share = 0.3
[purchase]
allow = ["on_demand", "spot", "reserved_1y", "reserved_3y"]
"""


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_contract_and_chart(tmp_path, capsys) -> None:
    path = tmp_path / "d.toml"
    path.write_text(SMALL)
    png = tmp_path / "c.png"
    code, out, _ = run(capsys, "capacity", str(path), "--json", "--plot", str(png))
    assert code == 0
    data = json.loads(out)
    assert {"tco_usd", "baselines", "reservations", "periods"} <= set(data)
    assert {"all_on_demand_usd", "best_single_option_usd"} <= set(data["baselines"])
    assert len(data["periods"]) == 8
    for p in data["periods"]:
        assert {"start", "demand_gpu_hours", "reserved_gpu_hours", "spot_gpu_hours", "on_demand_gpu_hours",
                "cost_usd"} <= set(p)
        assert p["reserved_gpu_hours"] + p["spot_gpu_hours"] + p["on_demand_gpu_hours"] == pytest.approx(
            p["demand_gpu_hours"])
    for r in data["reservations"]:
        assert {"cloud", "region", "instance_type", "gpu", "term", "start_period", "count", "utilization"} <= set(r)
        assert 0 <= r["utilization"] <= 1 + 1e-9
    total = sum(p["cost_usd"] for p in data["periods"]) + data["past_horizon_usd"]
    assert total == pytest.approx(data["tco_usd"], rel=1e-9)
    assert data["tco_usd"] <= data["baselines"]["best_single_option_usd"] * (1 + 1e-9)
    assert data["baselines"]["best_single_option_usd"] <= data["baselines"]["all_on_demand_usd"] * (1 + 1e-9)
    assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_whole_rule_charges_at_least_pro_rata(tmp_path, capsys) -> None:
    costs = {}
    for rule in ("pro_rata", "whole"):
        path = tmp_path / f"{rule}.toml"
        path.write_text(SMALL.replace('allow = [', f'term_past_horizon = "{rule}"\nallow = ['))
        code, out, _ = run(capsys, "capacity", str(path), "--json", "--no-robust")
        assert code == 0
        data = json.loads(out)
        assert data["term_past_horizon"] == rule
        costs[rule] = data
    assert costs["whole"]["tco_usd"] >= costs["pro_rata"]["tco_usd"] - 1e-6
    assert costs["pro_rata"]["past_horizon_usd"] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize(("text", "needle"), [
    (SMALL.replace("preemptible_share = 0.3", "preemptable_share = 0.3"), "did you mean 'preemptible_share'"),
    (SMALL.replace("preemptible_share = 0.3", "preemptible_share = 1.5"), "demand[0].preemptible_share"),
    (SMALL.replace('period = "month"', 'period = "year"'), "period"),
    (SMALL.replace("gpu_hours = [3000, 4000, 5000, 4500]", 'file = "missing.csv"'), "missing.csv not found"),
    (SMALL.replace('gpu = "A100"', 'gpu = "NOPE"'), "no GPU 'NOPE'"),
    ("name = 'x'\nhorizon_periods = [", "not valid TOML"),
])
def test_bad_input_is_one_message_and_exit_2(tmp_path, capsys, text: str, needle: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    code, out, err = run(capsys, "capacity", str(path), "--json")
    assert code == 2
    assert needle in err
    assert "Traceback" not in err and out == ""


def test_example_runs(capsys) -> None:
    code, out, _ = run(capsys, "capacity", str(EXAMPLE), "--json", "--no-robust")
    assert code == 0
    data = json.loads(out)
    assert data["tco_usd"] < data["baselines"]["all_on_demand_usd"]


def test_a_trace_demand_that_ramps_in_is_planned_with_a_note_naming_the_window_without_it(tmp_path, capsys) -> None:
    # 20 one-day A100 jobs a day from day 14 to day 83; before that, one a day: two quiet weeks.
    rows = ["submit_time_s,duration_s,num_gpus,gpu_type"]
    for day in range(84):
        rows += [f"{day * 86400},86400,1,A100"] * (20 if day >= 14 else 1)
    (tmp_path / "jobs.csv").write_text("\n".join(rows) + "\n")
    spec = tmp_path / "d.toml"
    spec.write_text('name = "t"\nperiod = "week"\nhorizon_periods = 24\n[trace]\nfile = "jobs.csv"\n')
    code, out, _ = run(capsys, "capacity", str(spec), "--json", "--no-robust")
    assert code == 0
    notes = json.loads(out)["notes"]
    assert "A100: the trace window holds 12 weeks, repeated to fill 24" in notes
    (edge,) = [n for n in notes if "ramp-in" in n]
    assert edge.startswith("A100: the first 2 weeks average 5% of the median week")
    assert edge.endswith("set trace.window_start_s = 1209600 and trace.window_end_s = 7257600")
    spec.write_text(spec.read_text() + "window_start_s = 1209600\nwindow_end_s = 7257600\n")
    code, out, _ = run(capsys, "capacity", str(spec), "--json", "--no-robust")
    assert code == 0 and not [n for n in json.loads(out)["notes"] if "ramp-in" in n]
