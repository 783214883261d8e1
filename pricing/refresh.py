"""Refreshing prices from the clouds' live APIs into the local price cache.

Every cloud is one module (``pricing/aws.py``, ``pricing/azure.py``,
``pricing/gcp.py``) that exposes ``create_fetcher(**options) -> PriceFetcher``.
A fetcher knows how to talk to its cloud; this module knows nothing about any cloud:
it runs fetchers, gathers their :class:`FetchResult` and stores every result in the
:class:`~pricing.cache.PriceCache` in one transaction.  Adding a cloud means adding
one module and its name to :data:`CLOUDS`.

A fetch fails per region: what was fetched is kept and the failed regions are
reported in :attr:`FetchResult.errors`.  A failure that dooms every region
(missing credentials, no network) stops the cloud early with one
:class:`FetchError` whose message names the cloud and the fix.
"""

from __future__ import annotations

import datetime as dt
import importlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pricing.catalog import Offering
from pricing.errors import PricingError

if TYPE_CHECKING:
    from pricing.cache import PriceCache

CLOUDS = ("aws", "azure", "gcp")
"""Clouds with a live price fetcher, each one module ``pricing/<cloud>.py``."""

ProgressCallback = Callable[[str, int, int], None]
"""``progress(message, done, total)``: called by a fetcher as it works through its regions."""


class FetchError(PricingError):
    """A live price fetch failed.  The message names the cloud and says how to fix it."""

    def __init__(self, cloud: str, message: str):
        self.cloud = cloud
        super().__init__(f"{cloud}: {message}")


class MissingCredentialsError(FetchError):
    """The SDK's standard credential chain found nothing usable."""


class AccessDeniedError(FetchError):
    """The credentials work but lack a permission (or an API is not enabled)."""


class NetworkError(FetchError):
    """The cloud's endpoint could not be reached."""


class ThrottledError(FetchError):
    """The cloud kept throttling after every retry."""


class MalformedResponseError(FetchError):
    """A response did not have the shape the API documents."""


class InvalidRegionError(FetchError):
    """A region name given by the user is not a valid name for that cloud."""


FATAL_ERRORS: tuple[type[FetchError], ...] = (MissingCredentialsError, AccessDeniedError, NetworkError)
"""Errors that would repeat for every remaining region, so a fetch stops at the first one."""


@dataclass(frozen=True, slots=True)
class RegionError:
    """One region that could not be fetched, and why."""

    region: str
    message: str


@dataclass(frozen=True, slots=True)
class FetchResult:
    """What one fetcher brought back.

    ``regions`` lists the regions fetched completely; the cache replaces exactly
    those regions' rows, so a region that failed keeps its previous prices.
    ``warnings`` are prices refused or doubted (an ambiguous SKU, spot above
    on-demand) while the region itself was fetched.
    """

    cloud: str
    fetched_at: dt.datetime
    offerings: tuple[Offering, ...] = ()
    regions: tuple[str, ...] = ()
    errors: tuple[RegionError, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.errors


class PriceFetcher(Protocol):
    """A cloud's live price source."""

    cloud: str

    def fetch(self, regions: Sequence[str] | None, progress: ProgressCallback | None = None) -> FetchResult:
        """Offerings for ``regions`` (``None``: every region the account can use)."""
        ...


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def create_fetcher(cloud: str, **options: Any) -> PriceFetcher:
    """The live fetcher for ``cloud``, built from the SDK's standard credential chain.

    ``options`` are cloud specific (``project`` for GCP, ``subscription`` for Azure,
    ``profile`` for AWS); ``None`` values are ignored.
    """
    if cloud not in CLOUDS:
        raise PricingError(f"unknown cloud {cloud!r}; expected one of {', '.join(CLOUDS)}")
    module = importlib.import_module(f"pricing.{cloud}")
    return module.create_fetcher(**{k: v for k, v in options.items() if v is not None})


@dataclass(slots=True)
class RegionFetch:
    """Accumulates one fetcher's per-region outcomes into a :class:`FetchResult`."""

    cloud: str
    fetched_at: dt.datetime
    offerings: list[Offering] = field(default_factory=list)
    regions: list[str] = field(default_factory=list)
    errors: list[RegionError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def result(self) -> FetchResult:
        return FetchResult(
            cloud=self.cloud,
            fetched_at=self.fetched_at,
            offerings=tuple(self.offerings),
            regions=tuple(self.regions),
            errors=tuple(self.errors),
            warnings=tuple(self.warnings),
        )


def fetch_by_region(
    fetch: RegionFetch,
    regions: Sequence[str],
    fetch_region: Callable[[str], Iterable[Offering]],
    progress: ProgressCallback | None,
) -> FetchResult:
    """Run ``fetch_region`` for each region, keeping what succeeds.

    A :class:`FetchError` fails its region only; one of :data:`FATAL_ERRORS` also
    marks every region not yet tried as failed with the same message, since trying
    them would only repeat it.
    """
    total = len(regions)
    for done, region in enumerate(regions):
        if progress:
            progress(f"{fetch.cloud} {region}", done, total)
        try:
            rows = list(fetch_region(region))
        except FATAL_ERRORS as exc:
            fetch.errors.extend(RegionError(r, str(exc)) for r in regions[done:])
            break
        except FetchError as exc:
            fetch.errors.append(RegionError(region, str(exc)))
            continue
        fetch.offerings.extend(rows)
        fetch.regions.append(region)
    if progress:
        progress(f"{fetch.cloud} done", total, total)
    return fetch.result()


@dataclass(frozen=True, slots=True)
class RefreshReport:
    """The outcome of one ``planner prices refresh``."""

    results: tuple[FetchResult, ...]
    cache_path: Path
    stored_rows: int

    @property
    def failed_clouds(self) -> tuple[str, ...]:
        """Clouds for which nothing at all could be fetched."""
        return tuple(r.cloud for r in self.results if r.errors and not r.regions)

    @property
    def complete(self) -> bool:
        return all(r.complete for r in self.results)


def refresh(
    clouds: Sequence[str],
    cache: PriceCache,
    *,
    regions: Sequence[str] | None = None,
    make_fetcher: Callable[[str], PriceFetcher] | None = None,
    progress_for: Callable[[str], ProgressCallback | None] | None = None,
) -> RefreshReport:
    """Fetch every cloud in ``clouds`` and store all results in ``cache`` at once.

    ``make_fetcher(cloud)`` builds each fetcher (default: :func:`create_fetcher` with
    no options).  Nothing is written until every fetcher has finished, and then in
    one transaction, so an interrupted refresh leaves the cache exactly as it was.
    A cloud that fails before its first region (no credentials, a bad region name)
    is recorded as a failure of every requested region; the other clouds go ahead.
    """
    build = make_fetcher or create_fetcher
    results: list[FetchResult] = []
    for cloud in clouds:
        progress = progress_for(cloud) if progress_for else None
        try:
            results.append(build(cloud).fetch(regions, progress))
        except FetchError as exc:
            failed = tuple(RegionError(r, str(exc)) for r in (regions or ("*",)))
            results.append(FetchResult(cloud=cloud, fetched_at=utc_now(), errors=failed))
    stored = cache.store_results(results)
    return RefreshReport(results=tuple(results), cache_path=cache.path, stored_rows=stored)
