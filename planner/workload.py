"""What a job's work is worth on each GPU: the amount of work and per-GPU speed in one unit.

The job states its work in tokens, samples, steps or reference-GPU hours; the
throughput comes from the embedded table, with ``[workload.throughput]`` replacing
it GPU by GPU.  This module turns both into one unit so the optimizer only sees
``work`` and ``speed(gpu)``, and holds the two rules every throughput figure goes
through: the DDP scaling rule (:func:`ddp_rate`) and the blend of a measurement with
the prior (:func:`blend_rate`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from planner.errors import PlannerError
from planner.job import JobSpec
from planner.memory import MemoryRule
from pricing.errors import UnknownModelError
from pricing.throughput import ThroughputTable, load_throughput_table

PRIOR_STEPS = 200.0
"""How many measured steps the table's figure is worth in :func:`blend_rate`.

The first steps of a launch are the least representative ones (CUDA/cuDNN autotuning,
compilation, cold data-loader caches and page cache, NCCL warm-up); a few hundred steps
is where the step time of a DDP job settles, so a measurement only outweighs the table
once it covers more than that.  A wrong table figure is still corrected within one or two
re-plans of a long run (2000 steps give the measurement 91% of the weight)."""


def ddp_rate(per_gpu: float, gpus: int, efficiency_per_doubling: float) -> float:
    """Aggregate throughput of ``gpus`` GPUs under DDP (the SPEC's scaling rule):
    ``gpus * per_gpu * efficiency ** log2(gpus)``."""
    if gpus < 1:
        raise ValueError(f"gpus must be >= 1, got {gpus}")
    return gpus * per_gpu * efficiency_per_doubling ** math.log2(gpus)


def blend_rate(prior: float, measured: float, seen_steps: float, *, prior_steps: float = PRIOR_STEPS) -> float:
    """The rate to plan with after measuring ``measured`` over ``seen_steps`` steps, where the
    table said ``prior``: their mean weighted ``prior_steps : seen_steps`` (see :data:`PRIOR_STEPS`)."""
    if seen_steps < 0 or prior_steps < 0 or seen_steps + prior_steps <= 0:
        raise ValueError(f"seen_steps={seen_steps} and prior_steps={prior_steps} must be >= 0, not both 0")
    weight = seen_steps / (seen_steps + prior_steps)
    return (1.0 - weight) * prior + weight * measured


@dataclass(frozen=True, slots=True)
class WorkModel:
    """``work`` units to do; ``speeds[gpu]`` units per second per GPU; scaling efficiency.

    ``per_unit`` is how many of those units one unit of the job file's amount is (3600
    for ``gpu_hours``, whose work is counted in reference-GPU seconds; 1 otherwise)."""

    unit: str
    work: float
    speeds: dict[str, float]
    efficiency_per_doubling: float
    min_gpu_memory_gb: float
    speed_sources: dict[str, str]
    per_unit: float = 1.0
    warnings: tuple[str, ...] = field(default=())
    memory: MemoryRule | None = None  # per-configuration GPU memory need; None: min_gpu_memory_gb per GPU

    def speed(self, gpu: str) -> float | None:
        return self.speeds.get(gpu.lower())

    def rate(self, gpu: str, gpus: int) -> float | None:
        """Work units per failure-free hour on ``gpus`` GPUs of ``gpu`` (None without a speed for it)."""
        speed = self.speed(gpu)
        return None if speed is None else ddp_rate(speed, gpus, self.efficiency_per_doubling) * 3600.0

    def per_gpu_speed(self, units_per_hour: float, gpus: int) -> float:
        """The per-GPU speed (units per second) behind an aggregate rate measured on ``gpus`` GPUs."""
        return units_per_hour / 3600.0 / ddp_rate(1.0, gpus, self.efficiency_per_doubling)

    def left(self, amount: float) -> WorkModel:
        """The same job with ``amount`` (in the job file's unit) still to do."""
        return replace(self, work=amount * self.per_unit)

    def with_speeds(self, speeds: Mapping[str, float], source: str) -> WorkModel:
        """These per-GPU speeds in place of the current ones for their GPUs; the others stay."""
        lowered = {gpu.lower(): value for gpu, value in speeds.items()}
        return replace(self, speeds={**self.speeds, **lowered},
                       speed_sources={**self.speed_sources, **dict.fromkeys(lowered, source)})


def workers(job: JobSpec, gpus_per_node: int, nodes: int = 1) -> int:
    """The GPUs at work on ``nodes`` nodes of ``gpus_per_node`` GPUs: every one, or as many a node as
    ``[run].nproc_per_node`` runs processes -- a GPU no process uses does no work, paid for or not."""
    processes = job.run.nproc_per_node
    return nodes * (gpus_per_node if processes is None else min(gpus_per_node, processes))


def work_model(job: JobSpec, table: ThroughputTable | None = None) -> WorkModel:
    """Resolve a job's work and speeds; raises :class:`PlannerError` naming the key to fix."""
    table = table or load_throughput_table()
    w = job.workload
    override = {gpu.lower(): speed for gpu, speed in w.throughput.items()}
    warnings: tuple[str, ...] = ()
    info = None
    if w.model:
        try:
            info = table.model(w.model)
        except UnknownModelError:
            if not override:
                raise
            # A model the table does not know is fine when the job gives its speeds itself.
            warnings = (f"model {w.model!r} is not in the benchmark table: only the GPUs in "
                        f"[workload.throughput] ({', '.join(w.throughput)}) are used",)
    efficiency = w.scaling.efficiency_per_doubling or (info.efficiency_per_doubling if info else 1.0)
    min_mem = w.min_gpu_memory_gb or (info.min_gpu_memory_gb if info else 0.0)
    memory = None
    if w.params_billions is not None:
        if w.min_gpu_memory_gb:  # the job's own figure is the override
            warnings = (*warnings, f"workload.min_gpu_memory_gb = {w.min_gpu_memory_gb:g} overrides the memory rule "
                                   "of params_billions/strategy: every GPU needs that much, whatever the GPU count")
        else:
            memory = MemoryRule(w.params_billions, w.precision, "fsdp" if w.strategy == "zero3" else w.strategy,
                                w.tensor_parallel, w.activation_gb, w.micro_batch_tokens)
            min_mem = 0.0  # per configuration instead (planner.pools)

    if w.unit == "gpu_hours":
        speeds, sources = _reference_speeds(w, table, info, override)
        # Work in reference-GPU seconds; speeds in reference seconds per second.
        return WorkModel("reference GPU-hours", w.amount * 3600.0, speeds, efficiency, min_mem, sources,
                         per_unit=3600.0, warnings=warnings, memory=memory)

    speeds, sources = {}, {}
    if info is not None:
        speeds, sources = _table_speeds(w, table, info)
    speeds.update(override)
    sources.update(dict.fromkeys(override, "job file [workload.throughput]"))
    return WorkModel(w.unit, w.amount, speeds, efficiency, min_mem, sources, warnings=warnings, memory=memory)


def _table_speeds(w, table: ThroughputTable, info) -> tuple[dict[str, float], dict[str, str]]:
    """The table's per-GPU speeds for ``info``'s model, in the job's unit per second."""
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
    rows = table.gpus_for(info.name)
    speeds = {m.gpu.lower(): m.per_gpu_per_second / per_step for m in rows}
    sources = {m.gpu.lower(): ("estimate: " if m.estimated else "") + m.source for m in rows}
    return speeds, sources


def _reference_speeds(w, table: ThroughputTable, info, override) -> tuple[dict[str, float], dict[str, str]]:
    """Speeds relative to ``reference_gpu``: the table's ratios, with the job's own figures
    (which must include the reference GPU, the only common scale) in their place."""
    ref = (w.reference_gpu or "").lower()
    if override and ref not in override:
        raise PlannerError(
            f"workload.throughput: reference_gpu {w.reference_gpu!r} needs a throughput entry too, "
            "so other GPUs can be compared with it"
        )
    speeds, sources = {}, {}
    for g in {g for (_, g) in table.rows}:
        rel = table.relative_speed(g, ref, info.name if info else None)
        if rel is not None:
            speeds[g] = rel
            sources[g] = f"relative speed vs {w.reference_gpu} ({info.name if info else 'all models'})"
    for g, s in override.items():
        speeds[g] = s / override[ref]
        sources[g] = "job file [workload.throughput], relative to reference_gpu"
    if ref not in speeds:
        raise PlannerError(
            f"workload.reference_gpu: no benchmark for {w.reference_gpu!r}"
            + (f" with model {info.name!r}" if info else "")
            + "; use a GPU from `planner bench --list` or give [workload.throughput]"
        )
    return speeds, sources
