"""What a run directory remembers: the controller state.

``<run_dir>/state.json`` holds everything ``planner run --resume RUN_DIR`` needs to carry
on after the controller itself was killed: the job, the clock's origin and scale, the
current plan and pool (and its node count), the active launch and its nodes, what was
learned (measured throughput, pools cooling down, raised interruption rates), counters
and the chaos schedule's position. It is rewritten atomically at every change of any of
these.

The state is a pydantic model, validated when it is read and whenever a field is set:
a value that would leave a run that cannot be resumed or reported (a budget of -5, an
unknown status, a pool with an unknown purchase option) is refused before it reaches
the file, and a file that holds one anyway is refused with its key and the fix, never
with a traceback. Pools are stored as :meth:`pricing.pool.Pool.to_dict` gives them.

Times are simulated POSIX seconds (see :mod:`runtime.control.clock`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationError,
    field_validator,
)

from danlu import atomic_file
from planner.job import JobSpec
from planner.policy import POLICY_NAMES
from planner.workload import blend_rate, workers
from pricing.pool import Pool, PoolError
from runtime.control import worker_log
from runtime.control.replan import config_rate, raised_rate
from runtime.errors import RuntimeFailure
from runtime.providers.base import Node

__all__ = [
    "LaunchRecord",
    "Progress",
    "RunState",
    "RunStateError",
    "StopsSeen",
    "Throughput",
    "load_state",
    "save_state",
    "validation_errors",
    "write_private",
]

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700
STATE_FILE = "state.json"
SUMMARY_FILE = "summary.json"
FORMAT = 2
Status = Literal["running", "completed", "failed", "infeasible", "budget_cap", "cancelled"]


class RunStateError(RuntimeFailure):
    """A run directory cannot be resumed (no state, or a state this version cannot read)."""


def _as_pool(value: Any) -> Pool:
    if isinstance(value, Pool):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"a pool is an object with cloud, region, instance_type, ..., not {value!r}")
    try:
        return Pool.from_dict(value)
    except PoolError as exc:
        raise ValueError(str(exc)) from None


PoolField = Annotated[Pool, PlainValidator(_as_pool), PlainSerializer(lambda pool: pool.to_dict())]
Finite = Annotated[float, Field(allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


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


class Throughput(_Model):
    """Work measured on ``gpus`` GPUs of ``gpu``: ``units`` in ``hours`` (pooled over launches)."""

    gpu: str
    gpus: int = Field(ge=1)
    units: float = Field(ge=0, allow_inf_nan=False)
    hours: float = Field(gt=0, allow_inf_nan=False)
    steps: float = Field(default=0, ge=0, allow_inf_nan=False)

    @property
    def units_per_hour(self) -> float:
        return self.units / self.hours


class StopsSeen(_Model):
    """The longest durations this run has measured for its budget cap (simulated hours; None: not yet), kept
    so that a resumed controller sizes the cap's reserve -- and its plans -- as the one before it did."""

    heartbeat_gap_hours: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    stop_hours: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    release_hours: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    save_write_hours: float = Field(default=0.0, ge=0, allow_inf_nan=False)


class LaunchRecord(_Model):
    """One launch: a torchrun job on ``nodes`` nodes of one pool, from provisioning to release.

    ``hosts`` are the provider's node records (:meth:`runtime.providers.base.Node.to_dict`).
    """

    launch_id: str = Field(min_length=1)
    pool: PoolField
    nodes: int = Field(ge=1)
    world_size: int = Field(ge=1)
    start_step: Count
    provisioned_at: Finite
    hosts: list[dict[str, Any]] = Field(default_factory=list)
    training_at: Finite | None = None
    training_step: Count | None = None
    end_step: Count | None = None
    released_at: Finite | None = None
    outcome: str | None = None
    reason: str = ""

    def node_objects(self) -> list[Node]:
        return [Node.from_dict(n) for n in self.hosts]

    def label(self) -> str:
        return self.pool.label(self.nodes)

    def hours(self, until: float) -> float:
        """Hours from the launch's provisioning to ``until`` (run clock seconds), per node."""
        return max(0.0, until - self.provisioned_at) / 3600

    def startup_error(self) -> str | None:
        """The error a launch that never trained died of (its node log's telling line), or None."""
        if self.training_at is not None or self.outcome != "failed":
            return None
        found = self._log_failure()
        return found[1] if found is not None else None

    def log_cause(self) -> str:
        """Why the workers failed and where to read more (the first node log that says), as a suffix of
        the launch's reason; '' without a log."""
        found = self._log_failure()
        if found is None:
            return ""
        node, cause, path = found
        return f"; {node}: {cause} (log: {path})" if cause is not None else f" (log: {path})"

    def _log_failure(self) -> tuple[str, str | None, Path] | None:
        """(node, the telling line of its log (:mod:`~runtime.control.worker_log`), the log) of the first node
        whose log says why -- the first that is not a peer's failure seen from there, where one is -- else of
        the first log there is; None without one."""
        found: list[tuple[str, str | None, Path]] = []
        for node in self.hosts:
            path = Path(str(node.get("handle", {}).get("log", "")))
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            found.append((str(node["id"]), worker_log.failure_cause(text), path))
        said = [f for f in found if f[1] is not None]
        first_cause = next((f for f in said if not worker_log.is_consequence(str(f[1]))), said[0] if said else None)
        return first_cause or (found[0] if found else None)


class RunState(_Model):
    """The controller's durable state (see the module docstring)."""

    job_path: str
    job: dict[str, Any]
    cwd: str
    catalog: str | None
    provider: str = Field(min_length=1)
    checkpoint_dir: str = Field(min_length=1)
    # What cloud resources are tagged with (danlu-run), fixed when the run starts: unique among the team's runs
    # where the directory's name alone is not (a queue's job). None: a run started before it was kept, whose
    # id is its directory's name (:meth:`tag`).
    run_id: str | None = Field(default=None, min_length=1)
    # The home id of the runs directory a cloud run was started in (runtime.control.run_home): its instances
    # carry it (danlu-home). None for a run on this machine, or started before it was kept.
    home: str | None = Field(default=None, pattern=r"^[0-9a-f]{12}$")
    origin: Finite
    time_scale: float = Field(gt=0, allow_inf_nan=False)
    clock_pauses: list[tuple[Finite, Finite | None]] = Field(default_factory=list)
    policy: str
    use_cache: bool = True
    chaos: list[str] = Field(default_factory=list)
    chaos_fired: Count = 0
    plan: dict[str, Any] | None = None
    pool: PoolField | None = None
    nodes: int | None = Field(default=None, ge=1)
    launches: list[LaunchRecord] = Field(default_factory=list)
    active: bool = False
    preemptions: Count = 0
    replans: Count = 0
    failures: Count = 0
    # The failures before a failed run was reopened (`--resume`): [run].max_restarts counts the ones after it.
    failures_before_reopen: Count = 0
    lost_steps: Count = 0
    steps: Count = 0
    measured: Throughput | None = None
    # The running launch's steps so far, from its workers' reports; folded into `measured` when it ends.
    live: Throughput | None = None
    stops: StopsSeen = Field(default_factory=StopsSeen)
    cooling: dict[str, Finite] = Field(default_factory=dict)
    rates: dict[str, Annotated[float, Field(ge=0, allow_inf_nan=False)]] = Field(default_factory=dict)
    pool_preemptions: dict[str, Count] = Field(default_factory=dict)
    pool_hours: dict[str, Annotated[float, Field(ge=0, allow_inf_nan=False)]] = Field(default_factory=dict)
    # Cluster pools re-plans leave out (runtime.control.phases): pool id -> until, None for the rest of the run.
    left_out: dict[str, Finite | None] = Field(default_factory=dict)
    # On-demand and reserved pools that refused a launch (no capacity, over quota): purchase -> pool id ->
    # until. Keyed by both, as the planner blocks them: an on-demand pool's id is a zoneless spot pool's too.
    refused: dict[str, dict[str, Finite]] = Field(default_factory=dict)
    policy_memory: dict[str, Any] = Field(default_factory=dict)
    status: Status = "running"
    cause: str | None = None
    format: Literal[2] = FORMAT

    @field_validator("job")
    @classmethod
    def _job_is_a_job(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            JobSpec.model_validate(value)
        except ValidationError as exc:
            raise ValueError(f"the job does not validate: {validation_errors(exc)}") from None
        return value

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        if value not in POLICY_NAMES:
            raise ValueError(f"unknown policy {value!r}; one of {', '.join(POLICY_NAMES)}")
        return value

    def tag(self, run_dir: str | Path) -> str:
        """The run's id, as its cloud resources carry it (``danlu-run``)."""
        return self.run_id or Path(run_dir).resolve().name

    def job_spec(self) -> JobSpec:
        return JobSpec.model_validate(self.job)

    def set_pool(self, pool: Pool | None, nodes: int | None) -> None:
        """Change the current pool and its node count together (both set, or both None)."""
        if (pool is None) != (nodes is None):
            raise ValueError("pool and nodes go together: both set (the current plan) or both None")
        self.pool = pool
        self.nodes = nodes

    def known_rate(self, job: JobSpec, pool: Pool, nodes: int) -> float | None:
        """Work units per hour on ``nodes`` of ``pool``: the job's figure blended with what was measured
        on the same GPUs, the running launch included, by how many steps the measurement saw
        (:func:`planner.workload.blend_rate`)."""
        prior = config_rate(job, pool, nodes)
        m = self.measurement(pool, nodes)
        if m is not None:
            return m.units_per_hour if prior is None else blend_rate(prior, m.units_per_hour, m.steps)
        return prior

    def measurement(self, pool: Pool, nodes: int) -> Throughput | None:
        """What was measured on ``nodes`` of ``pool``'s GPUs: past launches and the running one, pooled."""
        gpus = workers(self.job_spec(), pool.gpus_per_node, nodes)
        parts = [m for m in (self.measured, self.live) if m is not None and m.gpu == pool.gpu and m.gpus == gpus]
        if not parts:
            return None
        return Throughput(gpu=pool.gpu, gpus=gpus, units=sum(m.units for m in parts),
                          hours=sum(m.hours for m in parts), steps=sum(m.steps for m in parts))

    def rate(self, job: JobSpec, pool: Pool, nodes: int) -> float:
        """:meth:`known_rate`, never zero: pools come from plans, which had a speed for them."""
        return self.known_rate(job, pool, nodes) or 1.0

    def learn_throughput(self, pool: Pool, nodes: int, units: float, hours: float, steps: float) -> float:
        """Add a measurement of ``steps`` steps (pooled with earlier ones on the same GPUs); returns units per hour."""
        gpus = workers(self.job_spec(), pool.gpus_per_node, nodes)
        m = self.measured
        if m and m.gpu == pool.gpu and m.gpus == gpus:
            units, hours, steps = units + m.units, hours + m.hours, steps + m.steps
        self.measured = Throughput(gpu=pool.gpu, gpus=gpus, units=units, hours=hours, steps=steps)
        return units / hours

    def penalize(self, pool: Pool, *, prior_rate: float, now: float, cooldown_s: float) -> int:
        """Count a preemption of ``pool``: cool it down and raise its interruption rate.

        Returns how many times the pool has been preempted in this run.
        """
        pool_id = pool.id
        self.preemptions += 1
        count = self.pool_preemptions.get(pool_id, 0) + 1
        self.pool_preemptions[pool_id] = count
        self.cooling[pool_id] = now + cooldown_s
        exposed = self.pool_hours.get(pool_id, 0.0)
        self.rates[pool_id] = raised_rate(prior_rate, preemptions=count, exposed_hours=exposed)
        return count

    def cooling_at(self, now: float) -> frozenset[str]:
        return frozenset(p for p, until in self.cooling.items() if until > now)

    def left_out_at(self, now: float) -> frozenset[str]:
        return frozenset(p for p, until in self.left_out.items() if until is None or until > now)

    def refuse(self, pool: Pool, until: float) -> None:
        self.refused.setdefault(pool.purchase, {})[pool.id] = until

    def refused_at(self, now: float) -> frozenset[tuple[str, str]]:
        """The :attr:`Pool.key` of every pool still refused at ``now``."""
        return frozenset((pool_id, purchase) for purchase, pools in self.refused.items()
                         for pool_id, until in pools.items() if until > now)

    @property
    def current(self) -> LaunchRecord | None:
        return self.launches[-1] if self.active and self.launches else None

    def to_json(self) -> str:
        # Validate the whole state once more: nested dicts and lists change in place, unseen.
        data = self.model_dump(mode="json")
        try:
            RunState.model_validate(data)._check_pair(STATE_FILE)
        except ValidationError as exc:
            raise RunStateError(
                f"{STATE_FILE}: refusing to write an invalid run state: {validation_errors(exc)}") from None
        return json.dumps(data, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, *, source: str) -> RunState:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise RunStateError(
                f"{source}: not a run state written by planner run ({exc}). To fix: pass the run directory "
                "that `planner run` printed."
            ) from exc
        if not isinstance(data, dict):
            raise RunStateError(f"{source}: not a run state written by planner run (not a JSON object).")
        if data.get("format") != FORMAT:
            raise RunStateError(
                f"{source}: state format {data.get('format')!r} is not {FORMAT}. To fix: resume it with the "
                "danlu version that started the run."
            )
        try:
            state = cls.model_validate(data)
        except ValidationError as exc:
            raise RunStateError(
                f"{source}: the run state is invalid: {validation_errors(exc)}. To fix: restore the file from the "
                "run's last good state, or start a new run."
            ) from None
        state._check_pair(source)
        return state

    def _check_pair(self, source: str) -> None:
        if (self.pool is None) != (self.nodes is None):
            raise RunStateError(
                f"{source}: keys 'pool' and 'nodes' go together (both set, or both null). To fix: set both "
                "to null; the run then re-plans on resume."
            )


def validation_errors(exc: ValidationError) -> str:
    """A pydantic error as one line of ``key: problem`` pairs, for messages that name the key."""
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'state'}: {err['msg']}" for err in exc.errors(include_url=False)
    )


def save_state(run_dir: str | Path, state: RunState) -> None:
    """Write ``state.json`` atomically.

    Raises:
        RunStateError: it cannot be written (a read-only or full disk), naming the fix.
    """
    write_private(Path(run_dir) / STATE_FILE, state.to_json())


def write_private(path: Path, text: str) -> None:
    try:
        atomic_file.write_text(path, text, mode=PRIVATE_FILE)
    except OSError as exc:
        raise RunStateError(
            f"{path}: cannot be written ({type(exc).__name__}: {exc}). To fix: make the run directory writable "
            f"(and give it room), then continue with `planner run --resume {path.parent}`."
        ) from None


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
