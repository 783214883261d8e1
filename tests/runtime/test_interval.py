"""Young/Daly formulas against the worked examples of Daly (2006) and spot-and-theory §3."""

from __future__ import annotations

import math

import pytest

from runtime.training import interval

MIN = 60.0
HOUR = 3600.0


@pytest.mark.parametrize(
    ("mtbf_min", "paper_min"),
    [(24 * 60, 117.0), (6 * 60, 57.0), (15, 9.1)],
)
def test_daly_reproduces_the_papers_worked_examples(mtbf_min: float, paper_min: float) -> None:
    tau = interval.daly_interval(5 * MIN, mtbf_min * MIN)
    assert tau / MIN == pytest.approx(paper_min, abs=0.35)


def test_daly_exact_values() -> None:
    assert interval.daly_interval(5 * MIN, 24 * HOUR) / MIN == pytest.approx(116.6898, abs=1e-4)
    assert interval.daly_interval(5 * MIN, 6 * HOUR) / MIN == pytest.approx(56.7130, abs=1e-4)


def test_daly_caps_at_mtbf_when_checkpoints_cost_more_than_two_mtbf() -> None:
    assert interval.daly_interval(3 * HOUR, 1 * HOUR) == 1 * HOUR


def test_young_is_sqrt_2cm() -> None:
    assert interval.young_interval(30, 2 * HOUR) == pytest.approx(math.sqrt(2 * 30 * 7200))
    assert interval.young_interval(30, 2 * HOUR) / MIN == pytest.approx(11.0, abs=0.05)


@pytest.mark.parametrize(
    ("mtbf_h", "cost_s", "young_min", "daly_min", "overhead"),
    [
        (1, 30, 7.7, 7.4, 0.35),
        (2, 120, 21.9, 20.6, 0.31),
        (3.58, 300, 46.3, 43.1, 0.31),
        (8, 30, 21.9, 21.6, 0.07),
        (24, 300, 120.0, 116.7, 0.10),
    ],
)
def test_table_of_spot_and_theory_section_3(
    mtbf_h: float, cost_s: float, young_min: float, daly_min: float, overhead: float
) -> None:
    M, R = mtbf_h * HOUR, 10 * MIN
    assert interval.young_interval(cost_s, M) / MIN == pytest.approx(young_min, abs=0.06)
    tau = interval.daly_interval(cost_s, M)
    assert tau / MIN == pytest.approx(daly_min, abs=0.06)
    assert interval.expected_overhead_fraction(tau, cost_s, M, R) == pytest.approx(overhead, abs=0.006)


def test_daly_interval_minimises_the_exact_overhead() -> None:
    C, M, R = 120.0, 2 * HOUR, 600.0
    best = interval.daly_interval(C, M)
    at_best = interval.expected_overhead_fraction(best, C, M, R)
    for factor in (0.5, 0.8, 1.25, 2.0):
        assert interval.expected_overhead_fraction(best * factor, C, M, R) > at_best


def test_first_order_overhead_underestimates_when_mtbf_is_short() -> None:
    C, M, R = 120.0, 1 * HOUR, 600.0
    exact = interval.expected_overhead_fraction(interval.young_interval(C, M), C, M, R)
    assert interval.first_order_overhead(C, M, R) == pytest.approx(0.43, abs=0.01)
    assert interval.first_order_overhead(C, M, R) < exact


def test_expected_wall_time_scales_with_work() -> None:
    one = interval.expected_wall_time(HOUR, 600, 10, 2 * HOUR, 60)
    assert interval.expected_wall_time(2 * HOUR, 600, 10, 2 * HOUR, 60) == pytest.approx(2 * one)


@pytest.mark.parametrize("bad", [{"C": -1, "M": 10}, {"C": 1, "M": 0}])
def test_invalid_inputs_are_rejected(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        interval.daly_interval(**bad)


def test_estimator_learns_the_cost_and_never_undercuts_the_write_time() -> None:
    est = interval.IntervalEstimator(mtbf_s=2 * HOUR, smoothing=0.5)
    assert est.interval_s is None
    est.observe(stall_s=2.0, write_s=1.0)
    assert est.interval_s == pytest.approx(interval.daly_interval(2.0, 2 * HOUR))
    est.observe(stall_s=4.0, write_s=1.0)
    assert est.cost_s == pytest.approx(3.0)
    est.observe(stall_s=0.0001, write_s=500.0)
    assert est.interval_s >= 250.0


def test_estimator_starts_from_the_controllers_estimate() -> None:
    est = interval.IntervalEstimator(mtbf_s=HOUR, initial_cost_s=10.0)
    assert est.interval_s == pytest.approx(interval.daly_interval(10.0, HOUR))

