"""``planner quote`` minus the printing: a job (parsed) -> its :class:`~planner.quote.Quote`.

The command line and the dashboard's quote page both call :func:`quote_job`, so a page and
``planner quote --json`` show the same numbers for the same job and catalog.
"""

from __future__ import annotations

from planner.job import JobSpec
from planner.pools import check_gpu_names
from planner.quote import Quote, make_quote
from planner.report import price_age
from pricing.sources import resolve_catalog

__all__ = ["DEFAULT_MAX_PRICE_AGE_DAYS", "quote_job"]

DEFAULT_MAX_PRICE_AGE_DAYS = 30.0


def quote_job(job: JobSpec, *, source: str, catalog: str | None = None, use_cache: bool = True, top: int = 3,
              objective: str | None = None, max_price_age_days: float = DEFAULT_MAX_PRICE_AGE_DAYS) -> Quote:
    """Quote ``job`` (read from ``source``, named in errors) on the catalog ``planner quote`` would use.

    Raises:
        PricingError: the catalog cannot be read.
        PlannerError: the job names GPUs the catalog does not know.
    """
    prices = resolve_catalog(catalog, use_cache=use_cache)
    check_gpu_names(job, prices, source=source)
    quote = make_quote(job, prices, top=top, objective=objective)
    age = price_age(quote)["age_days"]
    if age is not None and age > max_price_age_days and quote.candidates is not None:
        quote.candidates.warnings.append(
            f"prices are {age} days old (older than {max_price_age_days:g}); run `planner prices refresh`"
        )
    return quote
