"""No plan serves less than the demand, or more spot than the declared share (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.capacity.model import solve
from planner.capacity.offers import offers_for

from .helpers import demand_of, small_catalog

hours = st.lists(st.floats(min_value=0, max_value=3000, allow_nan=False), min_size=3, max_size=10)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g1=hours, g2=hours, share1=st.floats(0, 1), share2=st.floats(0, 1),
       period=st.sampled_from(["day", "week", "month"]), rule=st.sampled_from(["pro_rata", "whole"]),
       allow=st.sampled_from([("on_demand", "spot", "reserved_1y", "reserved_3y"), ("on_demand", "reserved_3y"),
                              ("spot", "reserved_1y"), ("on_demand", "spot")]))
def test_plan_serves_demand_exactly_and_spot_within_share(g1, g2, share1, share2, period, rule, allow) -> None:
    n = min(len(g1), len(g2))
    demand = demand_of(period, {"G1": (g1[:n], share1), "G2": (g2[:n], share2)})
    catalog = small_catalog()
    offers = {c.name: offers_for([o for o in catalog if o.gpu == c.gpu], set(allow), 0.25) for c in demand.classes}
    plan = solve(demand, offers, rule)
    for cls in demand.classes:
        s = plan.served[cls.name]
        D = np.asarray(cls.gpu_hours)
        tol = 1e-6 * np.maximum(D, 1.0)
        assert np.all(np.abs(s.reserved_used + s.spot + s.on_demand - D) <= tol)
        assert np.all(s.spot <= cls.preemptible_share * D + tol)
        assert np.all(s.reserved_used <= s.reserved_capacity + tol)
        assert np.all(np.minimum.reduce([s.spot, s.on_demand, s.reserved_used]) >= -tol)
        if "on_demand" not in allow:
            assert np.all(s.on_demand <= tol)
        if "spot" not in allow:
            assert np.all(s.spot <= tol)
    # buying nothing is always a candidate, so the plan never costs more than the elastic-only plan
    if "on_demand" in allow:
        elastic_only = solve(demand, {k: type(v)(v.on_demand, v.spot, ()) for k, v in offers.items()}, rule)
        assert plan.tco_usd <= elastic_only.tco_usd * (1 + 1e-9) + 1e-6
