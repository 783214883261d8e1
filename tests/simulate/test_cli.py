"""``planner simulate`` end to end through the real CLI entry point."""

from __future__ import annotations

import json

import pytest

from planner.cli import main
from tests.simulate.helpers import write_trace

TRACES = ("traces", "skypilot-spot-traces", "availability", "1-node", "aws-02-15-2023")
MODEL = ["--job-hours", "4", "--deadline-hours", "6", "--restart-hours", "0.5"]


@pytest.fixture
def job(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text('name = "sim-demo"\n[constraints]\ndeadline_hours = 6\n', encoding="utf-8")
    return path


@pytest.fixture
def zones(tmp_path):
    folder = tmp_path / "zones"
    # stored polarity: 1 = spot unavailable
    write_trace(folder / "us-east-1a_v100_1.json", [0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0], gap_seconds=1800)
    write_trace(folder / "us-east-1b_v100_1.json", [1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1], gap_seconds=1800)
    return folder


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_json_reports_every_policy(job, zones, capsys):
    assert main(["simulate", str(job), "--trace", str(zones), *MODEL, "--json"]) == 0
    out = _json(capsys)
    assert out["job"] == "sim-demo"
    assert out["trace"]["pools"] == ["us-east-1a", "us-east-1b"] and out["trace"]["gap_seconds"] == 1800
    assert out["model"]["effective_restart_hours"] == 0.5
    policies = out["policies"]
    assert list(policies) == ["on_demand", "greedy", "uniform_progress", "danlu", "optimal"]
    assert policies["on_demand"]["cost_usd"] == pytest.approx(3.06 * 4.5)
    for result in policies.values():
        assert set(result) >= {"cost_usd", "finish_hours", "deadline_met"}
        assert result["deadline_met"] and policies["optimal"]["cost_usd"] <= result["cost_usd"] + 1e-9
    # the zones take turns: danlu follows the spot from zone to zone and never pays on-demand
    assert policies["danlu"]["on_demand_hours"] == 0 and policies["danlu"]["preemptions"] == 2
    assert policies["uniform_progress"]["on_demand_hours"] > 0


def test_policy_subset_and_home_pool(job, zones, capsys):
    argv = ["simulate", str(job), "--trace", str(zones), *MODEL, "--json", "--policy", "uniform_progress",
            "--policy", "optimal", "--home-pool", "us-east-1b"]
    assert main(argv) == 0
    out = _json(capsys)
    assert list(out["policies"]) == ["uniform_progress", "optimal"] and out["home_pool"] == "us-east-1b"


def test_table_and_plot(job, zones, tmp_path, capsys):
    png = tmp_path / "plots" / "progress.png"
    assert main(["simulate", str(job), "--trace", str(zones), *MODEL, "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "danlu" in out and "optimal" in out and f"plot written to {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in png.parent.iterdir()) == ["progress.png"]


def test_spot_price_flag_overrides_trace_prices(job, tmp_path, capsys):
    trace = write_trace(tmp_path / "z.json", [0] * 12, gap_seconds=1800, prices=[5.0] * 12)
    base = ["simulate", str(job), "--trace", str(trace), *MODEL, "--json", "--policy", "greedy"]
    assert main(base) == 0
    assert _json(capsys)["policies"]["greedy"]["cost_usd"] == pytest.approx(5.0 * 4.5)
    assert main([*base, "--spot-price", "1.0"]) == 0
    assert _json(capsys)["policies"]["greedy"]["cost_usd"] == pytest.approx(1.0 * 4.5)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--deadline-hours", "6"], "workload: required key is missing"),
        ([*MODEL, "--home-pool", "eu-west-1a"], "--home-pool 'eu-west-1a' is not among"),
        ([*MODEL, "--start-tick", "99"], "--start-tick 99 is outside the trace: give 0 to 11"),
        (["--job-hours", "4", "--deadline-hours", "4.2"], "give a deadline of at least 4.5 h"),
        ([*MODEL, "--restart-hours", "-1"], "restart_hours must be a finite number >= 0"),
    ],
)
def test_bad_arguments_exit_2_with_the_fix(job, zones, capsys, extra, message):
    assert main(["simulate", str(job), "--trace", str(zones), *extra]) == 2
    assert message in capsys.readouterr().err


def test_bad_files_exit_2_naming_them(tmp_path, zones, capsys):
    missing = tmp_path / "nope.toml"
    assert main(["simulate", str(missing), "--trace", str(zones), *MODEL]) == 2
    assert f"{missing}: invalid job file" in capsys.readouterr().err
    nameless = tmp_path / "nameless.toml"
    nameless.write_text("[constraints]\n", encoding="utf-8")
    assert main(["simulate", str(nameless), "--trace", str(zones), *MODEL]) == 2
    assert 'name: missing or empty; add name = "my-job"' in capsys.readouterr().err
    broken = tmp_path / "broken.toml"
    broken.write_text("name = \n", encoding="utf-8")
    assert main(["simulate", str(broken), "--trace", str(zones), *MODEL]) == 2
    assert "not readable TOML" in capsys.readouterr().err
    job = tmp_path / "job.toml"
    job.write_text('name = "x"\n', encoding="utf-8")
    assert main(["simulate", str(job), "--trace", str(tmp_path / "none.json"), *MODEL]) == 2
    assert "no such trace file" in capsys.readouterr().err


@pytest.mark.shared
def test_real_zones_from_a_start_offset(job, shared, capsys):
    folder = shared(*TRACES)
    argv = ["simulate", str(job), "--trace", str(folder / "us-east-1c_v100_1.json"), "--trace",
            str(folder / "us-east-1d_v100_1.json"), "--job-hours", "24", "--deadline-hours", "30",
            "--start-tick", "7000", "--json"]
    assert main(argv) == 0
    policies = _json(capsys)["policies"]
    assert all(p["deadline_met"] for p in policies.values())
    assert min(p["cost_usd"] for p in policies.values()) == policies["optimal"]["cost_usd"]
    assert policies["on_demand"]["cost_usd"] == pytest.approx(3.06 * (24 + 4 * 195 / 3600))
