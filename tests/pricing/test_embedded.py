"""The embedded snapshot, the offerings CSV format and catalog-path dispatch."""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib.util
import stat
import sys
from pathlib import Path

import pytest

from pricing.catalog import Offering
from pricing.embedded_catalog import (
    EMBEDDED_OFFERINGS,
    OFFERING_COLUMNS,
    imported_dir,
    load_catalog_path,
    load_embedded_catalog,
    load_local_catalog,
    read_offerings_csv,
    write_offerings_csv,
)
from pricing.errors import CatalogFormatError
from pricing.risk import BUCKET_LABELS
from tests.conftest import REPO, shared_path

OFFERING = Offering(
    cloud="aws", region="us-east-1", zone="use1-az1", instance_type="p4d.24xlarge", gpu="A100", gpus_per_node=8,
    gpu_memory_gb=40.0, vcpus=96.0, memory_gb=1152.0, on_demand=21.957642, spot=9.61, reserved_1y=13.921,
    reserved_3y=None, interruption_rate=None, interruption_bucket="10-15%", as_of=dt.date(2025, 7, 3),
    source="skypilot-catalog v8 aws@00148f2; RI: note, with a comma",
)


def test_embedded_catalog_covers_the_three_clouds_and_gpu_families():
    catalog = load_embedded_catalog()
    assert set(catalog.clouds) == {"aws", "gcp", "azure"}
    assert 300 <= len(catalog) <= 2000
    by_cloud = {c: {o.gpu for o in catalog if o.cloud == c} for c in catalog.clouds}
    assert {"A100", "A100-80GB", "H100", "V100", "T4", "L4", "A10G", "L40S"} <= by_cloud["aws"]
    assert {"A100", "A100-80GB", "H100", "V100", "T4", "L4"} <= by_cloud["gcp"]
    assert {"A100", "A100-80GB", "H100", "V100", "T4"} <= by_cloud["azure"]
    assert {"us-east-1", "us-west-2", "eu-west-1"} <= {o.region for o in catalog if o.cloud == "aws"}
    assert catalog.origin.startswith("embedded snapshot 20")
    assert load_embedded_catalog() is catalog  # cached


def test_every_embedded_row_is_dated_sourced_and_priced():
    today = dt.date.today()
    for o in load_embedded_catalog():
        assert o.source.startswith("skypilot-catalog "), o
        assert dt.date(2017, 1, 1) <= o.as_of <= today, o
        assert o.on_demand is not None or o.spot is not None, o
        assert o.gpus_per_node >= 1 and o.gpu_memory_gb > 0, o
        for reserved in (o.reserved_1y, o.reserved_3y):
            assert reserved is None or (o.on_demand is not None and reserved < o.on_demand), o


def test_commitment_prices_and_buckets_name_their_sources():
    catalog = load_embedded_catalog()
    (p3,) = [o for o in catalog if o.instance_type == "p3.2xlarge" and o.zone == "use1-az1"]
    assert (p3.reserved_1y, p3.reserved_3y) == (2.088, 1.332)
    assert "RI: ec2instances.info" in p3.source and "2017-11-12" in p3.source
    a2 = [o for o in catalog if o.instance_type == "a2-highgpu-1g" and o.region == "us-central1"]
    assert a2 and all(o.reserved_3y == pytest.approx(1.285708326) and "CUD:" in o.source for o in a2)
    # GCP's A3 CUD was quoted against an older, higher on-demand price, so it is not applied
    assert all(o.reserved_1y is None for o in catalog if o.instance_type.startswith("a3-"))
    aws = [o for o in catalog if o.cloud == "aws"]
    assert sum(o.interruption_bucket in BUCKET_LABELS for o in aws) > 0.9 * len(aws)
    assert all("Spot Advisor" in o.source for o in aws if o.interruption_bucket)
    assert all(o.interruption_bucket is None for o in catalog if o.cloud != "aws")


@pytest.mark.shared
def test_committed_snapshot_is_what_the_build_script_produces(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("build_embedded_catalog", REPO / "tools" / "build_embedded_catalog.py")
    build = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, build)  # dataclasses look their module up there
    spec.loader.exec_module(build)
    shared = shared_path()
    assert build.main(["--shared", str(shared), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "offerings.csv").read_bytes() == EMBEDDED_OFFERINGS.read_bytes()
    carbon = EMBEDDED_OFFERINGS.with_name("carbon.csv")
    assert (tmp_path / "carbon.csv").read_bytes() == carbon.read_bytes()
    # derived tables, not copies of the shared files
    for source in shared.glob("**/*.csv"):
        assert source.read_bytes() not in (EMBEDDED_OFFERINGS.read_bytes(), carbon.read_bytes())


def test_offerings_csv_round_trips_and_is_written_atomically(tmp_path):
    target = tmp_path / "sub" / "prices.csv"
    other = dataclasses.replace(OFFERING, zone=None, spot=None, interruption_bucket=None, source="")
    write_offerings_csv(target, [OFFERING, other])
    assert read_offerings_csv(target) == [OFFERING, other]
    assert target.read_text(encoding="utf-8").splitlines()[0] == ",".join(OFFERING_COLUMNS)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert [p.name for p in target.parent.iterdir()] == ["prices.csv"]  # no temp file left behind


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("aws,us-east-1,,p4d.24xlarge,A100,eight,40,96,1152,21.9,,,,,,2025-07-03,x", r":2: column 'gpus_per_node': 'eight'"),
        ("aws,us-east-1,,p4d.24xlarge,A100,8,40,96,1152,-1,,,,,,2025-07-03,x", r":2: column 'on_demand': '-1'"),
        ("aws,us-east-1,,p4d.24xlarge,A100,8,40,96,1152,21.9,,,,,,July,x", r":2: column 'as_of': 'July' is not an ISO date"),
        ("aws,,,p4d.24xlarge,A100,8,40,96,1152,21.9,,,,,,2025-07-03,x", r":2: column 'region' is empty"),
        ("aws,us-east-1,,p4d.24xlarge", r":2: 4 fields, but the header has 17"),
    ],
)
def test_offerings_csv_errors_name_line_and_column(tmp_path, line, expected):
    path = tmp_path / "bad.csv"
    path.write_text(",".join(OFFERING_COLUMNS) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(CatalogFormatError, match=r"bad\.csv" + expected):
        read_offerings_csv(path)


def test_offerings_csv_header_must_match(tmp_path):
    path = tmp_path / "wrong.csv"
    path.write_text("cloud,region\naws,us-east-1\n", encoding="utf-8")
    with pytest.raises(CatalogFormatError, match=r"wrong\.csv:1: header must be exactly cloud,region,zone"):
        read_offerings_csv(path)


def test_catalog_path_dispatches_on_directory_or_csv(tmp_path, write_catalog):
    csv_path = write_offerings_csv(tmp_path / "mine.csv", [OFFERING])
    assert list(load_catalog_path(csv_path)) == [OFFERING]
    root = write_catalog("lambda", [{"InstanceType": "gpu_1x_a10", "AcceleratorName": "A10", "AcceleratorCount": "1",
                                     "vCPUs": "30", "MemoryGiB": "200", "Price": "0.75", "Region": "us-east-1",
                                     "GpuInfo": "{'TotalGpuMemoryInMiB': 24576}"}])
    assert [o.instance_type for o in load_catalog_path(root)] == ["gpu_1x_a10"]
    with pytest.raises(CatalogFormatError, match="no such file or directory"):
        load_catalog_path(tmp_path / "nope")
    (tmp_path / "prices.json").write_text("{}", encoding="utf-8")
    with pytest.raises(CatalogFormatError, match="not a directory or a .csv file"):
        load_catalog_path(tmp_path / "prices.json")


def test_imported_rows_are_merged_over_the_snapshot(tmp_path, monkeypatch):
    monkeypatch.setenv("DANLU_DATA_DIR", str(tmp_path))
    assert imported_dir() == tmp_path / "imported"
    embedded = load_embedded_catalog()
    (old,) = [o for o in embedded if o.instance_type == "p4d.24xlarge" and o.zone == "use1-az1"]
    newer = dataclasses.replace(old, spot=1.23, as_of=old.as_of + dt.timedelta(days=30), source="test import")
    write_offerings_csv(imported_dir() / "test.csv", [newer])
    merged = load_local_catalog()
    assert len(merged) == len(embedded)
    assert [o for o in merged if o.key == old.key] == [newer]


def test_an_import_keeps_commitments_and_buckets_it_cannot_know(tmp_path, monkeypatch):
    monkeypatch.setenv("DANLU_DATA_DIR", str(tmp_path))
    (old,) = [o for o in load_embedded_catalog() if o.instance_type == "p3.2xlarge" and o.zone == "use1-az1"]
    plain = dataclasses.replace(old, reserved_1y=None, reserved_3y=None, interruption_bucket=None, spot=0.5,
                                as_of=old.as_of + dt.timedelta(days=1), source="skypilot-catalog v8 aws (v8/aws)")
    repriced = dataclasses.replace(plain, zone="use1-az2", on_demand=old.on_demand * 1.10)
    (other,) = [o for o in load_embedded_catalog() if o.instance_type == "p3.2xlarge" and o.zone == "use1-az2"]
    write_offerings_csv(imported_dir() / "skypilot-v8.csv", [plain, repriced])
    merged = {o.key: o for o in load_local_catalog()}
    kept = merged[plain.key]
    assert (kept.spot, kept.reserved_1y, kept.reserved_3y, kept.interruption_bucket) == (0.5, 2.088, 1.332, ">20%")
    assert kept.source.startswith("skypilot-catalog v8 aws (v8/aws); RI: ec2instances.info")
    assert "interruption bucket: AWS Spot Advisor" in kept.source
    moved = merged[repriced.key]  # list price changed: the old RI no longer applies, the bucket still does
    assert other.reserved_1y == 2.088
    assert (moved.reserved_1y, moved.reserved_3y, moved.interruption_bucket) == (None, None, ">20%")


def test_local_catalog_without_imports_is_the_snapshot(tmp_path, monkeypatch):
    monkeypatch.setenv("DANLU_DATA_DIR", str(tmp_path / "fresh"))
    assert load_local_catalog() is load_embedded_catalog()
    assert not Path(tmp_path / "fresh").exists()
