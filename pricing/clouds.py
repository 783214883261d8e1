"""Facts about the clouds themselves that both the planner and the runtime use.

``NOTICE_LEAD_S``: how long before a spot reclaim each cloud warns the node -- AWS's
two-minute interruption notice (EC2 docs, "Spot Instance interruption notices"), GCP's
30 s preemption notice (Compute Engine docs, "Spot VMs"), Azure's Scheduled Events
``Preempt`` at least 30 s ahead (Azure docs, "Scheduled Events"). The quote's overhead
model and the runtime's notice watchers and fault injection read it from here only.
"""

from __future__ import annotations

NOTICE_LEAD_S: dict[str, float] = {"aws": 120.0, "gcp": 30.0, "azure": 30.0}
DEFAULT_NOTICE_LEAD_S = 30.0
"""For a cloud not listed (e.g. one imported from a SkyPilot catalog): the shortest lead above."""


def notice_lead_s(cloud: str) -> float:
    """Seconds of warning ``cloud`` gives before it reclaims a spot node."""
    return NOTICE_LEAD_S.get(cloud, DEFAULT_NOTICE_LEAD_S)
