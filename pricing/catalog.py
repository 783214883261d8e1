"""Offerings (what a cloud sells, at what price) and the Catalog that holds them.

An :class:`Offering` is one instance type in one region (and, where the cloud prices
spot per zone, one zone) with its hourly prices per purchase option.  Everything the
optimizer knows about prices comes through a :class:`Catalog`; where the rows came
from (the embedded snapshot, a SkyPilot import, a live fetch) is recorded per row in
``source`` and ``as_of`` so a quote can say how old its prices are.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

PURCHASE_OPTIONS = ("spot", "on_demand", "reserved_1y", "reserved_3y")
"""Purchase options in the order the catalog stores their prices."""

HOURS_PER_YEAR = 8760.0


@dataclass(frozen=True, slots=True)
class Offering:
    """One purchasable GPU instance type in one region (or zone).

    Prices are USD per instance-hour for the whole node; ``None`` means the option is
    not sold there.  ``interruption_rate`` is the expected spot interruptions per hour
    of a running node, when known; ``interruption_bucket`` keeps the coarse label a
    cloud publishes (AWS Spot Advisor: "<5%", ..., ">20%").
    """

    cloud: str
    region: str
    zone: str | None
    instance_type: str
    gpu: str
    gpus_per_node: int
    gpu_memory_gb: float
    vcpus: float
    memory_gb: float
    on_demand: float | None
    spot: float | None = None
    reserved_1y: float | None = None
    reserved_3y: float | None = None
    interruption_rate: float | None = None
    interruption_bucket: str | None = None
    as_of: dt.date = dt.date(2026, 11, 30)
    source: str = ""

    def price(self, purchase: str) -> float | None:
        """Hourly USD for ``purchase`` (one of :data:`PURCHASE_OPTIONS`), or ``None``."""
        if purchase not in PURCHASE_OPTIONS:
            raise ValueError(f"unknown purchase option {purchase!r}; expected one of {PURCHASE_OPTIONS}")
        return getattr(self, purchase)

    @property
    def location(self) -> str:
        return f"{self.region}/{self.zone}" if self.zone else self.region

    @property
    def key(self) -> tuple[str, str, str | None, str]:
        """Identity of the row: two offerings with the same key describe the same thing."""
        return (self.cloud, self.region, self.zone, self.instance_type)


@dataclass(frozen=True, slots=True)
class CatalogFilter:
    """What to keep from a catalog.  Empty tuples and ``None`` mean "no restriction"."""

    clouds: tuple[str, ...] = ()
    region_globs: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    min_gpu_memory_gb: float | None = None
    instance_types: tuple[str, ...] = ()

    def matches(self, offering: Offering) -> bool:
        if self.clouds and offering.cloud not in self.clouds:
            return False
        if self.gpus and offering.gpu.lower() not in {g.lower() for g in self.gpus}:
            return False
        if self.min_gpu_memory_gb is not None and offering.gpu_memory_gb + 1e-9 < self.min_gpu_memory_gb:
            return False
        if self.instance_types and offering.instance_type not in self.instance_types:
            return False
        if self.region_globs and not any(fnmatch.fnmatchcase(offering.region, g) for g in self.region_globs):
            return False
        return True


@dataclass(slots=True)
class Catalog:
    """An immutable-by-convention collection of offerings with simple indexes.

    ``origin`` says where the whole catalog came from ("embedded snapshot 2026-11-30",
    a directory path, "cache"), for the quote's price-age line.
    """

    offerings: tuple[Offering, ...]
    origin: str = "embedded"
    _by_gpu: dict[str, tuple[Offering, ...]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        by_gpu: dict[str, list[Offering]] = {}
        for o in self.offerings:
            by_gpu.setdefault(o.gpu.lower(), []).append(o)
        self._by_gpu = {k: tuple(v) for k, v in by_gpu.items()}

    @classmethod
    def of(cls, offerings: Iterable[Offering], origin: str = "embedded") -> Catalog:
        return cls(tuple(offerings), origin=origin)

    def __iter__(self) -> Iterator[Offering]:
        return iter(self.offerings)

    def __len__(self) -> int:
        return len(self.offerings)

    @property
    def clouds(self) -> tuple[str, ...]:
        return tuple(sorted({o.cloud for o in self.offerings}))

    @property
    def gpus(self) -> tuple[str, ...]:
        return tuple(sorted({o.gpu for o in self.offerings}))

    @property
    def oldest(self) -> dt.date | None:
        return min((o.as_of for o in self.offerings), default=None)

    @property
    def newest(self) -> dt.date | None:
        return max((o.as_of for o in self.offerings), default=None)

    def filter(self, flt: CatalogFilter | None = None, **kwargs: Sequence[str] | float | None) -> Catalog:
        """Offerings matching ``flt`` (or a filter built from keyword arguments)."""
        if flt is None:
            flt = CatalogFilter(**{k: tuple(v) if isinstance(v, (list, tuple)) else v for k, v in kwargs.items()})
        candidates: Iterable[Offering] = self.offerings
        if flt.gpus:
            candidates = [o for g in flt.gpus for o in self._by_gpu.get(g.lower(), ())]
        return Catalog(tuple(o for o in candidates if flt.matches(o)), origin=self.origin)

    def merged_with(self, newer: Catalog) -> Catalog:
        """This catalog with every row that ``newer`` also has replaced by the fresher one."""
        rows: dict[tuple[str, str, str | None, str], Offering] = {o.key: o for o in self.offerings}
        for o in newer.offerings:
            old = rows.get(o.key)
            if old is None or o.as_of >= old.as_of:
                rows[o.key] = o
        return Catalog(tuple(rows.values()), origin=f"{self.origin} + {newer.origin}")

