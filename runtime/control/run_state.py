"""What a run directory remembers: the simulated clock, the controller state, the summary.

``<run_dir>/state.json`` holds everything ``planner run --resume RUN_DIR`` needs to carry
on after the controller itself was killed: the job, the clock's origin and scale, the
current plan and pool, the active launch and its nodes, what was learned (measured
throughput, pools cooling down, raised interruption rates), counters and the chaos
schedule's position. It is rewritten atomically at every change of any of these.

Time: billing, deadlines and plans run on *simulated* time, ``scale`` simulated
seconds per real second from ``origin`` (a real POSIX time), so a plan of hours can
be exercised in minutes with the local provider. At scale 1 simulated time is real time.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from planner.job import JobSpec
from danlu import atomic_file
from runtime.errors import RuntimeFailure
from runtime.accounting.ledger import Ledger
from runtime.providers.base import Node, PoolSpec
from runtime.control.replan import config_rate, raised_rate
from runtime.training.store import CheckpointStore

__all__ = [
    "LaunchRecord",
    "Progress",
    "RunState",
    "RunStateError",
    "SimClock",
    "build_summary",
    "check_runnable",
    "load_state",
    "new_state",
    "plan_pool",
    "raise_budget",
    "save_state",
    "units_per_step",
    "work_done_units",
    "write_summary",
]

STATE_FILE = "state.json"
SUMMARY_FILE = "summary.json"
FORMAT = 1


class RunStateError(RuntimeFailure):
    """A run directory cannot be resumed (no state, or a state this version cannot read)."""


@dataclass(frozen=True, slots=True)
class SimClock:
    """Simulated POSIX time: ``origin + (real - origin) * scale``."""

    origin: float
    scale: float = 1.0

    def now(self) -> float:
        return self.sim(time.time())

    def sim(self, real: float) -> float:
        return self.origin + (real - self.origin) * self.scale

    def elapsed_hours(self) -> float:
        return (self.now() - self.origin) / 3600.0

    def real_seconds(self, sim_seconds: float) -> float:
        return sim_seconds / self.scale


@dataclass(frozen=True, slots=True)
class Progress:
    """What the terminal shows, refreshed while a launch runs (times are simulated)."""

    work_done: float
    work_total: float
    unit: str
    units_per_hour: float | None
    spent_usd: float
    forecast_usd: float | None
    budget_usd: float | None
    eta: float | None
    deadline_at: float | None
    now: float
    pool: str
    launch: str
    state: str


@dataclass(slots=True)
class LaunchRecord:
    """One launch: a torchrun job on one pool, from provisioning to release."""

    launch_id: str
    pool: dict[str, Any]
    world_size: int
    start_step: int
    provisioned_at: float
    nodes: list[dict[str, Any]] = field(default_factory=list)
    training_at: float | None = None
    training_step: int | None = None
    end_step: int | None = None
    released_at: float | None = None
    outcome: str | None = None
    reason: str = ""

    def node_objects(self) -> list[Node]:
        return [Node.from_dict(n) for n in self.nodes]

    @property
    def pool_spec(self) -> PoolSpec:
        return PoolSpec.from_dict(self.pool)

    def log_cause(self) -> str:
        """The telling line of the node logs (an exit code alone says little), or ''."""
        for node in self.nodes:
            path = Path(str(node.get("handle", {}).get("log", "")))
            try:
                lines = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            if any("RendezvousTimeoutError" in line for line in lines):
                return "; the rendezvous timed out (a node never joined)"
            errors = [
                line.strip() for line in lines
                if ("Error" in line or "Exception" in line) and "torch.distributed.elastic" not in line
                and "ChildFailedError" not in line and not line.lstrip().startswith(("File ", "raise "))
            ]
            if errors:
                return f"; {node['id']}: {errors[-1][:300]}"
        return ""


@dataclass(slots=True)
class RunState:
    """The controller's durable state (see the module docstring)."""

    job_path: str
    job: dict[str, Any]
    cwd: str
    catalog: str | None
    provider: str
    checkpoint_dir: str
    origin: float
    time_scale: float
    policy: str
    use_cache: bool = True
    chaos: list[str] = field(default_factory=list)
    chaos_fired: int = 0
    plan: dict[str, Any] | None = None
    pool: dict[str, Any] | None = None
    launches: list[LaunchRecord] = field(default_factory=list)
    active: bool = False
    preemptions: int = 0
    replans: int = 0
    failures: int = 0
    lost_steps: int = 0
    steps: int = 0
    measured: dict[str, Any] | None = None
    cooling: dict[str, float] = field(default_factory=dict)
    rates: dict[str, float] = field(default_factory=dict)
    pool_preemptions: dict[str, int] = field(default_factory=dict)
    pool_hours: dict[str, float] = field(default_factory=dict)
    policy_memory: dict[str, Any] = field(default_factory=dict)
    status: str = "running"
    cause: str | None = None
    format: int = FORMAT

    @property
    def clock(self) -> SimClock:
        return SimClock(self.origin, self.time_scale)

    def known_rate(self, job: JobSpec, pool: PoolSpec) -> float | None:
        """Work units per hour on ``pool``: as measured on the same GPUs, else the job's figures, else None."""
        m = self.measured
        if m and m["gpu"] == pool.gpu and m["gpus"] == pool.nodes * pool.gpus_per_node:
            return m["units"] / m["hours"]
        return config_rate(job, pool)

    def rate(self, job: JobSpec, pool: PoolSpec) -> float:
        """:meth:`known_rate`, never zero: pools come from plans, which had a speed for them."""
        return self.known_rate(job, pool) or 1.0

    def learn_throughput(self, pool: PoolSpec, units: float, hours: float) -> float:
        """Add a measurement (pooled with earlier ones on the same GPUs); returns units per hour."""
        gpus = pool.nodes * pool.gpus_per_node
        m = self.measured
        if m and m["gpu"] == pool.gpu and m["gpus"] == gpus:
            units, hours = units + m["units"], hours + m["hours"]
        self.measured = {"gpu": pool.gpu, "gpus": gpus, "units": units, "hours": hours}
        return units / hours

    def penalize(self, pool: PoolSpec, *, prior_rate: float, now: float, cooldown_s: float) -> int:
        """Count a preemption of ``pool``: cool it down and raise its interruption rate.

        Returns how many times the pool has been preempted in this run.
        """
        pool_id = pool.pool_id
        self.preemptions += 1
        count = self.pool_preemptions.get(pool_id, 0) + 1
        self.pool_preemptions[pool_id] = count
        self.cooling[pool_id] = now + cooldown_s
        exposed = self.pool_hours.get(pool_id, 0.0)
        self.rates[pool_id] = raised_rate(prior_rate, preemptions=count, exposed_hours=exposed)
        return count

    def cooling_at(self, now: float) -> frozenset[str]:
        return frozenset(p for p, until in self.cooling.items() if until > now)

    @property
    def current(self) -> LaunchRecord | None:
        return self.launches[-1] if self.active and self.launches else None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, *, source: str) -> RunState:
        try:
            data = json.loads(text)
            if data.get("format") != FORMAT:
                raise RunStateError(
                    f"{source}: state format {data.get('format')!r} is not {FORMAT}. To fix: resume it with the "
                    "danlu version that started the run."
                )
            data["launches"] = [LaunchRecord(**record) for record in data.get("launches", [])]
            return cls(**data)
        except (ValueError, TypeError, AttributeError) as exc:
            raise RunStateError(
                f"{source}: not a run state written by planner run ({exc}). To fix: pass the run directory "
                "that `planner run` printed."
            ) from exc


def save_state(run_dir: str | Path, state: RunState) -> None:
    atomic_file.write_text(Path(run_dir) / STATE_FILE, state.to_json())


def load_state(run_dir: str | Path) -> RunState:
    """The state of ``run_dir``.

    Raises:
        RunStateError: there is none, or it cannot be read.
    """
    path = Path(run_dir) / STATE_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunStateError(
            f"{path}: no run state here. To fix: pass the run directory of a run started with `planner run`."
        ) from None
    return RunState.from_json(text, source=str(path))


def raise_budget(run_dir: str | Path, budget_usd: float) -> RunState:
    """Reopen a run that the hard budget cap stopped, with a larger ``budget_usd``.

    The run resumes from its last checkpoint; alerts already sent stay sent.

    Raises:
        RunStateError: the run did not stop at its budget cap, or the new budget is not larger.
    """
    state = load_state(run_dir)
    if state.status not in ("budget_cap", "running"):
        raise RunStateError(
            f"{run_dir}: the run ended {state.status!r}, not at its budget cap; --budget-usd only reopens a run "
            "stopped by the cap (or raises the budget of one still running)."
        )
    old = state.job.get("constraints", {}).get("budget_usd")
    if old is not None and budget_usd <= old:
        raise RunStateError(f"--budget-usd {budget_usd:g} must be larger than the run's budget ({old:g} USD).")
    state.job = {**state.job, "constraints": {**state.job.get("constraints", {}), "budget_usd": budget_usd}}
    state.status, state.cause = "running", None
    save_state(run_dir, state)
    return state


def write_summary(run_dir: str | Path, summary: dict[str, Any]) -> Path:
    path = Path(run_dir) / SUMMARY_FILE
    atomic_file.write_text(path, json.dumps(summary, indent=2, sort_keys=False) + "\n")
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


def check_runnable(job: JobSpec, source: str) -> None:
    """Refuse jobs ``planner run`` cannot follow, naming the key and the fix."""
    if not job.run.entrypoint:
        raise RunStateError(
            f"{source}: run.entrypoint is empty. To fix: give the training command as an argv list, e.g. "
            'entrypoint = ["python", "train.py"].'
        )
    if job.workload.unit == "gpu_hours":
        raise RunStateError(
            f"{source}: workload.gpu_hours cannot be followed step by step. To fix: give workload.steps, "
            "workload.samples, or workload.tokens with workload.global_batch."
        )
    if job.workload.unit == "tokens" and not job.workload.global_batch:
        raise RunStateError(
            f"{source}: workload.tokens needs workload.global_batch (tokens per optimizer step) so progress "
            "can be counted from checkpoints. To fix: add global_batch under [workload]."
        )


def build_summary(state: RunState, job: JobSpec, ledger: Ledger, store: CheckpointStore) -> dict[str, Any]:
    """``summary.json``: the outcome, the work, every launch and every pool with its time and cost."""
    clock = state.clock
    end = max([clock.origin, *[r.released_at or r.provisioned_at for r in state.launches]])
    hours_by_pool: dict[tuple[str, str], float] = {}
    for record in state.launches:
        pool = record.pool_spec
        key = (pool.pool_id, pool.purchase)
        hours_by_pool[key] = hours_by_pool.get(key, 0.0) + ((record.released_at or end) - record.provisioned_at) / 3600
    pools = [
        {"pool": spend.pool, "purchase": spend.purchase, "hours": round(hours_by_pool.get((spend.pool, spend.purchase),
                                                                                          0.0), 6),
         "node_hours": spend.node_hours, "cost_usd": spend.usd, "charged_usd": spend.charged_usd}
        for spend in ledger.by_pool()
    ]
    latest = store.latest_step()
    launches = [
        {"launch_id": r.launch_id, "pool": r.pool_spec.label(), "pool_id": r.pool_spec.pool_id,
         "purchase": r.pool_spec.purchase, "nodes": r.pool_spec.nodes, "world_size": r.world_size,
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
        "hours": round((end - clock.origin) / 3600, 6),
        "time_scale": state.time_scale,
        "budget_usd": job.constraints.budget_usd,
        "deadline_hours": job.constraints.deadline_hours,
        "pools": pools,
        "launches": launches,
        "world_sizes": [r.world_size for r in state.launches],
        "final_checkpoint": store.url(latest) if latest is not None else None,
    }


def plan_pool(plan: dict[str, Any], *, source: str) -> PoolSpec:
    """The first phase of a plan (``planner quote --json`` output, or its ``plan`` object)."""
    body = plan.get("plan", plan) if isinstance(plan, dict) else None
    phases = body.get("phases") if isinstance(body, dict) else None
    if not phases:
        raise RunStateError(
            f"{source}: key 'plan.phases' is missing or empty. To fix: pass the output of "
            "`planner quote JOB --json` for a feasible job."
        )
    phase = phases[0]
    try:
        return PoolSpec(
            cloud=str(phase["cloud"]), region=str(phase["region"]), zone=phase.get("zone"),
            instance_type=str(phase["instance_type"]), gpu=str(phase["gpu"]),
            gpus_per_node=int(phase["gpus_per_node"]), purchase=str(phase["purchase"]), nodes=int(phase["nodes"]),
            hourly_usd=float(phase["hourly_usd"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RunStateError(
            f"{source}: plan.phases[0] lacks or mangles {exc}. To fix: regenerate it with `planner quote JOB --json`."
        ) from exc


def new_state(
    *, job_path: Path, job: JobSpec, run_dir: Path, catalog: str | None, provider: str, time_scale: float,
    policy: str, chaos: list[str], plan_path: Path | None = None, use_cache: bool = True,
) -> RunState:
    """The state of a fresh run (written to ``run_dir``), refusing a directory that holds one."""
    if (run_dir / STATE_FILE).exists():
        raise RunStateError(
            f"{run_dir}: already holds a run. To fix: continue it with `planner run --resume {run_dir}` or "
            "choose another --run-dir."
        )
    check_runnable(job, str(job_path))
    checkpoint_dir = job.run.checkpoint_dir
    if checkpoint_dir is None:
        checkpoint_dir = str((run_dir / "ckpt").resolve())
    elif "://" not in checkpoint_dir:
        checkpoint_dir = str(Path(checkpoint_dir).resolve())
    state = RunState(
        job_path=str(job_path.resolve()), job=job.model_dump(mode="json"), cwd=str(Path.cwd()),
        catalog=str(Path(catalog).resolve()) if catalog else None, provider=provider, checkpoint_dir=checkpoint_dir,
        origin=time.time(), time_scale=time_scale, policy=policy, chaos=list(chaos), use_cache=use_cache,
    )
    if plan_path is not None:
        try:
            plan = json.loads(plan_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RunStateError(f"{plan_path}: cannot read the plan ({exc}). To fix: pass a JSON plan file.") from exc
        state.pool = plan_pool(plan, source=str(plan_path)).to_dict()
        state.plan = plan.get("plan", plan)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_state(run_dir, state)
    return state
