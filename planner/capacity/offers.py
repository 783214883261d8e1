"""What each GPU class can be bought as: reservation options and the elastic prices.

Prices are the catalog's, per GPU-hour so that classes of 1-GPU and 8-GPU instance types
compare; a reservation stays whole instances (its count is an integer in the model).

* **On-demand**: the cheapest per GPU-hour of the class's offerings in the allowed clouds
  and regions; it has no capacity limit, so only the cheapest matters.
* **Spot**: the cheapest *effective* price: a GPU-hour of spot yields only
  ``1 - rate * loss`` useful GPU-hours, ``rate`` the pool's interruptions per node-hour
  (pricing/risk.py) and ``loss`` the file's ``spot_loss_hours`` (restart and rework).
* **Reserved**: per (cloud, region, instance type, term), the catalog's effective hourly rate
  (upfront fees amortised, as the clouds publish it).  A reservation is billed every hour of
  its term, used or not, whatever its payment option, so its cost is the whole term.
  An option is dropped when another one of the same term is no dearer per GPU-hour and
  its GPUs per node divide this one's (any count of the dropped one is matched, GPU for GPU,
  by the other), or when it is no cheaper than on-demand (it can never pay off).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from planner.capacity.demand import ClassDemand, Demand
from planner.capacity.errors import NoOfferError
from pricing.catalog import HOURS_PER_YEAR, Catalog, CatalogFilter, Offering
from pricing.risk import interruption_rate

TERMS = {"reserved_1y": 1, "reserved_3y": 3}


@dataclass(frozen=True, slots=True)
class ElasticPrice:
    """Pay-per-use capacity of one pool: USD per useful GPU-hour."""

    cloud: str
    region: str
    zone: str | None
    instance_type: str
    usd_per_gpu_hour: float


@dataclass(frozen=True, slots=True)
class ReservedOption:
    """A term of one instance type in one region, as the model may buy it."""

    cloud: str
    region: str
    instance_type: str
    gpu: str
    gpus_per_node: int
    term: str
    hourly_usd: float  # per node, every hour of the term

    @property
    def term_hours(self) -> float:
        return HOURS_PER_YEAR * TERMS[self.term]

    @property
    def term_usd(self) -> float:
        return self.hourly_usd * self.term_hours

    @property
    def usd_per_gpu_hour(self) -> float:
        return self.hourly_usd / self.gpus_per_node

    def term_periods(self, period_hours: float) -> int:
        """Whole periods one term covers; the rest of the term (a day, for weeks) is paid but not planned on."""
        return max(1, int(self.term_hours // period_hours + 1e-9))


@dataclass(frozen=True, slots=True)
class ClassOffers:
    on_demand: ElasticPrice | None
    spot: ElasticPrice | None
    reserved: tuple[ReservedOption, ...]


def class_offers(demand: Demand, catalog: Catalog, *, allow: Iterable[str], clouds: tuple[str, ...] = (),
                 regions: tuple[str, ...] = (), spot_loss_hours: float = 0.25) -> dict[str, ClassOffers]:
    """The offers of every class in ``demand``; raises :class:`NoOfferError` for a class nothing can serve."""
    allow = set(allow)
    out: dict[str, ClassOffers] = {}
    for cls in demand.classes:
        rows = catalog.filter(CatalogFilter(clouds=cls.clouds or clouds, region_globs=cls.regions or regions,
                                            gpus=(cls.gpu,))).offerings
        offers = offers_for(rows, allow, spot_loss_hours)
        _check_servable(cls, offers, allow, catalog, clouds, regions)
        out[cls.name] = offers
    return out


def offers_for(rows: Iterable[Offering], allow: set[str], spot_loss_hours: float) -> ClassOffers:
    rows = list(rows)
    on_demand = _cheapest(
        ElasticPrice(o.cloud, o.region, None, o.instance_type, o.on_demand / o.gpus_per_node)
        for o in rows if "on_demand" in allow and o.on_demand)
    spot = _cheapest(_spot_price(o, spot_loss_hours) for o in rows if "spot" in allow and o.spot)
    reserved: dict[tuple[str, str, str, str], ReservedOption] = {}
    for o in rows:
        for term in TERMS:
            price = o.price(term)
            if term in allow and price:
                option = ReservedOption(o.cloud, o.region, o.instance_type, o.gpu, o.gpus_per_node, term, price)
                reserved.setdefault((o.cloud, o.region, o.instance_type, term), option)  # zones share one price
    return ClassOffers(on_demand, spot, tuple(_undominated(list(reserved.values()), on_demand)))


def _spot_price(o: Offering, loss_hours: float) -> ElasticPrice | None:
    useful = 1.0 - interruption_rate(o) * loss_hours
    if useful <= 0.05:  # interrupted so often that almost nothing gets done
        return None
    return ElasticPrice(o.cloud, o.region, o.zone, o.instance_type, o.spot / o.gpus_per_node / useful)


def _cheapest(prices: Iterable[ElasticPrice | None]) -> ElasticPrice | None:
    found = [p for p in prices if p is not None and math.isfinite(p.usd_per_gpu_hour)]
    return min(found, key=lambda p: (p.usd_per_gpu_hour, p.cloud, p.region, p.zone or "", p.instance_type),
               default=None)


def _undominated(options: list[ReservedOption], on_demand: ElasticPrice | None) -> list[ReservedOption]:
    if on_demand is not None:
        options = [o for o in options if o.usd_per_gpu_hour < on_demand.usd_per_gpu_hour]
    options.sort(key=lambda o: (o.term, o.usd_per_gpu_hour, o.gpus_per_node, o.cloud, o.region, o.instance_type))
    kept: list[ReservedOption] = []
    for o in options:
        if not any(k.term == o.term and k.usd_per_gpu_hour <= o.usd_per_gpu_hour
                   and o.gpus_per_node % k.gpus_per_node == 0 for k in kept):
            kept.append(o)
    return kept


def _check_servable(cls: ClassDemand, offers: ClassOffers, allow: set[str], catalog: Catalog,
                    clouds: tuple[str, ...], regions: tuple[str, ...]) -> None:
    # Non-preemptible demand needs on-demand or a reservation; spot alone serves only its share.
    firm = offers.on_demand is not None or bool(offers.reserved)
    if firm or (cls.preemptible_share >= 1 and offers.spot is not None) or not any(cls.gpu_hours):
        return
    known = catalog.filter(CatalogFilter(gpus=(cls.gpu,)))
    if not len(known):
        raise NoOfferError(f"demand class {cls.name!r}: the catalog has no GPU {cls.gpu!r}; known GPUs: "
                           f"{', '.join(catalog.gpus)}")
    where = f"clouds {list(cls.clouds or clouds) or 'any'}, regions {list(cls.regions or regions) or 'any'}"
    raise NoOfferError(f"demand class {cls.name!r} ({cls.gpu}): nothing in the catalog sells it as "
                       f"{', '.join(sorted(allow))} in {where}; widen [constraints] or add on_demand/reserved "
                       "to [purchase] allow")
