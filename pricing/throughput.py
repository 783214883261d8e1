"""How fast a model trains on a GPU: the embedded benchmark table and the DDP scaling model.

Rows are per-GPU units per second (tokens for GPT-style models, samples for the rest)
with their source; estimated rows say so.  A job's ``[workload.throughput]`` overrides
rows per GPU, and the SPEC's scaling rule lives in :func:`planner.workload.ddp_rate`.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from pricing.errors import UnknownModelError


@dataclass(frozen=True, slots=True)
class ModelInfo:
    name: str
    unit: str
    precision: str
    efficiency_per_doubling: float
    min_gpu_memory_gb: float
    description: str
    source: str


@dataclass(frozen=True, slots=True)
class Measurement:
    model: str
    gpu: str
    per_gpu_per_second: float
    source: str
    estimated: bool


@dataclass(frozen=True, slots=True)
class ThroughputTable:
    models: dict[str, ModelInfo]
    rows: dict[tuple[str, str], Measurement]

    def model(self, name: str) -> ModelInfo:
        try:
            return self.models[name.lower()]
        except KeyError:
            import difflib

            close = difflib.get_close_matches(name.lower(), list(self.models), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UnknownModelError(
                f"unknown model {name!r}{hint}. Known models: {', '.join(sorted(self.models))} "
                "(`planner bench --list`), or give [workload.throughput] per GPU in the job file"
            ) from None

    def per_gpu(self, model: str, gpu: str) -> Measurement | None:
        return self.rows.get((model.lower(), gpu.lower()))

    def gpus_for(self, model: str) -> list[Measurement]:
        key = model.lower()
        return sorted((m for (mm, _), m in self.rows.items() if mm == key), key=lambda m: -m.per_gpu_per_second)

    def relative_speed(self, gpu: str, reference_gpu: str, model: str | None = None) -> float | None:
        """Speed of ``gpu`` relative to ``reference_gpu``: per model, or the geometric
        mean over every model measured on both when no model is named."""
        models = [model.lower()] if model else list(self.models)
        ratios = []
        for m in models:
            a, b = self.per_gpu(m, gpu), self.per_gpu(m, reference_gpu)
            if a and b:
                ratios.append(a.per_gpu_per_second / b.per_gpu_per_second)
        if not ratios:
            return None
        return math.exp(sum(math.log(r) for r in ratios) / len(ratios))


@lru_cache(maxsize=1)
def load_throughput_table() -> ThroughputTable:
    """The embedded table (pricing/embedded/models.csv and throughput.csv)."""
    base = resources.files("pricing") / "embedded"
    models: dict[str, ModelInfo] = {}
    with (base / "models.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            models[row["model"].lower()] = ModelInfo(
                name=row["model"],
                unit=row["unit"],
                precision=row["precision"],
                efficiency_per_doubling=float(row["efficiency_per_doubling"]),
                min_gpu_memory_gb=float(row["min_gpu_memory_gb"]),
                description=row["description"],
                source=row["source"],
            )
    rows: dict[tuple[str, str], Measurement] = {}
    with (base / "throughput.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            m = Measurement(
                model=row["model"],
                gpu=row["gpu"],
                per_gpu_per_second=float(row["per_gpu_per_second"]),
                source=row["source"],
                estimated=row["estimated"] == "yes",
            )
            rows[(m.model.lower(), m.gpu.lower())] = m
    return ThroughputTable(models=models, rows=rows)
