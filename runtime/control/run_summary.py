"""A run's work in the job's unit, and its summary (``summary.json``): the outcome, the work, every
launch and every pool with its time and cost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from planner.job import JobSpec
from runtime.accounting.ledger import Ledger
from runtime.control.run_state import SUMMARY_FILE, RunState, write_private
from runtime.training.store import CheckpointStore


def write_summary(run_dir: str | Path, summary: dict[str, Any]) -> Path:
    path = Path(run_dir) / SUMMARY_FILE
    write_private(path, json.dumps(summary, indent=2, sort_keys=False) + "\n")
    return path


def units_per_step(job: JobSpec, store: CheckpointStore) -> float:
    """Work units (the job's unit) one optimizer step does.

    ``steps``: 1. ``samples``: the global batch the latest checkpoint records.
    ``tokens``: ``[workload].global_batch`` (tokens per step), which the job must give.
    """
    unit = job.workload.unit
    if unit == "steps":
        return 1.0
    if unit == "tokens":
        return float(job.workload.global_batch or 1.0)
    latest = store.latest_step()
    if latest is None:
        return float(job.workload.global_batch or 1.0)
    return float(store.read_manifest(latest).global_batch)


def work_done_units(job: JobSpec, store: CheckpointStore) -> float:
    """Work committed so far: the latest checkpoint's step in the job's unit."""
    latest = store.latest_step()
    if latest is None:
        return 0.0
    if job.workload.unit == "samples":
        return float(store.read_manifest(latest).samples_seen)
    return latest * units_per_step(job, store)


def build_summary(state: RunState, job: JobSpec, ledger: Ledger, store: CheckpointStore) -> dict[str, Any]:
    """``summary.json``: the outcome, the work, every launch and every pool with its time and cost."""
    end = max([state.origin, *[r.released_at or r.provisioned_at for r in state.launches]])
    hours_by_pool: dict[tuple[str, str], float] = {}
    for record in state.launches:
        key = record.pool.key
        hours_by_pool[key] = hours_by_pool.get(key, 0.0) + ((record.released_at or end) - record.provisioned_at) / 3600
    pools = [
        {"pool": spend.pool, "purchase": spend.purchase, "hours": round(hours_by_pool.get((spend.pool, spend.purchase),
                                                                                          0.0), 6),
         "node_hours": spend.node_hours, "cost_usd": spend.usd, "charged_usd": spend.charged_usd}
        for spend in ledger.by_pool()
    ]
    latest = store.latest_step()
    launches = [
        {"launch_id": r.launch_id, "pool": r.label(), "pool_id": r.pool.id,
         "purchase": r.pool.purchase, "nodes": r.nodes, "world_size": r.world_size,
         "start_step": r.start_step, "end_step": r.end_step, "outcome": r.outcome, "reason": r.reason}
        for r in state.launches
    ]
    return {
        "job": job.name,
        "status": state.status,
        "cause": state.cause,
        "unit": job.workload.unit,
        "work_total": job.workload.amount,
        "work_done": work_done_units(job, store),
        "steps": latest or 0,
        "preemptions": state.preemptions,
        "replans": state.replans,
        "failures": state.failures,
        "lost_steps": state.lost_steps,
        "cost_usd": ledger.total_usd(),
        "hours": round((end - state.origin) / 3600, 6),
        "time_scale": state.time_scale,
        "budget_usd": job.constraints.budget_usd,
        "deadline_hours": job.constraints.deadline_hours,
        "pools": pools,
        "launches": launches,
        "world_sizes": [r.world_size for r in state.launches],
        "final_checkpoint": store.url(latest) if latest is not None else None,
    }
