"""Benchmark the capacity MILP: a 3-year weekly horizon (156 periods) with 20 GPU classes over all regions.

Run by hand: ``python bench/capacity.py [--repeat 5] [--json]``.  Two cases:

* ``embedded``: the embedded catalog; its 15 GPU types as classes over every region, plus 5
  classes restricted to region groups (``us-*``, ``europe-*``, ``asia-*``, ...), 20 in all.
  Only the GPU types the catalog has reservation prices for get reservation variables.
* ``synthetic``: a generated catalog in which every one of 20 GPU types is sold in each of the
  embedded catalog's regions as 1-, 4- and 8-GPU instances, each with on-demand, spot and
  1y/3y prices that differ by region: every class has reservation options, the hard case.

Demand per class: a seasonal weekly series with noise and growth (seeded, the same every run),
30% preemptible.  Times are the model build plus the HiGHS solve (one `model.solve`), CPU
(process time, all threads) and wall, median of ``--repeat`` runs; the load average is printed
before and after, because on a shared machine wall time measures the neighbours too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from planner.capacity.demand import ClassDemand, Demand
from planner.capacity.model import solve
from planner.capacity.offers import class_offers
from pricing.catalog import Catalog, Offering
from pricing.embedded_catalog import load_embedded_catalog

HORIZON = 156
CLASSES = 20
ALLOW = ("on_demand", "spot", "reserved_1y", "reserved_3y")
REGION_GROUPS = ("us-*", "europe-*", "us-east*", "*west*", "*central*")


def weekly_series(rng: np.random.Generator, base: float) -> tuple[float, ...]:
    t = np.arange(HORIZON)
    season = 1 + 0.25 * np.sin(2 * np.pi * t / 52) + 0.1 * np.sin(2 * np.pi * t / 13)
    noise = rng.lognormal(0, 0.2, HORIZON)
    return tuple(float(v) for v in base * season * noise * 1.004 ** t)


def embedded_case(rng: np.random.Generator) -> tuple[Demand, Catalog]:
    catalog = load_embedded_catalog()
    gpus = list(catalog.gpus)
    classes = [ClassDemand(g, g, weekly_series(rng, rng.uniform(500, 5000)), 0.3) for g in gpus]
    for i in range(CLASSES - len(gpus)):
        gpu = ("A100", "H100", "V100", "L4", "A10G")[i % 5]
        classes.append(ClassDemand(f"{gpu}-{i}", gpu, weekly_series(rng, rng.uniform(500, 5000)), 0.3,
                                   regions=(REGION_GROUPS[i],)))
    return Demand("bench-embedded", "week", HORIZON, tuple(classes)), catalog


def synthetic_case(rng: np.random.Generator) -> tuple[Demand, Catalog]:
    regions = sorted({(o.cloud, o.region) for o in load_embedded_catalog()})
    offerings = []
    for g in range(CLASSES):
        gpu = f"GPU{g:02d}"
        base = rng.uniform(0.5, 6.0)
        for cloud, region in regions:
            for gpn in (1, 4, 8):
                od = base * gpn * rng.uniform(0.9, 1.3)
                offerings.append(Offering(
                    cloud=cloud, region=region, zone=None, instance_type=f"{gpu.lower()}.{gpn}x", gpu=gpu,
                    gpus_per_node=gpn, gpu_memory_gb=80, vcpus=8 * gpn, memory_gb=64 * gpn, on_demand=od,
                    spot=od * rng.uniform(0.3, 0.6), reserved_1y=od * rng.uniform(0.6, 0.7),
                    reserved_3y=od * rng.uniform(0.4, 0.5), interruption_bucket=">20%", source="synthetic bench"))
    classes = [ClassDemand(f"GPU{g:02d}", f"GPU{g:02d}", weekly_series(rng, rng.uniform(500, 5000)), 0.3)
               for g in range(CLASSES)]
    return Demand("bench-synthetic", "week", HORIZON, tuple(classes)), Catalog.of(offerings, "synthetic")


def measure(demand: Demand, catalog: Catalog, repeat: int) -> dict:
    offers = class_offers(demand, catalog, allow=ALLOW)
    options = sum(len(o.reserved) for o in offers.values())
    walls, cpus, tcos = [], [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        plan = solve(demand, offers)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        tcos.append(plan.tco_usd)
    return {"case": demand.name, "classes": len(demand.classes), "periods": demand.horizon,
            "reservation_options": options, "integer_variables": options * demand.horizon,
            "offerings": len(catalog), "median_wall_s": round(statistics.median(walls), 3),
            "median_cpu_s": round(statistics.median(cpus), 3), "max_wall_s": round(max(walls), 3),
            "runs": repeat, "tco_usd": round(tcos[0], 2), "reservations": len(plan.reservations)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()
    results = []
    for case in (embedded_case, synthetic_case):
        demand, catalog = case(np.random.default_rng(7))
        results.append(measure(demand, catalog, args.repeat))
    load_after = os.getloadavg()
    out = {"cpus": os.cpu_count(), "load_before": [round(x, 2) for x in load_before],
           "load_after": [round(x, 2) for x in load_after], "results": results}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"cores {out['cpus']}, load average before {out['load_before']}, after {out['load_after']}")
        for r in results:
            print(f"{r['case']}: {r['classes']} classes x {r['periods']} weeks, {r['reservation_options']} "
                  f"reservation options ({r['integer_variables']} active-count variables) over {r['offerings']} offerings: "
                  f"median {r['median_wall_s']} s wall, {r['median_cpu_s']} s CPU (max wall {r['max_wall_s']} s, "
                  f"{r['runs']} runs); TCO ${r['tco_usd']:,.0f}, {r['reservations']} purchases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
