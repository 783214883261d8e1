"""`planner quote` as a user runs it: exit codes, the SPEC's JSON, errors without tracebacks."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from planner.cli import main

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("*.toml"))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_examples_quote_in_json(example, capsys):
    assert main(["quote", str(example), "--json", "--no-cache"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "optimal" and out["infeasible"] is None
    plan = out["plan"]
    for key in ("expected_cost_usd", "expected_hours", "p90_cost_usd", "phases"):
        assert key in plan
    phase = plan["phases"][0]
    for key in ("cloud", "region", "zone", "instance_type", "gpu", "gpus_per_node", "nodes", "purchase",
                "hourly_usd", "hours"):
        assert key in phase
    assert sum(line["usd"] for line in plan["cost_lines"]) == pytest.approx(plan["expected_cost_usd"], abs=0.05)
    assert out["prices"]["origin"].startswith("embedded snapshot")
    assert isinstance(out["alternatives"], list)


def test_infeasible_exits_2_with_relaxations(tmp_path, capsys):
    job = tmp_path / "job.toml"
    job.write_text('name = "tight"\n[workload]\nmodel = "resnet50"\nsamples = 1e8\n'
                   '[constraints]\ndeadline_hours = 0.1\nbudget_usd = 1\n')
    assert main(["quote", str(job), "--json", "--no-cache"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "infeasible" and out["plan"] is None
    assert out["infeasible"]["binding"]
    assert all(r["message"] for r in out["infeasible"]["relaxations"])


def test_invalid_job_is_one_clear_error_not_a_traceback(tmp_path):
    job = tmp_path / "job.toml"
    job.write_text('name = "x"\n[workload]\nmodel = "gpt-7b"\ntokens = 1e9\n[constraints]\nbudgt_usd = 3\n')
    proc = subprocess.run([sys.executable, "-m", "planner.cli", "quote", str(job)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert str(job) in proc.stderr
    assert "constraints.budgt_usd: unknown key; did you mean 'constraints.budget_usd'?" in proc.stderr


def test_unknown_model_is_named(tmp_path, capsys):
    job = tmp_path / "job.toml"
    job.write_text('name = "x"\n[workload]\nmodel = "gpt-7bb"\ntokens = 1e9\n')
    assert main(["quote", str(job)]) == 2
    assert "did you mean 'gpt-7b'" in capsys.readouterr().err


def test_terminal_report_and_plot(tmp_path, capsys):
    png = tmp_path / "frontier.png"
    assert main(["quote", str(REPO / "examples" / "gpt-7b-finetune.toml"), "--plot", str(png), "--top", "2"]) == 0
    text = capsys.readouterr().out
    for needle in ("Plan", "compute", "expected total", "P90 time", "alternatives", "frontier"):
        assert needle in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_objective_override_changes_the_plan(capsys):
    job = str(REPO / "examples" / "resnet50-imagenet.toml")
    main(["quote", job, "--json", "--no-cache"])
    cheap = json.loads(capsys.readouterr().out)["plan"]
    main(["quote", job, "--json", "--no-cache", "--objective", "time"])
    fast = json.loads(capsys.readouterr().out)["plan"]
    assert fast["expected_hours"] <= cheap["expected_hours"]
    assert fast["expected_cost_usd"] >= cheap["expected_cost_usd"]


def test_unknown_model_with_its_own_throughput_quotes(tmp_path, capsys):
    job = tmp_path / "job.toml"
    job.write_text('name = "vit"\n[workload]\nmodel = "vit-large"\nsamples = 1e7\n'
                   '[workload.throughput]\nA100 = 400\nH100 = 900\n')
    assert main(["quote", str(job), "--json", "--no-cache"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "optimal"
    assert {p["gpu"] for p in out["plan"]["phases"]} <= {"A100", "H100"}


@pytest.mark.parametrize(
    ("section", "key"),
    [('[workload.throughput]\nMI300X = 900\n', "workload.throughput.MI300X"),
     ('[constraints]\ngpus = ["H100", "MI300X"]\n', "constraints.gpus[1]")],
)
def test_a_gpu_the_catalog_lacks_exits_2_naming_file_key_and_gpus(tmp_path, section, key):
    job = tmp_path / "job.toml"
    job.write_text(f'name = "x"\n[workload]\nmodel = "gpt-7b"\ntokens = 1e9\n{section}')
    proc = subprocess.run([sys.executable, "-m", "planner.cli", "quote", str(job), "--no-cache"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert str(job) in proc.stderr
    assert f"{key}: the catalog has no GPU 'MI300X'; its GPUs are A10, A100, A100-80GB" in proc.stderr


CASES = [(e, "cost") for e in EXAMPLES] + [(REPO / "examples" / "gpt-7b-finetune.toml", "carbon")]


@pytest.mark.parametrize(("example", "objective"), CASES, ids=lambda c: getattr(c, "stem", c))
def test_quote_tables_fit_80_columns_and_keep_every_pool_name_whole(example, objective):
    from rich.console import Console

    from planner.job import load_job
    from planner.quote import make_quote
    from planner.report import quote_json, render_quote
    from pricing.sources import resolve_catalog

    made = make_quote(load_job(example), resolve_catalog(None, use_cache=False), top=3, objective=objective)
    quote = json.loads(json.dumps(quote_json(made)))
    console = Console(width=80, record=True, file=io.StringIO())
    render_quote(made, console, 3)
    text = console.export_text()
    assert max(map(len, text.splitlines())) <= 80
    words = set(text.split())

    def where(phase):
        return f"{phase['cloud']}:{phase['region']}" + (f"/{phase['zone']}" if phase["zone"] else "")

    for phase in quote["plan"]["phases"]:
        assert phase["instance_type"] in words and where(phase) in words
    for alt in quote["alternatives"][:3]:
        assert any(p["instance_type"] in words and where(p) in words for p in alt["phases"])
    if objective == "carbon":
        header = next(line for line in text.splitlines() if "main pool" in line)
        assert "kg CO2e" in header
        for alt in quote["alternatives"][:3]:
            assert f"{alt['kg_co2e']:,.1f}" in text
    estimated = {p["gpu"] for p in quote["plan"]["phases"] if p["throughput_estimated"]}
    for gpu in estimated:
        assert f"estimated {gpu} throughput" in " ".join(text.split())
    assert ("[workload.throughput]" in text) == bool(estimated)


def test_piped_output_takes_its_width_from_COLUMNS(monkeypatch):
    from planner.cli import output_width

    monkeypatch.setenv("COLUMNS", "80")
    assert output_width() == 80
    monkeypatch.setenv("COLUMNS", "junk")
    assert output_width() == 120
