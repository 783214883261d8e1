"""The SQLite price cache: round trips, per-region replacement, one transaction, clear errors."""

from __future__ import annotations

import datetime as dt
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from pricing.cache import (
    CACHE_FILENAME,
    CacheError,
    PriceCache,
    default_cache_path,
    load_cached_catalog,
)
from pricing.catalog import Offering
from pricing.refresh import FetchResult, RegionError

T0 = dt.datetime(2026, 11, 20, 8, 30, tzinfo=dt.timezone.utc)
T1 = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.timezone.utc)


def offering(
    cloud: str = "aws", region: str = "us-east-1", itype: str = "p4d.24xlarge", **prices: float | None
) -> Offering:
    return Offering(
        cloud=cloud, region=region, zone=prices.pop("zone", None), instance_type=itype, gpu="A100", gpus_per_node=8,  # type: ignore[arg-type]
        gpu_memory_gb=40.0, vcpus=96.0, memory_gb=1152.0, on_demand=prices.get("on_demand", 21.96),
        spot=prices.get("spot"), reserved_1y=prices.get("reserved_1y"), interruption_bucket="10-15%", source="test",
    )  # fmt: skip


def test_rows_round_trip_with_their_fetch_day(tmp_path: Path) -> None:
    cache = PriceCache(tmp_path / "p.sqlite3")
    rows = [offering(zone="us-east-1a", spot=5.09), offering(itype="g5.xlarge", on_demand=1.006, reserved_1y=0.63)]  # type: ignore[arg-type]
    assert cache.store(rows, cloud="aws", fetched_at=T1) == 2
    loaded = {o.instance_type: o for o in cache.load()}
    assert loaded["p4d.24xlarge"] == replace(rows[0], as_of=T1.date())
    assert loaded["g5.xlarge"].zone is None and loaded["g5.xlarge"].reserved_1y == 0.63
    assert cache.load().origin == f"cache {tmp_path / 'p.sqlite3'}"


def test_a_refresh_replaces_only_its_cloud_and_regions(tmp_path: Path) -> None:
    cache = PriceCache(tmp_path / "p.sqlite3")
    cache.store([offering(region="us-east-1"), offering(region="us-west-2")], cloud="aws", fetched_at=T0)
    cache.store([offering(cloud="gcp", region="us-central1", itype="a2-highgpu-1g")], cloud="gcp", fetched_at=T0)
    cache.store([offering(region="us-east-1", on_demand=20.0)], cloud="aws", fetched_at=T1, regions=["us-east-1"])
    got = {(o.cloud, o.region): (o.on_demand, o.as_of) for o in cache.load()}
    assert got == {
        ("aws", "us-east-1"): (20.0, T1.date()),
        ("aws", "us-west-2"): (21.96, T0.date()),
        ("gcp", "us-central1"): (21.96, T0.date()),
    }
    cache.store([], cloud="aws", fetched_at=T1)  # regions=None: the whole cloud
    assert {o.cloud for o in cache.load()} == {"gcp"}


def test_a_failed_store_leaves_the_previous_prices(tmp_path: Path) -> None:
    cache = PriceCache(tmp_path / "p.sqlite3")
    cache.store([offering()], cloud="aws", fetched_at=T0)
    duplicate = [offering(on_demand=1.0), offering(on_demand=2.0)]
    with pytest.raises(CacheError, match="nothing was written"):
        cache.store(duplicate, cloud="aws", fetched_at=T1)
    with pytest.raises(CacheError, match="nothing was written"):
        cache.store([offering(on_demand=-1.0)], cloud="aws", fetched_at=T1)
    [kept] = cache.load()
    assert (kept.on_demand, kept.as_of) == (21.96, T0.date())


def test_results_are_stored_in_one_transaction_and_failed_regions_keep_their_rows(tmp_path: Path) -> None:
    cache = PriceCache(tmp_path / "p.sqlite3")
    cache.store([offering(region="us-east-1"), offering(region="eu-west-1")], cloud="aws", fetched_at=T0)
    partial = FetchResult(
        cloud="aws", fetched_at=T1, offerings=(offering(region="us-east-1", on_demand=19.0),), regions=("us-east-1",),
        errors=(RegionError("eu-west-1", "aws: throttled"),),
    )  # fmt: skip
    failed = FetchResult(cloud="gcp", fetched_at=T1, errors=(RegionError("*", "gcp: no credentials"),))
    assert cache.store_results([partial, failed]) == 1
    got = {o.region: (o.on_demand, o.as_of) for o in cache.load()}
    assert got == {"us-east-1": (19.0, T1.date()), "eu-west-1": (21.96, T0.date())}


def test_age_and_summary(tmp_path: Path) -> None:
    cache = PriceCache(tmp_path / "p.sqlite3")
    assert cache.age() is None and cache.summary() == []
    cache.store([offering()], cloud="aws", fetched_at=T0)
    cache.store([offering(cloud="gcp", region="us-central1")], cloud="gcp", fetched_at=T1)
    assert cache.age(now=T1) == T1 - T0
    [aws, gcp] = cache.summary()
    assert (aws.cloud, aws.rows, aws.regions, aws.oldest) == ("aws", 1, 1, T0)
    assert gcp.newest == T1


def test_default_location_honours_danlu_data_dir(data_dir: Path) -> None:
    assert default_cache_path() == data_dir / CACHE_FILENAME
    assert load_cached_catalog() is None  # absent
    PriceCache(default_cache_path()).store([], cloud="aws", fetched_at=T1)
    assert load_cached_catalog() is None  # present but empty
    PriceCache(default_cache_path()).store([offering()], cloud="aws", fetched_at=T1)
    catalog = load_cached_catalog()
    assert catalog is not None and len(catalog) == 1 and catalog.newest == T1.date()


def test_explicit_path_wins(tmp_path: Path, data_dir: Path) -> None:
    elsewhere = tmp_path / "elsewhere.sqlite3"
    PriceCache(elsewhere).store([offering()], cloud="aws", fetched_at=T1)
    assert load_cached_catalog(elsewhere) is not None and load_cached_catalog() is None


def test_a_file_that_is_not_a_cache_is_named_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite3"
    path.write_text("this is not sqlite\n" * 100)
    with pytest.raises(
        CacheError, match=rf"{path}: not a readable price cache .*delete the file and run 'planner prices refresh'"
    ):
        load_cached_catalog(path)


def test_a_cache_from_a_newer_danlu_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(CacheError, match="schema 99 is newer"):
        PriceCache(path).load()
