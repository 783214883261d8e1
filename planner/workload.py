"""What a job's work is worth on each GPU: the amount of work and per-GPU speed in one unit.

The job states its work in tokens, samples, steps or reference-GPU hours; the
throughput comes from ``[workload.throughput]`` or the embedded table.  This module
turns both into one unit so the optimizer only sees ``work`` and ``speed(gpu)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import PlannerError
from planner.job import JobSpec
from pricing.throughput import ThroughputTable, load_throughput_table


@dataclass(frozen=True, slots=True)
class WorkModel:
    """``work`` units to do; ``speeds[gpu]`` units per second per GPU; scaling efficiency."""

    unit: str
    work: float
    speeds: dict[str, float]
    efficiency_per_doubling: float
    min_gpu_memory_gb: float
    speed_sources: dict[str, str]

    def speed(self, gpu: str) -> float | None:
        return self.speeds.get(gpu.lower())


def work_model(job: JobSpec, table: ThroughputTable | None = None) -> WorkModel:
    """Resolve a job's work and speeds; raises :class:`PlannerError` naming the key to fix."""
    table = table or load_throughput_table()
    w = job.workload
    info = table.model(w.model) if w.model else None
    efficiency = w.scaling.efficiency_per_doubling or (info.efficiency_per_doubling if info else 1.0)
    min_mem = w.min_gpu_memory_gb or (info.min_gpu_memory_gb if info else 0.0)
    override = {gpu.lower(): speed for gpu, speed in w.throughput.items()}

    if w.unit == "gpu_hours":
        ref = (w.reference_gpu or "").lower()
        if override:
            if ref not in override:
                raise PlannerError(
                    f"workload.throughput: reference_gpu {w.reference_gpu!r} needs a throughput entry too, "
                    "so other GPUs can be compared with it"
                )
            speeds = {g: s / override[ref] for g, s in override.items()}
            sources = {g: "job file [workload.throughput], relative to reference_gpu" for g in speeds}
        else:
            speeds, sources = {}, {}
            gpus = {g for (_, g) in table.rows}
            for g in gpus:
                rel = table.relative_speed(g, ref, info.name if info else None)
                if rel is not None:
                    speeds[g] = rel
                    sources[g] = f"relative speed vs {w.reference_gpu} ({info.name if info else 'all models'})"
            if ref not in speeds:
                raise PlannerError(
                    f"workload.reference_gpu: no benchmark for {w.reference_gpu!r}"
                    + (f" with model {info.name!r}" if info else "")
                    + "; use a GPU from `planner bench --list` or give [workload.throughput]"
                )
        # Work in reference-GPU seconds; speeds in reference seconds per second.
        return WorkModel("reference GPU-hours", w.amount * 3600.0, speeds, efficiency, min_mem, sources)

    if override:
        return WorkModel(w.unit, w.amount, override, efficiency, min_mem,
                         {g: "job file [workload.throughput]" for g in override})
    assert info is not None  # the job model guarantees a model or an override
    per_step = 1.0
    if w.unit != info.unit:
        if w.unit != "steps":
            raise PlannerError(
                f"workload.{w.unit}: model {info.name!r} is measured in {info.unit}; "
                f"give workload.{info.unit} instead, or [workload.throughput] in {w.unit} per second"
            )
        if not w.global_batch:
            raise PlannerError(
                f"workload.global_batch: needed to convert steps into {info.unit} for model {info.name!r} "
                f"(how many {info.unit} one step consumes)"
            )
        per_step = w.global_batch
    speeds = {m.gpu.lower(): m.per_gpu_per_second / per_step for m in table.gpus_for(info.name)}
    sources = {m.gpu.lower(): ("estimate: " if m.estimated else "") + m.source for m in table.gpus_for(info.name)}
    return WorkModel(w.unit, w.amount, speeds, efficiency, min_mem, sources)
