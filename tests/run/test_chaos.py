"""The --chaos spec: parsing, errors that say what to fix, deterministic schedules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pricing.catalog import Offering
from pricing.pool import Pool
from runtime.control.chaos import (
    ChaosClock,
    ChaosSpecError,
    parse_chaos,
    parse_duration,
)
from tests.conftest import shared_path


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("20s", 20.0), ("20", 20.0), ("5m", 300.0), ("1.5h", 5400.0), ("250ms", 0.25), (" 2 s ", 2.0)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, what="at") == seconds


def test_at_offsets_are_sorted_and_scheduled_as_given() -> None:
    spec = parse_chaos("at=45s,20s")
    assert spec.at == (20.0, 45.0)
    assert spec.schedule(time_scale=60, horizon_s=3600) == (20.0, 45.0)
    assert spec.schedule(time_scale=60, horizon_s=30) == (20.0,)


def test_rate_is_poisson_with_the_given_mean_and_reproducible() -> None:
    spec = parse_chaos("rate=1/5m;seed=3")
    assert spec.rate_per_s == pytest.approx(1 / 300)
    times = spec.schedule(time_scale=1, horizon_s=300 * 2000)
    assert times == parse_chaos("rate=1/5m; seed=3").schedule(time_scale=1, horizon_s=300 * 2000)
    assert len(times) == pytest.approx(2000, rel=0.1)
    assert times != parse_chaos("rate=1/5m;seed=4").schedule(time_scale=1, horizon_s=300 * 2000)
    assert parse_chaos("rate=3/h").rate_per_s == pytest.approx(3 / 3600)


def test_repeated_flags_combine() -> None:
    spec = parse_chaos(["at=10s", "notice=azure", "node=0", "refuse=aws, on_demand"])
    assert (spec.at, spec.notice, spec.node, spec.refuse) == ((10.0,), "azure", 0, ("aws", "on_demand"))


def test_refuse_names_pools_by_cloud_purchase_option_or_id() -> None:
    t4 = Offering("azure", "eastus", None, "Standard_NC4as_T4_v3", "T4", 1, 16, 4, 28, 0.60, spot=0.20)
    on_demand, spot = Pool.of(t4, "on_demand"), Pool.of(t4, "spot")
    assert parse_chaos("refuse=azure").refuses(spot) and parse_chaos("refuse=azure").refuses(on_demand)
    assert parse_chaos("refuse=on_demand").refuses(on_demand) and not parse_chaos("refuse=on_demand").refuses(spot)
    by_id = parse_chaos("refuse=azure:eastus:Standard_NC4as_T4_v3")
    assert by_id.refuses(spot) and by_id.refuses(on_demand)  # a zoneless spot pool has its on-demand pool's id
    assert not parse_chaos("refuse=gcp,spot").refuses(on_demand) and not parse_chaos("at=1s").refuses(spot)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("when=20s", "key one of at, rate"),
        ("at=twenty", "not a duration"),
        ("rate=5m", "COUNT/DURATION"),
        ("rate=0/5m", "COUNT/DURATION"),
        ("notice=oracle", "use aws, gcp or azure"),
        ("at=1s;at=2s", "given twice"),
        ("seed=-1", "whole number"),
        ("trace=/nonexistent/trace.json", "no such trace file"),
        ("refuse=oracle", "not a cloud, a purchase option or a pool id"),
    ],
)
def test_bad_specs_name_the_clause_and_the_fix(text: str, message: str) -> None:
    with pytest.raises(ChaosSpecError, match=message):
        parse_chaos(text)


def test_trace_replay_turns_each_loss_of_availability_into_a_preemption(tmp_path: Path) -> None:
    # 1 = spot unavailable (the traces' polarity); losses at ticks 2 and 5.
    path = tmp_path / "us-east-1a_v100_1.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [0, 0, 1, 1, 0, 1, 0]}))
    spec = parse_chaos(f"trace={path}")
    assert spec.trace_offsets == (1200.0, 3000.0)
    assert spec.schedule(time_scale=60, horizon_s=3600) == (20.0, 50.0)


def test_real_trace_replays(tmp_path: Path) -> None:
    folder = shared_path("traces", "skypilot-spot-traces", "availability", "1-node", "aws-02-15-2023")
    spec = parse_chaos(f"trace={folder / 'us-east-1a_v100_1.json'}")
    assert spec.trace_offsets and all(t % 195 == 0 for t in spec.trace_offsets)


def test_clock_hands_out_each_time_once_in_order() -> None:
    clock = ChaosClock((5.0, 10.0, 30.0))
    assert clock.next_due(4) is None
    assert clock.next_due(12) == 5.0
    assert clock.next_due(12) == 10.0
    assert clock.next_due(12) is None
    restored = ChaosClock((5.0, 10.0, 30.0), fired=clock.fired)
    assert restored.next_due(31) == 30.0
    assert restored.next_due(1e9) is None
