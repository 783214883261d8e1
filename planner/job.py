"""The job file (``job.toml``): typed models and a loader whose errors a user can act on.

Every error names the file, the key path (``constraints.deadline_hours``) and what was
expected; unknown keys are errors with a did-you-mean hint.  See the SPEC's job.toml
section for the meaning of each key.
"""

from __future__ import annotations

import datetime as dt
import difflib
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from planner.errors import JobSpecError
from pricing.catalog import PURCHASE_OPTIONS

WORK_UNITS = ("tokens", "samples", "steps", "gpu_hours")
PurchaseOption = Literal["spot", "on_demand", "reserved_1y", "reserved_3y"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Scaling(_Section):
    efficiency_per_doubling: float | None = Field(default=None, gt=0, le=1)


class Workload(_Section):
    model: str | None = None
    tokens: float | None = Field(default=None, gt=0)
    samples: float | None = Field(default=None, gt=0)
    steps: float | None = Field(default=None, gt=0)
    gpu_hours: float | None = Field(default=None, gt=0)
    reference_gpu: str | None = None
    global_batch: float | None = Field(default=None, gt=0, description="samples (or tokens) per step")
    min_gpu_memory_gb: float = Field(default=0, ge=0)
    checkpoint_gb: float = Field(default=0, ge=0)
    throughput: dict[str, float] = Field(default_factory=dict)
    scaling: Scaling = Scaling()

    @field_validator("throughput")
    @classmethod
    def _positive_throughput(cls, value: dict[str, float]) -> dict[str, float]:
        for gpu, speed in value.items():
            if speed <= 0:
                raise ValueError(f"throughput for {gpu!r} must be > 0, got {speed}")
        return value

    @model_validator(mode="after")
    def _exactly_one_amount(self) -> Workload:
        given = [u for u in WORK_UNITS if getattr(self, u) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of tokens, samples, steps, gpu_hours"
                + (f" (found {', '.join(given)})" if given else " (found none)")
            )
        if self.gpu_hours is not None and not self.reference_gpu:
            raise ValueError("gpu_hours needs reference_gpu: the GPU those hours were measured on, e.g. \"A100\"")
        if self.model is None and not self.throughput and self.gpu_hours is None:
            raise ValueError("name a model from `planner bench --list`, or give [workload.throughput] per GPU")
        return self

    @property
    def unit(self) -> str:
        return next(u for u in WORK_UNITS if getattr(self, u) is not None)

    @property
    def amount(self) -> float:
        return float(getattr(self, self.unit))


class Constraints(_Section):
    deadline_hours: float | None = Field(default=None, gt=0)
    budget_usd: float | None = Field(default=None, gt=0)
    clouds: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    max_nodes: int = Field(default=8, ge=1, le=1024)
    max_gpus: int | None = Field(default=None, ge=1)
    gpus: tuple[str, ...] = Field(default=(), description="GPU types the job may use (catalog names); empty = any")


class HeldReservation(_Section):
    """Reserved capacity the team already pays for: used first, at zero marginal cost."""

    cloud: str
    region: str
    instance_type: str
    count: int = Field(ge=1)
    until: dt.date


class Purchase(_Section):
    allow: tuple[PurchaseOption, ...] = ("spot", "on_demand")
    held: tuple[HeldReservation, ...] = ()

    @field_validator("allow")
    @classmethod
    def _non_empty(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError(f"allow at least one of {', '.join(PURCHASE_OPTIONS)}")
        return tuple(dict.fromkeys(value))


class Objective(_Section):
    minimize: Literal["cost", "time", "carbon"] = "cost"


class Overheads(_Section):
    """Assumptions of the spot overhead model; the quote prints the values it used."""

    restart_minutes: float = Field(default=10.0, ge=0, description="provision + load + warm-up after a loss")
    checkpoint_write_gbps: float = Field(default=1.0, gt=0, description="per-node checkpoint write bandwidth")


class Run(_Section):
    entrypoint: tuple[str, ...] = ()
    provider: Literal["local", "aws", "gcp", "azure"] = "local"
    nproc_per_node: int = Field(default=1, ge=1, le=64)
    checkpoint_dir: str | None = None
    max_restarts: int = Field(default=3, ge=0, le=100)
    on_deadline_miss: Literal["continue", "stop"] = Field(
        default="continue",
        description="when no plan can meet the deadline any more: finish late with the fastest plan within "
                    "budget (and alert), or stop",
    )

    @field_validator("entrypoint", mode="before")
    @classmethod
    def _argv_not_shell(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError('entrypoint is an argv list, e.g. ["python", "train.py"], never a shell string')
        return value


class Alerts(_Section):
    email: tuple[str, ...] = ()
    smtp_url: str | None = None
    thresholds: tuple[float, ...] = (0.5, 0.8, 1.0)

    @field_validator("smtp_url")
    @classmethod
    def _smtp_scheme(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("smtp://", "smtps://")):
            raise ValueError("smtp_url must start with smtp:// or smtps://, e.g. smtp://127.0.0.1:8025")
        return value

    @field_validator("thresholds")
    @classmethod
    def _fractions(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if any(t <= 0 for t in value):
            raise ValueError("thresholds are fractions of budget_usd and must be > 0, e.g. [0.5, 0.8, 1.0]")
        return tuple(sorted(set(value)))


class JobSpec(_Section):
    name: str = Field(min_length=1)
    workload: Workload
    constraints: Constraints = Constraints()
    purchase: Purchase = Purchase()
    objective: Objective = Objective()
    overheads: Overheads = Overheads()
    run: Run = Run()
    alerts: Alerts = Alerts()


def load_job(path: str | Path) -> JobSpec:
    """Read and validate a job file; raise :class:`JobSpecError` naming every problem."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise JobSpecError(str(path), ["file not found"]) from None
    except IsADirectoryError:
        raise JobSpecError(str(path), ["is a directory; give the path of a job.toml file"]) from None
    except UnicodeDecodeError as exc:
        raise JobSpecError(str(path), [f"not UTF-8 text ({exc.reason} at byte {exc.start})"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise JobSpecError(str(path), [f"not valid TOML: {exc}"]) from None
    return parse_job(raw, source=str(path))


def parse_job(raw: dict[str, Any], source: str = "<job>") -> JobSpec:
    try:
        return JobSpec.model_validate(raw)
    except ValidationError as exc:
        raise JobSpecError(source, [_describe(err, raw) for err in exc.errors()]) from None


def _describe(error: dict[str, Any], raw: dict[str, Any]) -> str:
    loc = [str(p) for p in error["loc"]]
    key = _key_path(error["loc"])
    kind = error["type"]
    if kind == "extra_forbidden":
        parent = _section_model(loc[:-1])
        hint = ""
        if parent is not None:
            close = difflib.get_close_matches(loc[-1], list(parent.model_fields), n=1)
            if close:
                hint = f"; did you mean {_key_path([*error['loc'][:-1], close[0]])!r}?"
            else:
                hint = f"; known keys here: {', '.join(parent.model_fields)}"
        return f"{key}: unknown key{hint}"
    if kind == "missing":
        return f"{key}: required key is missing"
    msg = error["msg"].removeprefix("Value error, ")
    given = error.get("input")
    shown = "" if isinstance(given, dict) or given is None else f" (got {given!r})"
    if key.endswith(("workload", "purchase", "alerts", "run")) and kind == "value_error":
        return f"{key}: {msg}"
    return f"{key}: {msg}{shown}"


def _key_path(loc: tuple[Any, ...] | list[Any]) -> str:
    """``("purchase", "held", 0, "count")`` -> ``purchase.held[0].count``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _section_model(loc: list[str]) -> type[BaseModel] | None:
    model: type[BaseModel] = JobSpec
    for part in loc:
        field = model.model_fields.get(part)
        if field is None:
            return None if not part.isdigit() else model
        annotation = field.annotation
        inner = getattr(annotation, "__args__", None)
        candidate = annotation if isinstance(annotation, type) else (inner[0] if inner else None)
        if not (isinstance(candidate, type) and issubclass(candidate, BaseModel)):
            return None
        model = candidate
    return model
