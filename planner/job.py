"""The job file (``job.toml``): typed models and a loader whose errors a user can act on.

Every error names the file, the key path (``constraints.deadline_hours``) and what was
expected; unknown keys are errors with a did-you-mean hint.  See the SPEC's job.toml
section for the meaning of each key.
"""

from __future__ import annotations

import datetime as dt
import re
import tomllib
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from planner.cluster_spec import ClusterPool
from planner.errors import JobSpecError
from planner.job_tracking import Tracking
from pricing.catalog import PURCHASE_OPTIONS
from pricing.egress import DEFAULT_TRANSFER_GBPS, LocationError, Site, parse_site

WORK_UNITS = ("tokens", "samples", "steps", "gpu_hours")
_EMAIL = re.compile(r"[^@\s<>,;\"]{1,64}@[A-Za-z0-9.-]{1,255}")
PurchaseOption = Literal["spot", "on_demand", "reserved_1y", "reserved_3y"]
OptionValue = str | bool | int | float | list[str]
"""A ``[run.options]`` value: what a provider setting can be (an image id, a flag, a list of subnets)."""
ProviderOptions = dict[str, OptionValue]
"""``[run.options.NAME]``: one provider's own settings, for ``provider = "auto"`` (runtime/providers/auto.py)."""


def _is_option_value(value: Any) -> bool:
    if isinstance(value, list):
        return all(isinstance(v, str) for v in value)
    return isinstance(value, str | bool | int | float)


NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
"""A job's name is a slug: it names the run directory, files and e-mail subjects."""
MAX_FILE_BYTES = 1 << 20
"""A job file is a page of settings; anything larger is a mistake (or an attack), not a job."""
MAX_KEYS = 5_000
MAX_DEPTH = 8
MAX_LIST = 256
CHECKPOINT_SCHEMES = ("file", "s3", "gs", "gcs", "az", "abfs", "abfss", "memory")
"""Where checkpoints may live: a local path or an object store fsspec reaches (memory:// for tests)."""


class _Section(BaseModel):
    # inf and nan pass a "> 0" check yet wreck the optimizer: no value here is ever infinite.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, str_max_length=4096)


class Scaling(_Section):
    efficiency_per_doubling: float | None = Field(default=None, ge=0.05, le=1)


MEMORY_KEYS = frozenset({"precision", "strategy", "tensor_parallel", "activation_gb", "micro_batch_tokens"})


class Workload(_Section):
    model: str | None = None
    tokens: float | None = Field(default=None, ge=1, le=1e18)
    samples: float | None = Field(default=None, ge=1, le=1e18)
    steps: float | None = Field(default=None, ge=1, le=1e15)
    gpu_hours: float | None = Field(default=None, ge=1e-3, le=1e9)
    reference_gpu: str | None = None
    global_batch: float | None = Field(default=None, gt=0, le=1e12, description="samples (or tokens) per step")
    min_gpu_memory_gb: float = Field(default=0, ge=0, le=1024)
    checkpoint_gb: float = Field(default=0, ge=0, le=1e6)
    # Memory by parallelism (planner/memory.py): the GB a GPU needs, per configuration.
    params_billions: float | None = Field(default=None, gt=0, le=100_000)
    precision: Literal["bf16", "fp16", "fp32"] = "bf16"
    strategy: Literal["ddp", "zero2", "zero3", "fsdp"] = "ddp"
    tensor_parallel: int = Field(default=1, ge=1, le=64, description="tensor-parallel degree within a node")
    activation_gb: float | None = Field(default=None, ge=0, le=1024, description="per GPU; default: the rule")
    micro_batch_tokens: float = Field(default=4096, ge=1, le=1e9, description="tokens per GPU per micro-batch")
    throughput: dict[str, float] = Field(default_factory=dict, max_length=MAX_LIST)
    scaling: Scaling = Scaling()

    @field_validator("steps", "samples", "tokens")
    @classmethod
    def _whole(cls, value: float | None) -> float | None:
        if value is not None and value != int(value):
            raise ValueError("must be a whole number: it counts steps, samples or tokens")
        return value

    @field_validator("throughput")
    @classmethod
    def _positive_throughput(cls, value: dict[str, float]) -> dict[str, float]:
        for gpu, speed in value.items():
            if not 1e-6 <= speed <= 1e15:
                raise ValueError(f"throughput for {gpu!r} must be between 1e-6 and 1e15 units per second per GPU, "
                                 f"got {speed}")
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
        # A default written back (a run's saved job) describes nothing: only a value that changes the rule counts.
        memory_keys = sorted(k for k in MEMORY_KEYS & self.model_fields_set
                             if getattr(self, k) != type(self).model_fields[k].default)
        if memory_keys and self.params_billions is None:
            raise ValueError(f"{', '.join(memory_keys)} describe the memory rule and need params_billions "
                             "(the model's parameters, in billions)")
        return self

    @property
    def unit(self) -> str:
        return next(u for u in WORK_UNITS if getattr(self, u) is not None)

    @property
    def amount(self) -> float:
        return float(getattr(self, self.unit))


class Constraints(_Section):
    deadline_hours: float | None = Field(default=None, gt=0, le=87_600, description="at most 10 years")
    budget_usd: float | None = Field(default=None, gt=0, le=1e9)
    clouds: tuple[str, ...] = Field(default=(), max_length=MAX_LIST)
    regions: tuple[str, ...] = Field(default=(), max_length=MAX_LIST)
    max_nodes: int = Field(default=8, ge=1, le=1024)
    max_gpus: int | None = Field(default=None, ge=1, le=65_536)
    gpus: tuple[str, ...] = Field(default=(), max_length=MAX_LIST,
                                  description="GPU types the job may use (catalog names); empty = any")


CAPACITY_BLOCK_LEAD = dt.timedelta(minutes=40)
"""How long before a capacity block's end a run leaves it: AWS begins terminating the block's instances
30 minutes before its end and warns (EventBridge "Capacity Block Reservation Expiration Warning") 10
minutes before that."""


class HeldReservation(_Section):
    """Reserved capacity the team already pays for: used first, at zero marginal cost."""

    cloud: str
    region: str
    instance_type: str
    count: int = Field(ge=1, le=4096)
    # A date (the reservation ends at the start, UTC, of that day) or a moment with its UTC offset:
    # capacity blocks end at a time of day (AWS's at 11:30 UTC), a queue's slot window at any hour.
    until: dt.datetime | dt.date
    # The cloud's name for the reservation, for launches that must target it: an AWS Capacity Reservation
    # or Capacity Block (cr-...), a GCE reservation's name, an Azure capacity reservation group's id.
    # Without it the nodes are ordinary on-demand requests, which a regional RI, a savings plan, an
    # open ODCR or a committed-use discount bills at the reserved rate by themselves.
    reservation_id: str | None = Field(default=None, min_length=1, max_length=1024, pattern=r"^\S+$")
    capacity_block: bool = False
    # When it starts, if later than the plan (a capacity block bought for a future date): a date (its start,
    # UTC) or a moment with its UTC offset, as `until`.
    starts: dt.datetime | dt.date | None = None

    @model_validator(mode="after")
    def _block(self) -> HeldReservation:
        if self.capacity_block and (self.cloud != "aws" or not re.fullmatch(r"cr-[0-9a-f]{8,17}",
                                                                             self.reservation_id or "")):
            raise ValueError("capacity_block = true is for an AWS EC2 Capacity Block for ML: set cloud = \"aws\" "
                             "and reservation_id to its Capacity Reservation id (cr- and 17 hex digits)")
        if self.starts_at is not None and self.starts_at >= self.usable_until:
            raise ValueError(f"starts ({self.starts_at.isoformat()}) must be before the reservation ends"
                             + (" (a capacity block is left 40 minutes before its until)" if self.capacity_block
                                else f" (until {self.ends_at.isoformat()})"))
        return self

    @field_validator("until", "starts", mode="before")
    @classmethod
    def _parse_until(cls, value: Any) -> Any:
        if isinstance(value, str):  # read back from a run's state: a date stays a date
            try:
                return dt.date.fromisoformat(value)
            except ValueError:
                return dt.datetime.fromisoformat(value)
        return value

    @field_validator("until", "starts")
    @classmethod
    def _aware(cls, value: dt.datetime | dt.date | None) -> dt.datetime | dt.date | None:
        if isinstance(value, dt.datetime):
            if value.tzinfo is None:
                raise ValueError(f"{value.isoformat()} has no UTC offset: write {value.isoformat()}Z for UTC "
                                 "(or an offset such as +01:00), or a date alone")
            return value.astimezone(dt.UTC)
        return value

    @property
    def ends_at(self) -> dt.datetime:
        """The moment the reservation ends: its ``until``, or the start (UTC) of its ``until`` day."""
        if isinstance(self.until, dt.datetime):
            return self.until
        return dt.datetime.combine(self.until, dt.time(), tzinfo=dt.UTC)

    @property
    def starts_at(self) -> dt.datetime | None:
        """The moment the reservation starts (None: it has started), as :attr:`ends_at` reads ``until``."""
        if self.starts is None or isinstance(self.starts, dt.datetime):
            return self.starts
        return dt.datetime.combine(self.starts, dt.time(), tzinfo=dt.UTC)

    def started(self, now: dt.datetime) -> bool:
        return self.starts_at is None or self.starts_at <= now

    @property
    def usable_until(self) -> dt.datetime:
        """When a run must have left the reservation: its end, or for a capacity block the moment AWS
        warns that the block's instances begin terminating (30 minutes before its end, with 10 minutes'
        notice): the plan gives the block no hours past it and the run stops there at a checkpoint,
        so the warning's 10 minutes are left for the stop."""
        if self.capacity_block:
            return self.ends_at - CAPACITY_BLOCK_LEAD
        return self.ends_at

    def ended(self) -> str:
        """Why the reservation no longer serves once :meth:`usable_until` has passed."""
        if self.capacity_block:
            return (f"capacity block {self.reservation_id} ends {when(self.ends_at)}; AWS terminates its "
                    f"instances from 30 minutes before, so danlu leaves it {when(self.usable_until)}")
        return f"reservation ended {when(self.ends_at)}"


def when(at: dt.datetime) -> str:
    """A reservation's end in a message: ``on 2027-03-01`` at midnight UTC, else ``at 2027-03-01 11:30 UTC``."""
    at = at.astimezone(dt.UTC)
    return f"on {at.date()}" if at.time() == dt.time() else f"at {at:%Y-%m-%d %H:%M} UTC"


class Purchase(_Section):
    allow: tuple[PurchaseOption, ...] = Field(default=("spot", "on_demand"), max_length=MAX_LIST)
    held: tuple[HeldReservation, ...] = Field(default=(), max_length=MAX_LIST)
    # A team's own Kubernetes cluster, one entry per GPU type (planner/cluster.py).
    cluster: tuple[ClusterPool, ...] = Field(default=(), max_length=MAX_LIST)

    @field_validator("cluster")
    @classmethod
    def _unique_clusters(cls, value: tuple[ClusterPool, ...]) -> tuple[ClusterPool, ...]:
        seen = [(c.context, c.namespace, c.name) for c in value]
        twice = sorted({f"{c[2]!r}" for c in seen if seen.count(c) > 1})
        if twice:
            raise ValueError(f"cluster names must differ within one context and namespace ({', '.join(twice)} twice)")
        return value

    @field_validator("allow")
    @classmethod
    def _non_empty(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError(f"allow at least one of {', '.join(PURCHASE_OPTIONS)}")
        return tuple(dict.fromkeys(value))


class Objective(_Section):
    minimize: Literal["cost", "time", "carbon"] = "cost"
    tolerance: float = Field(
        default=0.005, ge=0, le=0.5,
        description="accept a plan this fraction above the optimum when it is simpler: fewer phases, one "
                    "cloud, fewer nodes (0 = always the exact optimum)")


class Overheads(_Section):
    """Assumptions of the spot overhead model; the quote prints the values it used."""

    restart_minutes: float = Field(default=10.0, ge=0, le=10_080, description="provision + load + warm-up after a loss")
    checkpoint_write_gbps: float = Field(default=1.0, ge=1e-3, le=1e4, description="per-node checkpoint write bandwidth")
    capacity_wait_minutes: float | None = Field(
        default=None, ge=0, le=10_080,
        description="how long a spot launch waits for capacity before re-planning elsewhere (default restart_minutes)")

    @property
    def capacity_patience_hours(self) -> float:
        minutes = self.restart_minutes if self.capacity_wait_minutes is None else self.capacity_wait_minutes
        return minutes / 60.0


class Data(_Section):
    """Where the training data lives: a pool elsewhere pays its egress and transfer time.

    ``constraints.regions`` stays the hard residency rule; this is the soft cost."""

    location: str = Field(description='"cloud:region" (e.g. "gcp:us-central1") or an object-store URL')
    region: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9-]{0,62}$",
                               description="the bucket's region, for an object-store URL")
    dataset_gb: float = Field(ge=0, le=1e8)
    read: Literal["once", "every_epoch"] = Field(
        default="once", description="once: copied to the pool's region before training; every_epoch: streamed")
    epochs: int = Field(default=1, ge=1, le=100_000, description="full passes over the data (every_epoch)")
    transfer_gbps: float = Field(default=DEFAULT_TRANSFER_GBPS, gt=0, le=10_000,
                                 description="Gbit/s between regions or clouds")

    @model_validator(mode="after")
    def _where(self) -> Data:
        try:
            parse_site(self.location, self.region)
        except LocationError as exc:
            raise ValueError(f"location: {exc}") from None
        return self

    @property
    def site(self) -> Site:
        return parse_site(self.location, self.region)

    @property
    def gb_moved(self) -> float:
        """GB read from the data's location over the whole job."""
        return self.dataset_gb * (self.epochs if self.read == "every_epoch" else 1)


class Run(_Section):
    entrypoint: tuple[str, ...] = Field(default=(), max_length=1024)
    # Any name: providers are found at run time through the danlu.providers entry points, so a
    # new cloud needs no change here (`planner run` lists the installed ones for a wrong name).
    provider: str = Field(default="local", pattern=r"^[a-z][a-z0-9_-]{0,39}$")
    # torchrun's --nproc-per-node. None: one process per GPU of the planned instance where the nodes
    # are real machines (the quote counts every GPU of a node), 1 on the local provider.
    nproc_per_node: int | None = Field(default=None, ge=1, le=64)
    checkpoint_dir: str | None = None
    checkpoint_region: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9-]{0,62}$",
        description="region of an object-store checkpoint_dir, so a pool elsewhere pays for loading it")
    # The provider's own settings (image, network, service account...); the provider checks
    # them (runtime.providers.base.Provider.check_job) before a run directory exists. A table
    # names one provider's own, for provider = "auto" (every other provider refuses tables).
    options: dict[str, OptionValue | ProviderOptions] = Field(default_factory=dict, max_length=100)
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

    @field_validator("options", mode="before")
    @classmethod
    def _option_values(cls, value: Any) -> Any:
        """One line per bad value, naming it (a union's own errors list every type it tried)."""
        if not isinstance(value, dict):
            return value
        for key, item in value.items():
            inner = item.items() if isinstance(item, dict) else [(None, item)]
            for sub, option in inner:
                if not _is_option_value(option):
                    where = f"[run.options.{key}] {sub}" if sub is not None else f"[run.options] {key}"
                    what = "a table" if isinstance(option, dict) else repr(option)[:60]
                    raise ValueError(f"{where} is {what}: an option is a string, a number, true/false or a list of "
                                     "strings (a table [run.options.NAME] holds one provider's options, for "
                                     "provider = \"auto\")")
        return value

    @field_validator("checkpoint_dir")
    @classmethod
    def _known_store(cls, value: str | None) -> str | None:
        if value is not None and "://" in value:
            scheme = value.split("://", 1)[0].lower()
            if scheme not in CHECKPOINT_SCHEMES:
                raise ValueError(f"checkpoint_dir scheme {scheme!r} is not one of {', '.join(CHECKPOINT_SCHEMES)}; "
                                 "give a local path or e.g. s3://bucket/prefix")
        return value

    @property
    def checkpoint_site(self) -> Site | None:
        """Where checkpoints are stored, when that is a cloud region the job names; else None."""
        if not self.checkpoint_dir or "://" not in self.checkpoint_dir or not self.checkpoint_region:
            return None
        try:
            return parse_site(self.checkpoint_dir, self.checkpoint_region)
        except LocationError:  # memory:// and file:// are nowhere in a cloud
            return None


class Alerts(_Section):
    email: tuple[str, ...] = Field(default=(), max_length=MAX_LIST)
    smtp_url: str | None = None
    thresholds: tuple[float, ...] = Field(default=(0.5, 0.8, 1.0), max_length=32)
    sender: str | None = None

    @field_validator("email")
    @classmethod
    def _addresses(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for address in value:
            if not _EMAIL.fullmatch(address):
                raise ValueError(f"{_shown(address)} is not an e-mail address like ml-team@example.com")
        return value

    @field_validator("sender")
    @classmethod
    def _sender(cls, value: str | None) -> str | None:
        if value is not None and not _EMAIL.fullmatch(value):
            raise ValueError(f"{_shown(value)} is not an e-mail address like danlu@example.com")
        return value

    @field_validator("smtp_url")
    @classmethod
    def _smtp_url(cls, value: str | None) -> str | None:
        # The URL is never echoed back: it may hold a password.
        if value is None:
            return value
        if not value.startswith(("smtp://", "smtps://")):
            raise ValueError("smtp_url must start with smtp:// or smtps://, e.g. smtp://127.0.0.1:8025")
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 -- raises ValueError for a port that is not a number in range
        except ValueError:
            raise ValueError("smtp_url has no valid host[:port], e.g. smtp://mail.example.com:587") from None
        if parts.username is not None or parts.password is not None:
            raise ValueError("smtp_url must not hold credentials (user:password@); set DANLU_SMTP_USER and "
                             "DANLU_SMTP_PASSWORD in the environment instead")
        if not parts.hostname or parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError("smtp_url is smtp[s]://host[:port] and nothing more, e.g. smtp://mail.example.com:587")
        return value

    @field_validator("thresholds")
    @classmethod
    def _fractions(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0 < t <= 10 for t in value):
            raise ValueError("thresholds are fractions of budget_usd, each in (0, 10], e.g. [0.5, 0.8, 1.0]")
        return tuple(sorted(set(value)))


class JobSpec(_Section):
    name: str = Field(pattern=NAME_PATTERN, description="letters, digits, '.', '_', '-'; at most 100")
    workload: Workload
    constraints: Constraints = Constraints()
    purchase: Purchase = Purchase()
    objective: Objective = Objective()
    overheads: Overheads = Overheads()
    run: Run = Run()
    alerts: Alerts = Alerts()
    data: Data | None = None
    tracking: Tracking = Tracking()  # experiment trackers the session logs to (planner/job_tracking.py)


def load_job(path: str | Path) -> JobSpec:
    """Read and validate a job file; raise :class:`JobSpecError` naming every problem."""
    path = Path(path)
    try:
        if path.exists() and not path.is_file() and not path.is_dir():  # a FIFO would block forever
            raise JobSpecError(str(path), ["not a regular file; give the path of a job.toml file"])
        with path.open("rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            too_big = f"larger than {MAX_FILE_BYTES // 1024} KiB; a job file is a page of settings"
            raise JobSpecError(str(path), [too_big])
        raw = tomllib.loads(data.decode("utf-8"))
    except FileNotFoundError:
        raise JobSpecError(str(path), ["file not found"]) from None
    except IsADirectoryError:
        raise JobSpecError(str(path), ["is a directory; give the path of a job.toml file"]) from None
    except PermissionError:
        raise JobSpecError(str(path), ["cannot be read (permission denied)"]) from None
    except UnicodeDecodeError as exc:
        raise JobSpecError(str(path), [f"not UTF-8 text ({exc.reason} at byte {exc.start})"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise JobSpecError(str(path), [f"not valid TOML: {exc}"]) from None
    except RecursionError:
        raise JobSpecError(str(path), [f"nested deeper than a job file ever is (more than {MAX_DEPTH} levels)"]) \
            from None
    return parse_job(raw, source=str(path))


def parse_job(raw: dict[str, Any], source: str = "<job>") -> JobSpec:
    problems = _shape_problems(raw)
    if problems:
        raise JobSpecError(source, problems)
    try:
        return JobSpec.model_validate(raw)
    except ValidationError as exc:
        raise JobSpecError(source, [_describe(err, raw) for err in exc.errors()]) from None


def _shape_problems(raw: Any) -> list[str]:
    """What no job file can hold, whatever the key: control characters, absurd nesting or size."""
    problems: list[str] = []
    count = 0
    stack: list[tuple[tuple[Any, ...], Any]] = [((), raw)]
    while stack and len(problems) < 5:
        loc, value = stack.pop()
        count += 1
        if count > MAX_KEYS:
            return [f"(top level): more than {MAX_KEYS} keys and values; a job file is a page of settings"]
        if len(loc) > MAX_DEPTH:
            problems.append(f"{_key_path(loc)}: nested deeper than {MAX_DEPTH} levels")
            continue
        if isinstance(value, dict):
            stack.extend(((*loc, str(k)), v) for k, v in value.items())
            for k in value:
                if _CONTROL.search(str(k)):
                    problems.append(f"{_key_path(loc)}: a key holds a control character ({_shown(str(k))})")
        elif isinstance(value, list):
            stack.extend(((*loc, i), v) for i, v in enumerate(value))
        elif isinstance(value, str) and _CONTROL.search(value):
            problems.append(f"{_key_path(loc)}: holds a control character (NUL, escape, ...); remove it")
    return problems


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
"""Control characters but tab and newline: a NUL breaks argv, an ESC rewrites the terminal."""


def _shown(value: object, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters: an error message must not echo a megabyte back."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _describe(error: dict[str, Any], raw: dict[str, Any]) -> str:
    loc = [str(p) for p in error["loc"]]
    key = _key_path(error["loc"])
    kind = error["type"]
    if kind == "extra_forbidden":
        parent = _section_model(loc[:-1])
        hint = ""
        if parent is not None:
            import difflib  # only for a misspelt key

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
    secret = key.startswith(("alerts.smtp_url", "tracking.mlflow.tracking_uri"))  # may hold a password: never echoed
    shown = "" if isinstance(given, dict) or given is None or secret else f" (got {_shown(given)})"
    if key.endswith(("workload", "purchase", "alerts", "run", "data")) and kind == "value_error":
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
