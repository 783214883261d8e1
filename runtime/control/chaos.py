"""Injected preemptions and capacity refusals: ``planner run --chaos SPEC``, carried out by the provider itself.

A spec is ``;``-separated ``key=value`` clauses (the flag may also be repeated)::

    at=20s,45s          preempt at these wall-clock offsets from the start of the run
    rate=1/5m           and at random (Poisson), on average once per 5 minutes of wall clock
    seed=7              the random stream of ``rate`` (default 0: runs are reproducible)
    trace=PATH          replay a spot trace (../shared/traces format): every available ->
                        unavailable transition is a preemption, trace time compressed by
                        ``--time-scale``
    notice=gcp          speak this cloud's notice protocol whatever the pool's cloud
    node=0              which node of the pool is reclaimed (default: the last one)
    refuse=aws,on_demand
                        launches on these pools fail as a cloud without capacity answers
                        (``InsufficientInstanceCapacity``): each item a cloud, a purchase
                        option or a pool id (``aws:us-east-1:g4dn.xlarge``), for the whole run

Durations take ``ms``, ``s``, ``m`` or ``h`` (a bare number is seconds). Every
preemption is announced on the node's metadata server ahead of the kill, by the cloud's
lead time (:data:`runtime.providers.notices.NOTICE_LEAD_S`: AWS 2 min, GCP and Azure 30 s) divided
by the time scale.

A preemption whose time comes while no node is running is applied to the next node
that comes up (a reclaim cannot hit a machine that does not exist), and only once its
workers train: :class:`ChaosPlan` is what a provider is given (through
:class:`runtime.providers.base.ProviderContext`) to decide when and whom to reclaim;
it reports every preemption it hands out to ``on_fire``, so the controller can log it
and keep ``fired`` in ``state.json`` (a resumed run does not replay old preemptions).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pricing.pool import PURCHASES, Pool
from runtime.control.clock import Clock
from runtime.errors import RuntimeFailure

__all__ = [
    "ChaosClock",
    "ChaosFired",
    "ChaosPlan",
    "ChaosSpec",
    "ChaosSpecError",
    "parse_chaos",
    "parse_duration",
]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
MAX_RATE_EVENTS = 10_000
KEYS = ("at", "rate", "seed", "trace", "notice", "node", "refuse")
CLOUDS = ("aws", "gcp", "azure", "kubernetes")
HORIZON_S = 7 * 86400
_N = TypeVar("_N")


class ChaosSpecError(RuntimeFailure):
    """A ``--chaos`` spec cannot be read; the message names the clause and the fix."""


@dataclass(frozen=True, slots=True)
class ChaosSpec:
    """What to inject. ``at`` holds wall-clock offsets in seconds; ``rate_per_s`` is the
    Poisson rate of random preemptions per wall-clock second; ``trace_offsets`` are
    trace-time seconds (divided by the time scale when scheduled)."""

    at: tuple[float, ...] = ()
    rate_per_s: float | None = None
    seed: int = 0
    trace: str | None = None
    trace_offsets: tuple[float, ...] = ()
    notice: str | None = None
    node: int | None = None
    refuse: tuple[str, ...] = ()

    def refuses(self, pool: Pool) -> bool:
        """Whether a launch on ``pool`` is refused (``refuse=``): its cloud, purchase option or id is listed."""
        return bool({pool.cloud, pool.purchase, pool.id} & set(self.refuse))

    def schedule(self, *, time_scale: float, horizon_s: float) -> tuple[float, ...]:
        """Every preemption time (wall-clock seconds from the run start) up to ``horizon_s``.

        Deterministic for a given spec, so a resumed controller sees the same schedule.
        """
        times = [t for t in self.at if t <= horizon_s]
        times += [t / time_scale for t in self.trace_offsets if t / time_scale <= horizon_s]
        if self.rate_per_s:
            rng = random.Random(self.seed)
            t = 0.0
            for _ in range(MAX_RATE_EVENTS):
                t += rng.expovariate(self.rate_per_s)
                if t > horizon_s:
                    break
                times.append(t)
        return tuple(sorted(times))


def parse_duration(text: str, *, what: str) -> float:
    """``"20s"`` -> 20.0, ``"5m"`` -> 300.0, ``"1.5h"`` -> 5400.0, ``"250ms"`` -> 0.25."""
    match = _DURATION.match(text)
    if not match:
        raise ChaosSpecError(
            f"--chaos {what}: {text!r} is not a duration. To fix: write a number with an optional unit "
            "ms, s, m or h, e.g. 20s or 1.5m."
        )
    return float(match.group(1)) * _UNIT_S[match.group(2)]


def parse_chaos(spec: str | list[str] | None) -> ChaosSpec:
    """Read a ``--chaos`` spec (or several, as given by repeated flags).

    Raises:
        ChaosSpecError: an unknown key, a bad duration or rate, an unreadable trace.
    """
    if spec is None:
        return ChaosSpec()
    texts = [spec] if isinstance(spec, str) else list(spec)
    clauses = [c.strip() for text in texts for c in text.split(";") if c.strip()]
    values: dict[str, object] = {}
    for clause in clauses:
        key, sep, value = clause.partition("=")
        key = key.strip().lower()
        if not sep or key not in KEYS:
            raise ChaosSpecError(
                f"--chaos: {clause!r} is not a clause this runner knows. To fix: use key=value with key one "
                f"of {', '.join(KEYS)}, clauses separated by ';' (e.g. \"at=20s,45s;notice=gcp\")."
            )
        if key in values:
            raise ChaosSpecError(f"--chaos: {key}= is given twice. To fix: give each key once.")
        values[key] = value.strip()
    at = tuple(sorted(parse_duration(v, what="at") for v in str(values.get("at", "")).split(",") if v.strip()))
    rate = _parse_rate(str(values["rate"])) if "rate" in values else None
    seed = _parse_int(values.get("seed", "0"), "seed", minimum=0)
    node = _parse_int(values["node"], "node", minimum=0) if "node" in values else None
    notice = values.get("notice")
    if notice is not None and notice not in ("aws", "gcp", "azure"):
        raise ChaosSpecError(f"--chaos notice={notice!r}: unknown protocol. To fix: use aws, gcp or azure.")
    trace = str(values["trace"]) if "trace" in values else None
    offsets = _trace_offsets(trace) if trace else ()
    refuse = tuple(v.strip() for v in str(values.get("refuse", "")).split(",") if v.strip())
    for item in refuse:
        if item not in CLOUDS and item not in PURCHASES and ":" not in item:
            raise ChaosSpecError(
                f"--chaos refuse={item!r}: not a cloud, a purchase option or a pool id. To fix: use one of "
                f"{', '.join(CLOUDS)}, one of {', '.join(PURCHASES)}, or a pool id such as aws:us-east-1:g4dn.xlarge."
            )
    return ChaosSpec(
        at=at, rate_per_s=rate, seed=seed, trace=trace, trace_offsets=offsets,
        notice=notice if isinstance(notice, str) else None, node=node, refuse=refuse,
    )


def _parse_int(value: object, key: str, *, minimum: int) -> int:
    try:
        number = int(str(value))
    except ValueError:
        number = minimum - 1
    if number < minimum:
        raise ChaosSpecError(f"--chaos {key}={value!r}: expected a whole number >= {minimum}.")
    return number


def _parse_rate(text: str) -> float:
    """``"1/5m"`` -> one per 300 s; ``"3/h"`` -> three per 3600 s."""
    count, sep, per = text.partition("/")
    try:
        events = float(count)
    except ValueError:
        events = -1.0
    if not sep or events <= 0 or not math.isfinite(events):
        raise ChaosSpecError(
            f"--chaos rate={text!r}: expected COUNT/DURATION, e.g. rate=1/5m (once per five minutes) or rate=3/h."
        )
    period = parse_duration(per if per[:1].isdigit() or per[:1] == "." else f"1{per}", what="rate")
    if period <= 0:
        raise ChaosSpecError(f"--chaos rate={text!r}: the period must be longer than zero.")
    return events / period


def _trace_offsets(path: str) -> tuple[float, ...]:
    from pricing.errors import PricingError
    from pricing.traces import read_trace

    try:
        trace = read_trace(Path(path))
    except PricingError as exc:
        raise ChaosSpecError(f"--chaos trace={path}: {exc}") from exc
    available = trace.available
    return tuple(
        float(i * trace.gap_seconds) for i in range(1, len(available)) if available[i - 1] and not available[i]
    )


@dataclass(slots=True)
class ChaosClock:
    """Hands out the preemptions that are due, once each, in order.

    ``fired`` (how many were handed out) is all the state there is, so a resumed
    controller restores it and carries on. A time that comes while nothing can be
    reclaimed stays due until something can (see the module docstring).
    """

    times: tuple[float, ...]
    fired: int = 0

    def next_due(self, elapsed_s: float) -> float | None:
        """The earliest preemption time reached by ``elapsed_s`` not handed out yet."""
        if self.fired < len(self.times) and self.times[self.fired] <= elapsed_s:
            self.fired += 1
            return self.times[self.fired - 1]
        return None


@dataclass(frozen=True, slots=True)
class ChaosFired:
    """One preemption handed out: ``node`` is reclaimed at ``reclaim_at`` (real POSIX seconds).

    ``scheduled_s`` is when the schedule wanted it, ``elapsed_s`` when it came (wall-clock
    seconds from the run start; later when no node was training at the scheduled time).
    """

    node: str
    scheduled_s: float
    elapsed_s: float
    reclaim_at: float


class ChaosPlan:
    """A chaos spec scheduled on the run's clock: the fault plan a provider carries out."""

    def __init__(self, spec: ChaosSpec, clock: Clock, *, fired: int = 0,
                 on_fire: Callable[[ChaosFired], None] | None = None):
        self.spec = spec
        self.clock = clock
        self.on_fire = on_fire
        self._schedule = ChaosClock(spec.schedule(time_scale=clock.scale, horizon_s=HORIZON_S), fired)

    @property
    def fired(self) -> int:
        return self._schedule.fired

    @property
    def notice(self) -> str | None:
        """The notice protocol every node speaks (None: its pool's cloud)."""
        return self.spec.notice

    def due(self, nodes: Sequence[_N]) -> tuple[_N, float, float] | None:
        """The node to reclaim now, the scheduled and the actual elapsed time -- once per preemption."""
        if not nodes:
            return None
        elapsed = self.clock.wall() - self.clock.origin
        scheduled = self._schedule.next_due(elapsed)
        if scheduled is None:
            return None
        index = self.spec.node if self.spec.node is not None else len(nodes) - 1
        return nodes[min(index, len(nodes) - 1)], scheduled, elapsed

    def report(self, fired: ChaosFired) -> None:
        """The provider carried out a preemption :meth:`due` handed out."""
        if self.on_fire is not None:
            self.on_fire(fired)
