"""A capacity queue's held nodes as its jobs' re-plans see them (runtime/control/held.py): the nodes
free now, for the hours left in the window they are in."""

from __future__ import annotations

import datetime as dt

import pytest

from planner.job import parse_job
from planner.quote import make_quote
from pricing.catalog import Catalog, Offering
from pricing.pool import HELD, Pool
from runtime.control.held import HeldAllotment, Window
from runtime.control.replan import elsewhere_usd_per_hour

NOW = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.UTC)  # the run's clock; the queue's is in `hours`
KEY = ("aws", "us-east-1", "p4d.24xlarge")
OFFERING = Offering("aws", "us-east-1", None, "p4d.24xlarge", "A100", 8, 40, 96, 1152, 21.96, spot=9.0)
CATALOG = Catalog.of([OFFERING])
FAR = dt.date(2027, 6, 1)  # what job_for_run gives a queue's reservations: past the queue's horizon


def job(count: int = 2):
    return parse_job({
        "name": "q", "workload": {"model": "gpt-7b", "tokens": 2e10},
        "constraints": {"max_nodes": 2},
        "purchase": {"allow": ["on_demand"], "held": [
            {"cloud": "aws", "region": "us-east-1", "instance_type": "p4d.24xlarge", "count": count,
             "until": FAR.isoformat()}]},
    })


def test_a_replan_late_in_a_window_counts_only_the_hours_left_in_it():
    queue_hours = {"now": 1.0}
    allotment = HeldAllotment([Window(KEY, 2, 0.0, 4.0), Window(KEY, 2, 4.0, 10.0)], hours=lambda: queue_hours["now"])
    (held,) = allotment.job_view(job(), NOW).purchase.held
    assert held.count == 2 and held.ends_at == NOW + dt.timedelta(hours=3)
    q = make_quote(allotment.job_view(job(), NOW), CATALOG, top=0, frontier_points=0, now=NOW)
    on_held = [p for p in q.plan.solution.phases if p.config.purchase == HELD]
    assert on_held and on_held[0].config.pool.term_hours == pytest.approx(3.0)
    assert q.plan.expected_cost_usd > 0  # the rest is paid for on demand
    # Another job holds one node: the view has the other one. In the next window, its end counts.
    pool = Pool.held(OFFERING, hours_left=1.0)
    assert allotment.try_take(pool, 1)
    queue_hours["now"] = 5.0
    (held,) = allotment.job_view(job(), NOW).purchase.held
    assert held.count == 1 and held.ends_at == NOW + dt.timedelta(hours=5)


def test_a_window_without_an_end_keeps_the_jobs_own_until():
    allotment = HeldAllotment([Window(KEY, 2, 0.0)], hours=lambda: 5.0)
    assert allotment.job_view(job(), NOW) == job()
    # Outside every window the queue's reservation is not in the view at all.
    later = HeldAllotment([Window(KEY, 2, 0.0, 4.0)], hours=lambda: 5.0)
    assert later.job_view(job(), NOW).purchase.held == ()


def test_a_waiting_job_is_first_in_line_for_the_nodes_it_waits_for():
    allotment = HeldAllotment([Window(KEY, 2, 0.0)], hours=lambda: 1.0)
    pool = Pool.held(OFFERING, hours_left=10.0)
    assert allotment.try_take(pool, 2, "a")
    allotment.wait("b", pool, 1, slack_h=3.0, hours=2.0)
    allotment.wait("c", pool, 1, slack_h=3.0, hours=2.0)
    allotment.give_back(pool, 1, "a")
    assert allotment.free(pool) == 1
    # The freed node is b's: not c's (behind b), nor a re-plan's, nor a launch that never waited.
    assert not allotment.try_take(pool, 1, "c") and not allotment.try_take(pool, 1)
    assert allotment.job_view(job(), NOW).purchase.held == ()
    assert allotment.try_take(pool, 1, "b")
    allotment.done_waiting("b")
    allotment.give_back(pool, 1, "a")
    assert allotment.try_take(pool, 1, "c")  # first in line now


def test_the_holder_with_less_work_left_moves_off_for_a_waiter_that_cannot_wait():
    hours = {"now": 1.0}
    allotment = HeldAllotment([Window(KEY, 1, 0.0)], hours=lambda: hours["now"])
    pool = Pool.held(OFFERING, hours_left=10.0)
    assert allotment.try_take(pool, 1, "a")
    assert not allotment.others_wait("a", pool)
    assert allotment.must_yield("a", pool, 1, remaining_h=2.0, restart_h=0.1) is None  # nobody waits
    allotment.wait("b", pool, 1, slack_h=3.0, hours=5.0)
    assert allotment.others_wait("a", pool) and not allotment.others_wait("b", pool)
    # b can wait the 2 h a has left: a keeps the node (b starts on it after a, as scheduled).
    assert allotment.must_yield("a", pool, 1, remaining_h=2.0, restart_h=0.1) is None
    hours["now"] = 2.5  # b's deadline now leaves it 1.5 h: it cannot wait a's 2 h
    assert allotment.must_yield("a", pool, 1, remaining_h=6.0, restart_h=0.1) is None  # a has more left than b
    assert not allotment.yield_pending(pool)
    assert allotment.must_yield("a", pool, 1, remaining_h=2.0, restart_h=0.1) == "b"
    assert allotment.yield_pending(pool)
    allotment.give_back(pool, 1, "a")
    assert not allotment.yield_pending(pool)
    assert allotment.try_take(pool, 1, "b")


def test_the_job_whose_move_costs_less_moves_off_whatever_the_node_hours():
    # a has 2 h left on the node, b 5 h: by node-hours a moves. But a can only run on GPUs that cost
    # $20 an hour of this node's work, b on ones that cost $2: b moving costs $10, a moving $42.
    pool = Pool.held(OFFERING, hours_left=10.0)

    def a_holds_and_b_waits(b_usd_per_hour: float | None) -> HeldAllotment:
        allotment = HeldAllotment([Window(KEY, 1, 0.0)], hours=lambda: 1.0)
        assert allotment.try_take(pool, 1, "a")
        allotment.wait("b", pool, 1, slack_h=0.5, hours=5.0, usd_per_hour=b_usd_per_hour)
        return allotment

    assert a_holds_and_b_waits(2.0).must_yield("a", pool, 1, remaining_h=2.0, restart_h=0.1, usd_per_hour=20.0) is None
    assert a_holds_and_b_waits(2.0).must_yield("a", pool, 1, remaining_h=2.0, restart_h=0.1, usd_per_hour=4.0) == "b"
    # Without either price, node-hours decide: a has the fewer.
    assert a_holds_and_b_waits(2.0).must_yield("a", pool, 1, remaining_h=2.0, restart_h=0.1) == "b"
    assert a_holds_and_b_waits(None).must_yield("a", pool, 1, remaining_h=2.0, restart_h=0.1, usd_per_hour=20.0) == "b"
    assert a_holds_and_b_waits(None).must_yield("a", pool, 1, remaining_h=6.0, restart_h=0.1, usd_per_hour=0.1) is None


def test_moving_costs_what_the_cheapest_capacity_the_job_may_use_would():
    l40s = Offering("aws", "us-east-1", None, "g6e.xlarge", "L40S", 1, 48, 4, 32, 1.861, spot=0.7)
    t4 = Offering("aws", "us-east-1", None, "g4dn.xlarge", "T4", 1, 16, 4, 16, 0.526, spot=0.16)
    catalog = Catalog.of([OFFERING, l40s, t4])
    pool = Pool.held(OFFERING, hours_left=10.0)
    big = parse_job({**job().model_dump(mode="json", exclude_none=True),
                     "workload": {"model": "gpt-7b", "tokens": 2e10, "throughput": {"T4": 1000.0}}})
    # The T4 is the cheapest per token but has 16 GB of the 40 gpt-7b needs: the L40S is what a's
    # 16 A100s' hour costs elsewhere, by each GPU's speed in the table.
    a100, l40s_speed = 3679.0, 3230.8
    assert elsewhere_usd_per_hour(big, catalog, pool, 2) == pytest.approx(1.861 / l40s_speed * a100 * 8 * 2, rel=1e-3)
    small = parse_job({**job().model_dump(mode="json", exclude_none=True),
                       "workload": {"model": "gpt-7b", "tokens": 2e10, "min_gpu_memory_gb": 16,
                                    "throughput": {"T4": 1000.0}}})
    assert elsewhere_usd_per_hour(small, catalog, pool, 2) == pytest.approx(0.526 / 1000.0 * a100 * 8 * 2, rel=1e-3)
    spot_only = parse_job({**job().model_dump(mode="json", exclude_none=True), "purchase": {"allow": ["spot"]}})
    assert elsewhere_usd_per_hour(spot_only, catalog, pool, 1) == pytest.approx(0.7 / l40s_speed * a100 * 8, rel=1e-3)
    assert elsewhere_usd_per_hour(job(), Catalog.of([t4]), pool, 1) is None  # nothing with 40 GB to move to


def test_a_holder_does_not_move_off_for_a_waiter_its_nodes_would_not_let_start():
    allotment = HeldAllotment([Window(KEY, 2, 0.0)], hours=lambda: 1.0)
    pool = Pool.held(OFFERING, hours_left=10.0)
    assert allotment.try_take(pool, 1, "a") and allotment.try_take(pool, 1, "c")
    allotment.wait("b", pool, 2, slack_h=0.0, hours=5.0)  # needs both nodes: a's alone do not do
    assert allotment.must_yield("a", pool, 1, remaining_h=1.0, restart_h=0.1) is None
    allotment.give_back(pool, 1, "c")
    assert allotment.must_yield("a", pool, 1, remaining_h=1.0, restart_h=0.1) == "b"
