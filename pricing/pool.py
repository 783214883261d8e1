"""A pool: one offering bought one way -- what the planner chooses, a provider runs on and
the ledger bills.

One type from the catalog to the MILP, the quote's JSON, the controller, the providers and
the ledger. A pool has no node count: a plan phase, a launch and a ledger interval say
how many nodes of it they use.

Prices are per node. ``hourly_usd`` is the marginal price of an hour (0 for held
capacity and for a term bought for the job); ``term_usd`` is charged once, when the
term is bought (the whole term, as the SPEC says); ``term_hours`` is how long the pool
may run (the term's length, or until a held reservation ends).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from pricing.catalog import HOURS_PER_YEAR, PURCHASE_OPTIONS, Offering

HELD = "reserved_held"
"""Capacity the team already pays for (``[[purchase.held]]``): $0 an hour, recorded all the same."""
CLUSTER = "cluster"
"""A team's own Kubernetes cluster (``[[purchase.cluster]]``): its internal price per hour, used first like held capacity."""
CLUSTER_CLOUD = "kubernetes"
"""The ``cloud`` of a cluster pool: ``kubernetes:<context>/<namespace>:<name>``."""
TERM_YEARS = {"reserved_1y": 1, "reserved_3y": 3}
PURCHASES = (*PURCHASE_OPTIONS, HELD, CLUSTER)
"""Every way a pool can be bought."""


class PoolError(ValueError):
    """A pool record that cannot be right (unknown purchase option, negative price, ...)."""


@dataclass(frozen=True, slots=True)
class Pool:
    """``instance_type`` in ``cloud:region`` (and ``zone``, for spot), bought as ``purchase``."""

    cloud: str
    region: str
    zone: str | None
    instance_type: str
    gpu: str
    gpus_per_node: int
    purchase: str
    hourly_usd: float
    term_usd: float = 0.0
    term_hours: float | None = None
    # A held pool's reservation in its cloud (``[[purchase.held]]`` reservation_id), which its launches target:
    # two reservations of one instance type are two pools, each with its own count and end. None: any other
    # pool, or held capacity the cloud applies by itself (a regional RI, a savings plan, an open ODCR).
    reservation: str | None = None

    def __post_init__(self) -> None:
        if self.purchase not in PURCHASES:
            raise PoolError(f"purchase={self.purchase!r} is not one of {', '.join(PURCHASES)}")
        for name in ("hourly_usd", "term_usd"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise PoolError(f"{name}={value!r} must be a finite number >= 0")
        if self.term_hours is not None and not (math.isfinite(self.term_hours) and self.term_hours > 0):
            raise PoolError(f"term_hours={self.term_hours!r} must be a finite number > 0")
        if not (isinstance(self.gpus_per_node, int) and self.gpus_per_node >= 1):
            raise PoolError(f"gpus_per_node={self.gpus_per_node!r} must be an integer >= 1")
        if self.reservation is not None and self.purchase != HELD:
            raise PoolError(f"reservation={self.reservation!r} is for a {HELD} pool, not {self.purchase}")

    @classmethod
    def of(cls, offering: Offering, purchase: str) -> Pool | None:
        """``offering`` bought as ``purchase`` (one of the catalog's options), or None where it is not sold."""
        price = offering.price(purchase)
        if not price:
            return None
        years = TERM_YEARS.get(purchase)
        return cls(
            cloud=offering.cloud, region=offering.region, zone=offering.zone if purchase == "spot" else None,
            instance_type=offering.instance_type, gpu=offering.gpu, gpus_per_node=offering.gpus_per_node,
            purchase=purchase, hourly_usd=0.0 if years else price,
            term_usd=price * HOURS_PER_YEAR * years if years else 0.0,
            term_hours=HOURS_PER_YEAR * years if years else None,
        )

    @classmethod
    def held(cls, offering: Offering, *, hours_left: float, reservation: str | None = None) -> Pool:
        """Held reserved capacity of ``offering``'s type, usable for ``hours_left`` more hours (in the
        cloud's ``reservation``, when its launches target one)."""
        return cls(
            cloud=offering.cloud, region=offering.region, zone=None, instance_type=offering.instance_type,
            gpu=offering.gpu, gpus_per_node=offering.gpus_per_node, purchase=HELD, hourly_usd=0.0,
            term_hours=hours_left, reservation=reservation,
        )

    @property
    def location(self) -> str:
        return f"{self.region}/{self.zone}" if self.zone else self.region

    @property
    def id(self) -> str:
        """The pool without its purchase option: ``aws:us-east-1/use1-az1:g4dn.xlarge``; a held pool in a
        reservation it targets ends with it, ``aws:us-east-1:p5.48xlarge@cr-0123456789abcdef0``."""
        return pool_id(self.cloud, self.location, self.instance_type, self.reservation)

    @property
    def key(self) -> tuple[str, str]:
        """(id, purchase): the same capacity bought the same way."""
        return (self.id, self.purchase)

    def label(self, nodes: int | None = None) -> str:
        """``2x g4dn.xlarge spot aws:us-east-1/use1-az1`` (no count when ``nodes`` is None); a reservation
        by the last part of its name (a GCE or Azure one is a path)."""
        text = f"{self.instance_type} {self.purchase} {self.cloud}:{self.location}"
        if self.reservation:
            text += f" {self.reservation.rstrip('/').rsplit('/', 1)[-1]}"
        return f"{nodes}x {text}" if nodes is not None else text

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.reservation is None:  # as every pool but a targeted held one was written before it had one
            del data["reservation"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Pool:
        """A pool read back from JSON; raises :class:`PoolError` naming what is wrong."""
        try:
            return cls(
                cloud=str(data["cloud"]), region=str(data["region"]),
                zone=None if data.get("zone") is None else str(data["zone"]),
                instance_type=str(data["instance_type"]), gpu=str(data["gpu"]),
                gpus_per_node=int(data["gpus_per_node"]), purchase=str(data["purchase"]),
                hourly_usd=float(data["hourly_usd"]), term_usd=float(data.get("term_usd") or 0.0),
                term_hours=None if data.get("term_hours") is None else float(data["term_hours"]),
                reservation=None if data.get("reservation") is None else str(data["reservation"]),
            )
        except KeyError as exc:
            raise PoolError(f"key {exc.args[0]!r} is missing") from None
        except (TypeError, ValueError) as exc:
            if isinstance(exc, PoolError):
                raise
            raise PoolError(str(exc)) from None


def pool_id(cloud: str, location: str, instance_type: str, reservation: str | None = None) -> str:
    """A pool's :attr:`Pool.id` from its parts (a ``[[purchase.held]]`` entry's pool: its cloud, region,
    instance type and reservation_id)."""
    return f"{cloud}:{location}:{instance_type}" + (f"@{reservation}" if reservation else "")
