"""How the cache overlays the snapshot: whole regions, keeping what fresh rows lack."""

import datetime as dt

from pricing.catalog import Catalog, Offering
from pricing.embedded_catalog import overlay

OLD = dt.date(2025, 7, 3)
NEW = dt.date(2026, 11, 29)


def row(region, zone, itype, od, as_of, **kw):
    return Offering("aws", region, zone, itype, "A100", 8, 40, 96, 1152, od, as_of=as_of, **kw)


def test_refresh_replaces_whole_regions_and_keeps_commitments():
    snapshot = Catalog.of([
        row("us-east-1", "use1-az1", "p4d.24xlarge", 21.96, OLD, spot=9.0, reserved_1y=13.9,
            interruption_bucket=">20%", source="snap; RI: x"),
        row("us-east-1", "use1-az2", "p4d.24xlarge", 21.96, OLD, spot=8.0),
        row("us-east-1", "use1-az1", "p3.16xlarge", 24.48, OLD),  # no longer sold: dropped
        row("us-west-2", "usw2-az1", "p4d.24xlarge", 21.96, OLD),  # not refreshed: kept
    ], origin="embedded")
    cache = Catalog.of([row("us-east-1", "use1-az3", "p4d.24xlarge", 21.96, NEW, spot=7.0)], origin="cache")
    merged = overlay(snapshot, cache, whole_regions=True)
    east = [o for o in merged if o.region == "us-east-1"]
    assert len(east) == 1 and east[0].spot == 7.0 and east[0].as_of == NEW
    assert east[0].reserved_1y == 13.9 and east[0].interruption_bucket == ">20%"
    assert [o.region for o in merged if o.region != "us-east-1"] == ["us-west-2"]


def test_import_overlays_row_by_row():
    snapshot = Catalog.of([row("us-east-1", "use1-az1", "p4d.24xlarge", 21.96, OLD),
                           row("us-east-1", "use1-az1", "p3.16xlarge", 24.48, OLD)])
    imported = Catalog.of([row("us-east-1", "use1-az1", "p4d.24xlarge", 20.0, NEW)])
    merged = overlay(snapshot, imported)
    assert sorted((o.instance_type, o.on_demand) for o in merged) == [("p3.16xlarge", 24.48),
                                                                       ("p4d.24xlarge", 20.0)]
