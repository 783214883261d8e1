"""Small generated catalogs and demand for the capacity tests."""

from __future__ import annotations

from planner.capacity.demand import ClassDemand, Demand
from pricing.catalog import Catalog, Offering


def offering(gpu: str, instance: str, gpus: int, *, od: float, spot: float | None, r1: float | None,
             r3: float | None, region: str = "us-east-1", cloud: str = "aws") -> Offering:
    # interruption_rate 0: the spot price is used as it is, so a brute force can use the raw numbers.
    return Offering(cloud=cloud, region=region, zone=None, instance_type=instance, gpu=gpu, gpus_per_node=gpus,
                    gpu_memory_gb=40, vcpus=8, memory_gb=64, on_demand=od, spot=spot, reserved_1y=r1,
                    reserved_3y=r3, interruption_rate=0.0, source="test")


def small_catalog() -> Catalog:
    """Two GPU classes: G1 sold as 1-GPU nodes (1y and 3y), G2 as 2-GPU nodes (1y, 3y) and 1-GPU nodes (3y)."""
    return Catalog.of([
        offering("G1", "g1.1x", 1, od=1.00, spot=0.45, r1=0.70, r3=0.52),
        offering("G2", "g2.2x", 2, od=4.00, spot=1.50, r1=2.60, r3=1.90),
        offering("G2", "g2.1x", 1, od=2.10, spot=0.90, r1=None, r3=1.10, region="us-west-2"),
    ])


def demand_of(period: str, series: dict[str, tuple[list[float], float]]) -> Demand:
    horizon = len(next(iter(series.values()))[0])
    classes = tuple(ClassDemand(name, name, tuple(float(v) for v in hours), share)
                    for name, (hours, share) in series.items())
    return Demand("test", period, horizon, classes)
