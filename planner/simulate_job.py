"""The simulated job from ``job.toml``: work hours, deadline, restart overhead and prices.

``planner simulate JOB --trace PATH`` needs the *Can't Be Late* model (C, D, d and
two prices).  They come from the job and the catalog, on one pool:

1. ``--pool cloud:region:instance_type`` when given;
2. else the instance type the trace was recorded on, read from its file names
   (``us-east-1a_v100_1.json`` is a p3.2xlarge in us-east-1: :data:`TRACE_INSTANCES`),
   in the first zone's region;
3. else the pool the quote chooses for the job.

C is the job's work over the throughput of ``nodes`` nodes of that pool (the
``[workload]`` figures, DDP scaling included); D is ``constraints.deadline_hours``;
d is ``overheads.restart_minutes``.  On-demand is the catalog's price for the pool;
spot is the trace's own prices where it has them, else the catalog's cheapest spot
price in the region.  Prices are per node and multiplied by ``nodes``.  Every value
can be overridden by a flag; the result says where each one came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from planner.errors import PlannerError
from planner.job import JobSpec, Overheads
from planner.simulate import DEFAULT_ON_DEMAND_PRICE, DEFAULT_SPOT_PRICE, JobModel
from planner.workload import work_model
from pricing.catalog import Catalog, Offering
from pricing.traces import MultiPoolTrace

TRACE_INSTANCES = {
    # file-name suffix of the SkyPilot spot-traces -> (cloud, instance type); SOURCE.md there
    "v100_1": ("aws", "p3.2xlarge"),
    "v100_8": ("aws", "p3.16xlarge"),
    "k80_1": ("aws", "p2.xlarge"),
    "k80_8": ("aws", "p2.8xlarge"),
}
_AWS_ZONE = re.compile(r"^([a-z]{2}(?:-gov)?-[a-z]+-\d+)[a-z]$")
_GCP_ZONE = re.compile(r"^([a-z]+-[a-z]+\d+)-[a-z]$")


class SimulateJobError(PlannerError):
    """The job and catalog cannot say what to simulate (names the key or flag that would)."""


@dataclass(frozen=True, slots=True)
class SimulatedJob:
    """The model to simulate and, per value, where it came from (for the table and ``--json``)."""

    model: JobModel
    pool: str | None
    nodes: int
    sources: dict[str, str]


def trace_instance(trace: MultiPoolTrace) -> tuple[str, str, str] | None:
    """(cloud, region, instance type) the trace was recorded on, when its file names say:
    one instance type in every file; the region is the first zone's (zones of several
    regions are priced in the first, as the home pool of the paper's policies is)."""
    found: list[tuple[str, str, str]] = []
    for path in trace.sources:
        stem = path.parent.name if path.name == "full.json" else path.stem
        zone, _, suffix = stem.partition("_")
        known = TRACE_INSTANCES.get(suffix)
        match = _AWS_ZONE.match(zone) or _GCP_ZONE.match(zone)
        if known is None or match is None:
            return None
        found.append((known[0], match.group(1), known[1]))
    if not found or len({(cloud, instance) for cloud, _, instance in found}) != 1:
        return None
    return found[0]


def job_model(
    job: JobSpec | None,
    catalog: Catalog,
    trace: MultiPoolTrace,
    *,
    pool: str | None = None,
    nodes: int | None = None,
    overrides: dict[str, float | None],
    bare: dict | None = None,
) -> SimulatedJob:
    """C, D, d and prices for ``job`` on ``trace`` (see the module docstring); ``overrides``
    holds the flags (``job_hours``, ``deadline_hours``, ``restart_hours``,
    ``on_demand_price``, ``spot_price``), ``None`` where not given.  ``job`` is
    ``None`` when the file has no ``[workload]`` (then ``--job-hours`` must be given);
    without a pool to price, the paper's p3.2xlarge prices are the last resort.  ``bare``
    is such a file's raw TOML, for its deadline and restart overhead."""
    sources: dict[str, str] = {}
    values = {k: v for k, v in overrides.items() if v is not None}
    sources.update(dict.fromkeys(values, "flag"))
    if job is None and bare:
        for key, section, name, scale in (("deadline_hours", "constraints", "deadline_hours", 1.0),
                                          ("restart_hours", "overheads", "restart_minutes", 1 / 60)):
            raw = bare.get(section, {}).get(name) if isinstance(bare.get(section), dict) else None
            if key in values or raw is None:
                continue
            if isinstance(raw, bool) or not isinstance(raw, (int, float)) or raw < 0:
                raise SimulateJobError(f"{section}.{name}: must be a number >= 0, got {raw!r}")
            values[key] = float(raw) * scale
            sources[key] = f"job: {section}.{name}"
    if "deadline_hours" not in values:
        if job is None or job.constraints.deadline_hours is None:
            raise SimulateJobError("constraints.deadline_hours: not set; add it to the job file or pass --deadline-hours")
        values["deadline_hours"] = job.constraints.deadline_hours
        sources["deadline_hours"] = "job: constraints.deadline_hours"
    if "restart_hours" not in values:
        values["restart_hours"] = (job.overheads if job else Overheads()).restart_minutes / 60.0
        sources["restart_hours"] = "job: overheads.restart_minutes" + ("" if job else " (default)")
    if "on_demand_price" not in values and trace.on_demand_price is not None:
        values["on_demand_price"] = trace.on_demand_price * (nodes or 1)
        sources["on_demand_price"] = "trace: metadata.price_info.on_demand_price"
    if "spot_price" not in values and _trace_priced(trace):
        values["spot_price"] = float(np.nanmean(trace.spot_prices))  # shown; each tick bills its own
        sources["spot_price"] = "trace: its own prices (mean shown)"
    needed = {"job_hours", "on_demand_price", "spot_price"} - values.keys()
    chosen, count, how = None, nodes or 1, "flags"
    if needed and job is None and "job_hours" in values and pool is None and trace_instance(trace) is None:
        # a bare job file and no pool to price: the paper's p3.2xlarge pair, said as such
        values.setdefault("on_demand_price", DEFAULT_ON_DEMAND_PRICE)
        values.setdefault("spot_price", DEFAULT_SPOT_PRICE)
        for key in needed:
            sources[key] = "default: p3.2xlarge, the paper's price"
        needed = set()
    if needed:
        chosen, count, how = _offering(job, catalog, trace, pool, nodes)
    if "job_hours" not in values:
        if job is None:
            raise SimulateJobError("workload: the job file has no [workload]; add one or pass --job-hours")
        work = work_model(job)
        rate = work.rate(chosen.gpu, count * chosen.gpus_per_node)
        if not rate:
            raise SimulateJobError(
                f"workload.throughput: no speed for {chosen.gpu} ({chosen.instance_type}); add "
                f'"{chosen.gpu}" = <units per second per GPU> or pass --job-hours'
            )
        values["job_hours"] = work.work / rate
        sources["job_hours"] = f"job: workload on {count} x {chosen.instance_type} ({how})"
    if "on_demand_price" not in values:
        if not chosen.on_demand:
            raise SimulateJobError(f"{chosen.instance_type} in {chosen.region} has no on-demand price in the catalog; "
                                   "pass --on-demand-price")
        values["on_demand_price"] = chosen.on_demand * count
        sources["on_demand_price"] = f"catalog: {chosen.instance_type} in {chosen.region} x {count}"
    if "spot_price" not in values:
        spot = [o.spot for o in catalog if _same_type(o, chosen) and o.spot]
        if spot:
            values["spot_price"] = min(spot) * count
            sources["spot_price"] = f"catalog: cheapest {chosen.instance_type} spot in {chosen.region} x {count}"
        else:
            raise SimulateJobError(f"no spot price for {chosen.instance_type} in {chosen.region} in the catalog and "
                                   "none in the trace; pass --spot-price")
    model = JobModel(values["job_hours"], values["deadline_hours"], values["restart_hours"],
                     values["on_demand_price"], values["spot_price"])
    name = None if chosen is None else f"{chosen.cloud}:{chosen.region}:{chosen.instance_type}"
    return SimulatedJob(model, name, count, sources)


def _trace_priced(trace: MultiPoolTrace) -> bool:
    return bool(np.isfinite(trace.spot_prices).any())


def _same_type(a: Offering, b: Offering) -> bool:
    return (a.cloud, a.region, a.instance_type) == (b.cloud, b.region, b.instance_type)


def _offering(
    job: JobSpec | None, catalog: Catalog, trace: MultiPoolTrace, pool: str | None, nodes: int | None
) -> tuple[Offering, int, str]:
    gang = max((g for g in trace.gangs if g is not None), default=1)  # a count trace is of a gang of nodes
    if pool is not None:
        parts = pool.split(":")
        if len(parts) != 3:
            raise SimulateJobError(f"--pool {pool!r}: expected cloud:region:instance_type, e.g. aws:us-east-1:p3.2xlarge")
        cloud, region, instance = parts
        return _row(catalog, cloud, region.split("/")[0], instance, "--pool"), nodes or gang, "--pool"
    known = trace_instance(trace)
    if known is not None:
        return _row(catalog, *known, "the trace's file names"), nodes or gang, "the trace's instance type"
    if job is None:
        raise SimulateJobError("the trace's file names do not say its instance type; pass --pool "
                               "cloud:region:instance_type, or --on-demand-price and --spot-price")
    from planner.plan import limits_for, plan  # the MILP only when nothing else says

    planned = plan(job, catalog, limits=limits_for(job))
    if planned.solution is None:
        raise SimulateJobError("the quote finds no plan for this job and the trace's file names do not say its "
                               "instance type; pass --pool cloud:region:instance_type")
    config = planned.solution.phases[0].config
    row = _row(catalog, config.pool.cloud, config.pool.region, config.pool.instance_type, "the quote")
    return row, nodes or config.nodes, "the quote's choice"


def _row(catalog: Catalog, cloud: str, region: str, instance: str, origin: str) -> Offering:
    rows = [o for o in catalog if (o.cloud, o.region, o.instance_type) == (cloud, region, instance)]
    if not rows:
        raise SimulateJobError(f"{cloud}:{region}:{instance} (from {origin}) is not in the catalog; "
                               "pass --pool with one that is, or --job-hours and both prices")
    return min(rows, key=lambda o: (o.on_demand is None, o.on_demand or 0.0))
