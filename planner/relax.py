"""Why a job has no plan, and the smallest change of each constraint that would give it one.

Relaxations are computed by the optimizer, not guessed: the smallest budget is the
cheapest plan that meets the deadline, the shortest deadline is the plan with the
smallest P90 time within the budget, and the smallest node limit is found by search.
Suggested values are rounded *up* to four significant digits, so the suggestion is
feasible and 1% less is not.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field, replace

from planner.job import JobSpec
from planner.milp import Limits, solve
from planner.pools import CandidateSet, candidate_configs
from planner.workload import WorkModel
from pricing.catalog import Catalog, CatalogFilter

MAX_NODES_SEARCHED = 128


@dataclass(frozen=True, slots=True)
class Relaxation:
    key: str
    value: float
    message: str


@dataclass(slots=True)
class Infeasibility:
    binding: list[str] = field(default_factory=list)
    relaxations: list[Relaxation] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)


def round_up(x: float, digits: int = 4) -> float:
    """``x`` rounded up to ``digits`` significant digits (never below ``x``)."""
    if x <= 0:
        return x
    step = 10 ** (math.floor(math.log10(x)) - digits + 1)
    value = math.ceil(x / step - 1e-9) * step
    return float(f"{value:.{max(0, digits - 1 - math.floor(math.log10(x)))}f}")


def explain_infeasible(
    job: JobSpec,
    catalog: Catalog,
    work: WorkModel,
    candidates: CandidateSet,
    limits: Limits,
    *,
    now: dt.datetime,
) -> Infeasibility:
    if not candidates.configs:
        return _no_candidates(job, catalog, work)
    out = Infeasibility()
    deadline, budget = limits.deadline_hours, limits.budget_usd
    if budget is not None:
        cheapest = solve(candidates.configs, work.work, replace(limits, budget_usd=None), "cost")
        if cheapest is not None:
            value = round_up(cheapest.cost)
            out.relaxations.append(
                Relaxation("constraints.budget_usd", value, f"raise budget_usd to {value:g}")
            )
    if deadline is not None:
        fastest = solve(candidates.configs, work.work, replace(limits, deadline_hours=None), "p90_time")
        if fastest is not None:
            value = round_up(fastest.p90_hours)
            out.relaxations.append(
                Relaxation("constraints.deadline_hours", value, f"extend deadline_hours to {value:g}")
            )
    out.binding = [r.key for r in out.relaxations]
    if not out.relaxations:
        # Neither constraint alone can be relaxed enough: say what both need, then the node limit.
        fastest = solve(candidates.configs, work.work, replace(limits, deadline_hours=None, budget_usd=None), "p90_time")
        if fastest is not None and deadline is not None and budget is not None:
            both = solve(
                candidates.configs, work.work, replace(limits, deadline_hours=round_up(fastest.p90_hours), budget_usd=None), "cost"
            )
            if both is not None:
                out.binding = ["constraints.deadline_hours", "constraints.budget_usd"]
                out.reasons.append(
                    "no plan meets the deadline within the budget, and neither can be relaxed alone: "
                    f"extend deadline_hours to {round_up(fastest.p90_hours):g} and raise budget_usd to "
                    f"{round_up(both.cost):g}"
                )
    if deadline is not None:
        nodes = _smallest_max_nodes(job, catalog, work, limits, now, candidates.transfers)
        if nodes is not None and nodes > job.constraints.max_nodes:
            out.relaxations.append(
                Relaxation("constraints.max_nodes", nodes, f"raise max_nodes to {nodes}")
            )
            out.binding.append("constraints.max_nodes")
    if not out.binding:
        out.reasons.append("no plan fits even without the deadline and budget; check max_nodes and max_gpus")
    return out


def _smallest_max_nodes(job, catalog, work, limits, now, transfers) -> int | None:
    def feasible(n: int) -> bool:
        cands = candidate_configs(job, catalog, work, now=now, max_nodes=n, transfers=transfers)
        return solve(cands.configs, work.work, limits, "cost") is not None

    lo = job.constraints.max_nodes
    hi = lo
    while not feasible(hi):
        if hi >= MAX_NODES_SEARCHED:
            return None
        lo, hi = hi, min(hi * 2, MAX_NODES_SEARCHED)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if feasible(mid) else (mid, hi)
    return hi


def _no_candidates(job: JobSpec, catalog: Catalog, work: WorkModel) -> Infeasibility:
    c = job.constraints
    out = Infeasibility()
    placed = catalog.filter(CatalogFilter(clouds=tuple(c.clouds), region_globs=tuple(c.regions), gpus=tuple(c.gpus)))
    if not placed:
        out.binding = ["constraints.clouds", "constraints.regions"] + (["constraints.gpus"] if c.gpus else [])
        out.reasons.append(
            f"the catalog has no GPU offering in clouds {list(c.clouds) or 'any'} and regions "
            f"{list(c.regions) or 'any'}" + (f" with GPUs {list(c.gpus)}" if c.gpus else "")
            + f"; catalog clouds: {', '.join(catalog.clouds) or 'none'}"
        )
        return out
    big_enough = [o for o in placed if o.gpu_memory_gb + 1e-9 >= work.min_gpu_memory_gb]
    if not big_enough:
        largest = max(o.gpu_memory_gb for o in placed)
        out.binding = ["workload.min_gpu_memory_gb"]
        out.reasons.append(
            f"no GPU with {work.min_gpu_memory_gb:g} GB in the allowed clouds/regions (largest: {largest:g} GB); "
            "lower workload.min_gpu_memory_gb or allow more clouds/regions"
        )
        return out
    fast = [o for o in big_enough if work.speed(o.gpu) is not None]
    if not fast:
        gpus = sorted({o.gpu for o in big_enough})
        out.binding = ["workload.throughput"]
        out.reasons.append(
            f"no throughput figure for the GPUs that fit ({', '.join(gpus)}); add them to [workload.throughput]"
        )
        return out
    sold = [o for o in fast if any(o.price(p) for p in job.purchase.allow if p != "reserved_held")]
    if not sold:
        out.binding = ["purchase.allow"]
        out.reasons.append(
            f"none of the fitting offerings is sold as {', '.join(job.purchase.allow)}; allow on_demand or spot"
        )
        return out
    if work.memory is not None:
        return _memory_bound(job, work, sold, out)
    smallest = min(o.gpus_per_node for o in sold)
    out.binding = ["constraints.max_gpus"]
    out.relaxations.append(
        Relaxation("constraints.max_gpus", smallest, f"raise max_gpus to {smallest} (the smallest fitting node)")
    )
    return out


def _memory_bound(job: JobSpec, work: WorkModel, sold, out: Infeasibility) -> Infeasibility:
    """No configuration fits the memory rule: name the strategy, or the node/GPU limit to raise."""
    rule, c = work.memory, job.constraints
    usable = [o for o in sold if o.gpus_per_node % rule.tensor_parallel == 0]
    fitting = [(o, g) for o in usable if (g := rule.min_gpus(o.gpu_memory_gb)) is not None]
    if not fitting:
        largest = max((o.gpu_memory_gb for o in sold), default=0.0)
        out.binding = ["workload.strategy"]
        out.reasons.append(
            f"{rule.describe(1 << 20)}: no number of GPUs brings that under the largest allowed GPU's "
            f"{largest:g} GB; shard more (strategy = \"fsdp\"), add tensor_parallel, or lower activation_gb"
            + ("" if usable else f" (tensor_parallel {rule.tensor_parallel} divides no node's GPU count)"))
        return out
    best, least = min(fitting, key=lambda og: (-(-og[1] // og[0].gpus_per_node), og[1]))
    n = -(-least // best.gpus_per_node)
    gpus = n * best.gpus_per_node
    out.reasons.append(f"the memory rule needs at least {least} GPUs of {best.gpu_memory_gb:g} GB "
                       f"({best.instance_type}): {rule.describe(least)}")
    if n > c.max_nodes:
        out.binding.append("constraints.max_nodes")
        out.relaxations.append(Relaxation("constraints.max_nodes", n, f"raise max_nodes to {n}"))
    if c.max_gpus is not None and gpus > c.max_gpus:
        out.binding.append("constraints.max_gpus")
        out.relaxations.append(Relaxation("constraints.max_gpus", gpus, f"raise max_gpus to {gpus}"))
    return out
