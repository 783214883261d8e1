"""What a catalog row must look like before a quote may rest on it.

A catalog that lies makes a confident wrong quote: a spot price of 1e-12 is "chosen and
shown as $0.0", ``AcceleratorCount = 1e9`` makes every job look infeasible, an ``as_of``
of 9999-12-31 outranks every later price, and a cheaper duplicate row wins by its place
in the file. These checks are shared by every reader; readers of files a tool wrote
(offerings CSV) refuse such a row, readers of third-party catalogs (SkyPilot) leave it out
with a warning naming the file and line.

Bounds, per node and hour: the cheapest GPU instance any cloud lists is a few cents (a
fractional T4 slice), the dearest about $100-$150 (8x B200/H200); a thousandth of a dollar
and $5,000 leave room for every real row and none of the lies above. No instance type
carries more than 16 GPUs today; 64 leaves room for the next generation.
"""

from __future__ import annotations

import datetime as dt
import math
import re

from pricing.catalog import PURCHASE_OPTIONS, Offering

MIN_HOURLY_USD = 0.001
MAX_HOURLY_USD = 5_000.0
MAX_GPUS_PER_NODE = 64
MAX_GPU_MEMORY_GB = 1_024.0
EARLIEST_AS_OF = dt.date(2006, 8, 25)  # EC2's launch: no cloud price is older
FUTURE_SLACK = dt.timedelta(days=2)  # a price dated "tomorrow" in another time zone is fine

_NUMBER = re.compile(r"[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?|\.[0-9]+([eE][-+]?[0-9]+)?")


def strict_number(text: str) -> float:
    """A plain decimal number (``0.526``, ``1e-3``); raises ValueError for ``0_1``, ``inf``, ``nan``, ``0x1p3``.

    Python's own ``float()`` reads ``"0_1"`` as 1.0 and accepts ``"inf"``: in a price column
    both are typos, not prices.
    """
    text = text.strip()
    if not _NUMBER.fullmatch(text):
        raise ValueError(f"{text!r} is not a plain decimal number")
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is out of range")
    return value


def implausible(o: Offering, *, today: dt.date) -> str | None:
    """Why ``o`` cannot be a real offering, or None when it can."""
    for option in PURCHASE_OPTIONS:
        price = o.price(option)
        if price is not None and not MIN_HOURLY_USD <= price <= MAX_HOURLY_USD:
            return (f"{option} price {price!r} $/h is outside {MIN_HOURLY_USD}-{MAX_HOURLY_USD:,.0f} $/h per node "
                    f"({o.instance_type})")
    if not 1 <= o.gpus_per_node <= MAX_GPUS_PER_NODE:
        return f"{o.gpus_per_node} GPUs per node is outside 1-{MAX_GPUS_PER_NODE} ({o.instance_type})"
    if not 0 < o.gpu_memory_gb <= MAX_GPU_MEMORY_GB:
        return f"{o.gpu_memory_gb!r} GB per GPU is outside 0-{MAX_GPU_MEMORY_GB:,.0f} GB ({o.instance_type})"
    if o.as_of > today + FUTURE_SLACK:
        return f"as_of {o.as_of.isoformat()} is in the future"
    if o.as_of < EARLIEST_AS_OF:
        return f"as_of {o.as_of.isoformat()} is before any cloud sold GPUs"
    return None


def conflict(a: Offering, b: Offering) -> str | None:
    """How two rows of the same offering (same :attr:`Offering.key`) disagree, or None if they agree."""
    if a == b:
        return None
    differ = [f for f in ("gpu", "gpus_per_node", "gpu_memory_gb", *PURCHASE_OPTIONS, "as_of")
              if getattr(a, f) != getattr(b, f)]
    return ", ".join(f"{f} {getattr(a, f)} vs {getattr(b, f)}" for f in differ) or "other columns differ"
