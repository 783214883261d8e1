"""What a switching policy has seen of the spot pools: runs of availability and outages.

:class:`PolicyMemory` is immutable and JSON-serialisable (``to_dict``/``from_dict``),
so a controller persists it with the run and a restarted controller decides exactly
as one that never stopped.  Per pool it keeps one :class:`PoolRecord`: whether the
pool is up, since when, and the totals of the runs (up) and outages (down) that have
ended.  Those are the sufficient statistics of an alternating renewal process with
exponential run and outage lengths, so :meth:`PoolRecord.mean_up_hours` is the
maximum-likelihood mean run length (the open run counted as censored), shrunk
towards a prior by one pseudo-run.  ``union`` is the same record for "some pool is
up", the process a policy that can move between pools lives in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class PoolRecord:
    """One pool's (or the union's) availability history, in elapsed hours."""

    up: bool
    since: float
    up_hours: float = 0.0
    down_hours: float = 0.0
    runs_ended: int = 0
    outages_ended: int = 0

    def seen(self, up: bool, now: float) -> PoolRecord:
        """The record after seeing the pool ``up`` (or not) at ``now``."""
        if up == self.up:
            return self
        length = max(now - self.since, 0.0)
        if self.up:
            return replace(self, up=False, since=now, up_hours=self.up_hours + length, runs_ended=self.runs_ended + 1)
        return replace(self, up=True, since=now, down_hours=self.down_hours + length,
                       outages_ended=self.outages_ended + 1)

    def mean_up_hours(self, now: float, prior: float) -> float:
        """Mean length of a run of availability: exposure over ended runs, plus one prior run."""
        open_run = now - self.since if self.up else 0.0
        return (self.up_hours + open_run + prior) / (self.runs_ended + 1)

    def mean_down_hours(self, now: float, prior: float) -> float:
        """Mean length of an outage, the same way."""
        open_outage = now - self.since if not self.up else 0.0
        return (self.down_hours + open_outage + prior) / (self.outages_ended + 1)

    def age(self, now: float) -> float:
        """How long the current run (or outage) has lasted."""
        return max(now - self.since, 0.0)

    def to_list(self) -> list[Any]:
        return [self.up, self.since, self.up_hours, self.down_hours, self.runs_ended, self.outages_ended]

    @classmethod
    def from_list(cls, raw: Any) -> PoolRecord:
        if not isinstance(raw, list) or len(raw) != 6:
            raise TypeError(f"policy memory: a pool record is a list of 6 values, got {raw!r}")
        up, since, up_h, down_h, runs, outages = raw
        return cls(bool(up), float(since), float(up_h), float(down_h), int(runs), int(outages))


@dataclass(frozen=True, slots=True)
class PolicyMemory:
    """What a policy remembers between decisions (JSON-serialisable, immutable)."""

    pools: Mapping[str, PoolRecord] = field(default_factory=dict)
    union: PoolRecord | None = None

    @property
    def pool_up_since(self) -> dict[str, float]:
        """The pools up at the last decision, and the hour each run was first seen."""
        return {p: r.since for p, r in self.pools.items() if r.up}

    def observe(self, now: float, up: Mapping[str, object], preempted: str | None = None) -> PolicyMemory:
        """The memory after seeing the pools in ``up`` available at ``now`` (and the others not).

        A pool seen for the first time starts its record then; ``preempted`` (a pool
        just lost) starts one as down, so an outage is measured even for a pool never
        seen up before.
        """
        pools = {p: r.seen(p in up, now) for p, r in self.pools.items()}
        for p in up:
            if p not in pools:
                pools[p] = PoolRecord(True, now)
        if preempted is not None and preempted not in pools:
            pools[preempted] = PoolRecord(False, now)
        union = PoolRecord(bool(up), now) if self.union is None else self.union.seen(bool(up), now)
        return PolicyMemory(pools, union)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pools": {p: r.to_list() for p, r in self.pools.items()},
            "union": None if self.union is None else self.union.to_list(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PolicyMemory:
        """The memory saved by :meth:`to_dict`; a run saved before pool records existed
        (``{"pool_up_since": {pool: hour}}``) resumes with those pools up since then."""
        if "pool_up_since" in data and "pools" not in data:
            raw = data["pool_up_since"]
            if not isinstance(raw, Mapping):
                raise TypeError(f"policy memory: 'pool_up_since' must be a mapping, got {type(raw).__name__}")
            return cls({str(k): PoolRecord(True, float(v)) for k, v in raw.items()})
        raw = data.get("pools", {})
        if not isinstance(raw, Mapping):
            raise TypeError(f"policy memory: 'pools' must be a mapping, got {type(raw).__name__}")
        union = data.get("union")
        return cls({str(k): PoolRecord.from_list(v) for k, v in raw.items()},
                   None if union is None else PoolRecord.from_list(union))
