"""Reserved capacity: held reservations are used first at zero marginal cost, up to their
count and end date; a new term bought for one job is charged whole."""

from __future__ import annotations

import datetime as dt

import pytest

from planner.errors import PlannerError
from planner.job import parse_job
from planner.quote import make_quote
from pricing.catalog import Catalog, Offering
from pricing.pool import HELD

TODAY = dt.date(2026, 11, 30)
NOW = dt.datetime.combine(TODAY, dt.time(), tzinfo=dt.UTC)
CATALOG = Catalog.of([
    Offering("aws", "us-east-1", None, "p4d.24xlarge", "A100", 8, 40, 96, 1152, 21.96, spot=9.0,
             reserved_1y=13.92),
    Offering("aws", "us-east-1", None, "p5.48xlarge", "H100", 8, 80, 192, 2048, 55.04),
])


def job(tokens, held=(), allow=("on_demand",), **constraints):
    return parse_job({
        "name": "r", "workload": {"model": "gpt-7b", "tokens": tokens},
        "constraints": {"max_nodes": 4, **constraints},
        "purchase": {"allow": list(allow), "held": list(held)},
    })


HELD_2 = {"cloud": "aws", "region": "us-east-1", "instance_type": "p4d.24xlarge", "count": 2, "until": "2027-03-01"}


def test_held_capacity_is_used_first_and_free():
    q = make_quote(job(5e9, [HELD_2]), CATALOG, top=0, frontier_points=0, now=NOW)
    (phase,) = q.plan.solution.phases
    assert phase.config.purchase == HELD and phase.config.nodes == 2
    assert q.plan.expected_cost_usd == 0


def test_held_capacity_ends_then_on_demand_finishes():
    soon = {**HELD_2, "until": (TODAY + dt.timedelta(days=1)).isoformat()}
    q = make_quote(job(2e10, [soon]), CATALOG, top=0, frontier_points=0, now=NOW)
    held = [p for p in q.plan.solution.phases if p.config.purchase == HELD]
    assert held and held[0].hours == pytest.approx(24.0)
    assert q.plan.solution.phases[0].config.purchase == HELD  # used first
    assert len(q.plan.solution.phases) == 2 and q.plan.expected_cost_usd > 0


def test_held_hours_count_from_the_moment_of_the_plan_not_from_midnight():
    """At 18:00 the day before a reservation's `until`, 6 hours of it are left, not a whole day."""
    soon = {**HELD_2, "until": (TODAY + dt.timedelta(days=1)).isoformat()}
    evening = NOW + dt.timedelta(hours=18)
    q = make_quote(job(2e10, [soon]), CATALOG, top=0, frontier_points=0, now=evening)
    held = [p for p in q.plan.solution.phases if p.config.purchase == HELD]
    assert held and held[0].hours == pytest.approx(6.0)
    assert held[0].config.pool.term_hours == pytest.approx(6.0)
    late = make_quote(job(2e10, [soon]), CATALOG, top=0, frontier_points=0, now=NOW + dt.timedelta(days=1, minutes=1))
    assert all(p.config.purchase != HELD for p in late.plan.solution.phases)
    assert any("ended" in w for w in late.candidates.warnings)


def test_an_until_with_a_time_of_day_ends_the_reservation_then():
    """A capacity block ends at a time of day (AWS's at 11:30 UTC): `until` may say so, with its offset."""
    block = {**HELD_2, "until": (NOW + dt.timedelta(hours=11, minutes=30)).isoformat()}
    q = make_quote(job(2e10, [block]), CATALOG, top=0, frontier_points=0, now=NOW + dt.timedelta(hours=8))
    held = [p for p in q.plan.solution.phases if p.config.purchase == HELD]
    assert held and held[0].config.pool.term_hours == pytest.approx(3.5)
    # The same moment written in another offset is the same end.
    paris = {**HELD_2, "until": "2026-11-30T12:30:00+01:00"}
    q2 = make_quote(job(2e10, [paris]), CATALOG, top=0, frontier_points=0, now=NOW + dt.timedelta(hours=8))
    assert [p.config.pool.term_hours for p in q2.plan.solution.phases if p.config.purchase == HELD] == [
        pytest.approx(3.5)]
    late = make_quote(job(2e10, [block]), CATALOG, top=0, frontier_points=0, now=NOW + dt.timedelta(hours=12))
    assert any("ended at 2026-11-30 11:30 UTC" in w for w in late.candidates.warnings)


def test_a_capacity_block_serves_until_forty_minutes_before_its_end():
    """AWS begins terminating a Capacity Block's instances 30 minutes before its end, with a warning
    10 minutes before that: the plan leaves it at the warning."""
    block = {**HELD_2, "until": (NOW + dt.timedelta(hours=11, minutes=30)).isoformat(),
             "reservation_id": "cr-0123456789abcdef0", "capacity_block": True}
    q = make_quote(job(2e10, [block]), CATALOG, top=0, frontier_points=0, now=NOW + dt.timedelta(hours=8))
    held = [p for p in q.plan.solution.phases if p.config.purchase == HELD]
    assert held and held[0].config.pool.term_hours == pytest.approx(3.5 - 40 / 60)
    # Between the warning and the end it serves no more, and the warning says why.
    late = make_quote(job(2e10, [block]), CATALOG, top=0, frontier_points=0,
                      now=NOW + dt.timedelta(hours=11))
    assert all(p.config.purchase != HELD for p in late.plan.solution.phases)
    assert any("capacity block cr-0123456789abcdef0 ends at 2026-11-30 11:30 UTC" in w
               and "leaves it at 2026-11-30 10:50 UTC" in w for w in late.candidates.warnings)
    # A reservation that is not a block serves to its end.
    plain = {**HELD_2, "until": block["until"], "reservation_id": "cr-0123456789abcdef0"}
    q2 = make_quote(job(2e10, [plain]), CATALOG, top=0, frontier_points=0, now=NOW + dt.timedelta(hours=8))
    assert [p.config.pool.term_hours for p in q2.plan.solution.phases if p.config.purchase == HELD] == [
        pytest.approx(3.5)]


@pytest.mark.parametrize("bad", [
    {"capacity_block": True},
    {"capacity_block": True, "cloud": "gcp", "reservation_id": "cr-0123456789abcdef0"},
    {"capacity_block": True, "reservation_id": "cb-team-a100"},
])
def test_a_capacity_block_needs_aws_and_its_reservation_id(bad):
    from planner.errors import JobSpecError

    with pytest.raises(JobSpecError, match=r"purchase\.held\[0\].*capacity_block = true.*cloud = \"aws\".*cr-"):
        job(1e9, [{**HELD_2, **bad}])


def test_a_reservation_that_starts_later_is_in_no_plan_before_it_starts():
    later = {**HELD_2, "starts": (NOW + dt.timedelta(hours=10)).isoformat()}
    before = make_quote(job(2e10, [later]), CATALOG, top=0, frontier_points=0, now=NOW)
    assert all(p.config.purchase != HELD for p in before.plan.solution.phases)
    assert any("purchase.held[0]: starts at 2026-11-30 10:00 UTC; not in this plan" in w
               for w in before.candidates.warnings)
    after = make_quote(job(2e10, [later]), CATALOG, top=0, frontier_points=0, now=NOW + dt.timedelta(hours=10))
    assert after.plan.solution.phases[0].config.purchase == HELD
    assert not any("starts" in w for w in after.candidates.warnings)


@pytest.mark.parametrize(("starts", "message"), [
    ("2027-03-01", r"starts \(2027-03-01T00:00:00\+00:00\) must be before the reservation ends \(until 2027-03-01"),
    (dt.datetime(2027, 2, 1, 12), r"purchase\.held\[0\]\.starts: .*no UTC offset"),
])
def test_a_start_not_before_the_end_or_without_an_offset_is_refused(starts, message):
    from planner.errors import JobSpecError

    with pytest.raises(JobSpecError, match=message):
        job(1e9, [{**HELD_2, "starts": starts}])


def test_an_until_without_an_offset_is_refused_with_the_fix():
    from planner.errors import JobSpecError

    with pytest.raises(JobSpecError, match=r"purchase\.held\[0\]\.until: .*no UTC offset.*Z"):
        job(1e9, [{**HELD_2, "until": dt.datetime(2027, 3, 1, 11, 30)}])


def test_ended_reservation_is_ignored_with_a_warning():
    old = {**HELD_2, "until": "2026-01-01"}
    q = make_quote(job(1e9, [old]), CATALOG, top=0, frontier_points=0, now=NOW)
    assert all(p.config.purchase != HELD for p in q.plan.solution.phases)
    assert any("ended" in w for w in q.candidates.warnings)


def test_unknown_held_instance_names_the_key():
    bad = {**HELD_2, "instance_type": "p4x.24xlarge"}
    with pytest.raises(PlannerError, match=r"purchase.held\[0\]"):
        make_quote(job(1e9, [bad]), CATALOG, top=0, frontier_points=0, now=NOW)


def test_new_term_is_charged_whole():
    q = make_quote(job(1e9, allow=("reserved_1y",)), CATALOG, top=0, frontier_points=0, now=NOW)
    (phase,) = q.plan.solution.phases
    assert phase.config.purchase == "reserved_1y"
    assert q.plan.expected_cost_usd == pytest.approx(13.92 * 8760 * phase.config.nodes)
    assert any(line.label.startswith("reserved terms") for line in q.plan.lines)
    # with on-demand allowed, a one-year term is never worth it for a short job
    q2 = make_quote(job(1e9, allow=("reserved_1y", "on_demand")), CATALOG, top=0, frontier_points=0, now=NOW)
    assert all(p.config.purchase == "on_demand" for p in q2.plan.solution.phases)


def test_quote_json_phases_read_back_as_pools_term_included():
    """The runtime rebuilds each phase's pool from the quote's JSON: Pool.from_dict(phase)."""
    from planner.report import plan_json
    from pricing.pool import Pool

    for allow, held in ((("reserved_1y",), ()), (("on_demand",), [HELD_2])):
        q = make_quote(job(1e9, held, allow=allow), CATALOG, top=0, frontier_points=0, now=NOW)
        for phase, shown in zip(q.plan.solution.phases, plan_json(q.plan)["phases"]):
            pool = Pool.from_dict(shown)
            assert pool == phase.config.pool and shown["nodes"] == phase.config.nodes
            assert shown["hours"] == pytest.approx(phase.hours, abs=1e-4)
    term = make_quote(job(1e9, allow=("reserved_1y",)), CATALOG, top=0, frontier_points=0, now=NOW)
    (shown,) = plan_json(term.plan)["phases"]
    assert shown["term_hours"] == 8760 and shown["term_usd"] == pytest.approx(13.92 * 8760)
    assert shown["term_cost_usd"] == pytest.approx(13.92 * 8760 * shown["nodes"])
    held = make_quote(job(5e9, [HELD_2]), CATALOG, top=0, frontier_points=0, now=NOW)
    (shown,) = plan_json(held.plan)["phases"]
    assert shown["purchase"] == HELD and shown["term_hours"] == (dt.date(2027, 3, 1) - TODAY).days * 24


def test_two_reservations_of_one_type_are_two_pools_each_with_its_count_end_and_id():
    """A launch runs in one reservation: two of the same instance type cannot be pooled into one launch
    of their summed count (the cloud would refuse the nodes past one's count), and each ends on its own day."""
    from planner.report import plan_json
    from pricing.pool import Pool

    short = {**HELD_2, "count": 1, "until": (TODAY + dt.timedelta(days=1)).isoformat(),
             "reservation_id": "cr-0aaaaaaaaaaaaaaaa"}
    long = {**HELD_2, "count": 2, "until": (TODAY + dt.timedelta(days=3)).isoformat(),
            "reservation_id": "cr-0bbbbbbbbbbbbbbbb"}
    q = make_quote(job(2e10, [short, long]), CATALOG, top=0, frontier_points=0, now=NOW)
    held = {p.config.pool.id: p for p in q.plan.solution.phases if p.config.purchase == HELD}
    a, b = (held[f"aws:us-east-1:p4d.24xlarge@cr-0{c * 16}"] for c in "ab")  # each a phase of its own
    assert (a.config.nodes, a.config.pool.term_hours) == (1, 24.0)
    assert (b.config.nodes, b.config.pool.term_hours) == (2, 72.0)
    shown = {s["reservation"]: s for s in plan_json(q.plan)["phases"] if s["purchase"] == HELD}
    assert Pool.from_dict(shown["cr-0bbbbbbbbbbbbbbbb"]) == b.config.pool
    assert b.config.pool.label(2) == "2x p4d.24xlarge reserved_held aws:us-east-1 cr-0bbbbbbbbbbbbbbbb"
    # Untargeted entries (the cloud applies them by themselves) stay one pool of their type.
    plain = make_quote(job(5e9, [HELD_2]), CATALOG, top=0, frontier_points=0, now=NOW)
    (phase,) = plain.plan.solution.phases
    assert phase.config.pool.id == "aws:us-east-1:p4d.24xlarge" and "reservation" not in plan_json(plain.plan)["phases"][0]


def test_a_configuration_takes_its_prices_and_term_from_its_pool():
    q = make_quote(job(1e9, allow=("reserved_1y",)), CATALOG, top=0, frontier_points=0, now=NOW)
    cfg = q.plan.solution.phases[0].config
    assert (cfg.hourly_usd, cfg.burn) == (0.0, 0.0)
    assert cfg.fixed_usd == pytest.approx(cfg.pool.term_usd * cfg.nodes)
    assert cfg.max_hours == cfg.pool.term_hours == 8760
    assert cfg.family == cfg.pool.key == ("aws:us-east-1:p4d.24xlarge", "reserved_1y")
