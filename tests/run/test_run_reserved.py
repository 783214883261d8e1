"""Held reservations and a newly bought term run to completion and are accounted.

Held capacity (``[[purchase.held]]``) is billed $0 an hour but every hour is recorded; a
term the plan buys (``reserved_1y``) is charged once, in full, when it is bought, and
counts against the budget, the alerts and the hard cap.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from planner.cli import main
from pricing.catalog import HOURS_PER_YEAR
from tests.run.helpers import HEADER, digits_entrypoint, processes_of, write_job

pytestmark = pytest.mark.ddp

RESERVED_1Y = 0.31  # hourly-equivalent price of the 1-year term, per node


def _catalog(path: Path) -> Path:
    path.write_text(HEADER + "\n" + f"aws,us-east-1,,g4dn.xlarge,T4,1,16,4,16,0.526,,{RESERVED_1Y},0.21,,,"
                    "2026-11-30,test catalog\n")
    return path


def _run(tmp_path: Path, extra: str, allow: tuple[str, ...], budget: float) -> tuple[dict, Path]:
    catalog = _catalog(tmp_path / "catalog.csv")
    job = write_job(tmp_path / "job.toml", entrypoint=digits_entrypoint(120), steps=120, nproc=1,
                    budget_usd=budget, allow=allow, extra=extra)
    run_dir = tmp_path / "run"
    rc = main(["run", str(job), "--catalog", str(catalog), "--run-dir", str(run_dir), "--time-scale", "30"])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert rc == 0, summary
    assert summary["status"] == "completed" and summary["steps"] == 120
    assert processes_of(str(run_dir)) == []
    return summary, run_dir


def test_held_reservation_runs_at_zero_marginal_cost_and_its_hours_are_recorded(tmp_path: Path) -> None:
    # The reservation ends a year after whatever today is: the test holds on any date.
    until = (dt.date.today() + dt.timedelta(days=365)).isoformat()
    extra = ("[[purchase.held]]\ncloud = \"aws\"\nregion = \"us-east-1\"\ninstance_type = \"g4dn.xlarge\"\n"
             f"count = 1\nuntil = {until}\n")
    summary, _ = _run(tmp_path, extra, ("on_demand",), 5.0)
    held = [p for p in summary["pools"] if p["purchase"] == "reserved_held"]
    assert held and held[0]["node_hours"] > 0 and held[0]["cost_usd"] == 0, summary["pools"]
    assert summary["cost_usd"] == 0


def test_a_bought_one_year_term_is_charged_in_full_and_counts_against_the_budget(tmp_path: Path) -> None:
    term = RESERVED_1Y * HOURS_PER_YEAR
    summary, run_dir = _run(tmp_path, "", ("reserved_1y",), budget=term * 1.5)
    pools = [p for p in summary["pools"] if p["purchase"] == "reserved_1y"]
    assert pools and pools[0]["cost_usd"] == pytest.approx(term, rel=1e-9)
    assert summary["cost_usd"] == pytest.approx(term, rel=1e-9)
    # 50% of the budget is crossed by the term alone, from the plan's start: the threshold alert says so.
    sent = {p.stem for p in (run_dir / "outbox").glob("*.eml")}
    assert sent & {"forecast-0.5", "actual-0.5"} and "forecast-0.8" not in sent, sent
