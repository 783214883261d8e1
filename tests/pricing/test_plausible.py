"""Catalogs that lie: rows no cloud could sell, conflicting duplicates, numbers Python misreads, non-files."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from planner.cli import main
from pricing.embedded_catalog import (
    OFFERING_COLUMNS,
    load_catalog_path,
    read_offerings_csv,
)
from pricing.errors import CatalogFormatError
from pricing.plausible import strict_number
from pricing.skypilot import scan_skypilot_catalog
from tests.pricing.test_skypilot import _aws

ROW = "aws,us-east-1,use1-az1,g4dn.xlarge,T4,1,16,4,16,0.526,{spot},,,0.5,,{as_of},test"


def _offerings(tmp_path: Path, *rows: str) -> Path:
    path = tmp_path / "offerings.csv"
    path.write_text(",".join(OFFERING_COLUMNS) + "\n" + "\n".join(rows) + "\n")
    return path


def _row(spot: str = "0.16", as_of: dt.date | None = None, zone: str = "use1-az1") -> str:
    return ROW.format(spot=spot, as_of=(as_of or dt.date.today()).isoformat()).replace("use1-az1", zone)


@pytest.mark.parametrize("text", ["0_1", "inf", "nan", "1e999", "0x10", " 1 2"])
def test_numbers_python_would_misread_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        strict_number(text)


@pytest.mark.parametrize("text, value", [("0.526", 0.526), ("1e-3", 0.001), (".5", 0.5), ("12", 12.0)])
def test_plain_numbers_read_as_written(text: str, value: float) -> None:
    assert strict_number(text) == value


@pytest.mark.parametrize("spot, why", [("1e-12", "spot price"), ("0_1", "is not a finite non-negative number"),
                                       ("99999", "spot price")])
def test_an_offerings_csv_row_no_cloud_sells_is_refused_with_file_and_line(tmp_path, spot, why) -> None:
    path = _offerings(tmp_path, _row(zone="use1-az2"), _row(spot=spot))
    with pytest.raises(CatalogFormatError, match=rf"offerings.csv:3: .*{why}"):
        read_offerings_csv(path)


def test_a_price_dated_in_the_future_is_refused(tmp_path) -> None:
    path = _offerings(tmp_path, _row(as_of=dt.date.today() + dt.timedelta(days=30)))
    with pytest.raises(CatalogFormatError, match=r"offerings.csv:2: as_of .* is in the future"):
        read_offerings_csv(path)
    far = _offerings(tmp_path, _row(as_of=dt.date(9999, 12, 31)))
    with pytest.raises(CatalogFormatError, match="in the future"):
        read_offerings_csv(far)


def test_a_conflicting_duplicate_is_an_error_and_an_identical_one_is_dropped(tmp_path) -> None:
    assert len(read_offerings_csv(_offerings(tmp_path, _row(), _row()))) == 1
    with pytest.raises(CatalogFormatError, match=r"offerings.csv:3: a second row .*line 2.*spot 0.16 vs 0.1"):
        read_offerings_csv(_offerings(tmp_path, _row(), _row(spot="0.1")))


def test_quote_with_a_lying_catalog_exits_2_naming_the_line(tmp_path, capsys) -> None:
    catalog = _offerings(tmp_path, _row(spot="1e-12"))
    job = tmp_path / "job.toml"
    job.write_text('name = "j"\n[workload]\nsteps = 100\n[workload.throughput]\nT4 = 1.0\n')
    assert main(["quote", str(job), "--catalog", str(catalog)]) == 2
    assert "offerings.csv:2" in capsys.readouterr().err


def test_skypilot_rows_no_cloud_sells_are_left_out_with_file_and_line(write_catalog) -> None:
    root = write_catalog("aws", [_aws(), _aws(AvailabilityZone="use1-az2", AcceleratorCount="1e9"),
                                 _aws(AvailabilityZone="use1-az4", SpotPrice="1e-12")])
    scan = scan_skypilot_catalog(root)
    assert [o.zone for o in scan.offerings] == ["use1-az1"]
    assert scan.skipped["implausible"] == 2
    assert scan.quarantined[0].endswith("vms.csv:3: 1000000000 GPUs per node is outside 1-64 (p4d.24xlarge)")
    assert "vms.csv:4: spot price 1e-12" in scan.quarantined[1]


def test_skypilot_conflicting_duplicates_are_an_error(write_catalog) -> None:
    root = write_catalog("aws", [_aws(), _aws(SpotPrice="5.0")])
    with pytest.raises(CatalogFormatError, match=r"vms.csv:3: a second row for aws:us-east-1:use1-az1:p4d.24xlarge "
                                                 r"\(.*vms.csv:2\) with other prices \(spot 9.5 vs 5.0\)"):
        scan_skypilot_catalog(root)


@pytest.mark.parametrize("kind", ["directory", "loop", "device"])
def test_a_vms_csv_that_is_not_a_file_is_an_error_not_a_crash(write_catalog, kind) -> None:
    root = write_catalog("aws", [_aws()])
    bad = root / "gcp" / "vms.csv"
    bad.parent.mkdir()
    if kind == "directory":
        bad.mkdir()
    elif kind == "loop":
        os.symlink(bad, bad)
    else:
        os.symlink("/dev/zero", bad)
    with pytest.raises(CatalogFormatError, match="not a regular file"):
        scan_skypilot_catalog(root)


def test_a_device_given_as_an_offerings_csv_is_an_error(tmp_path) -> None:
    link = tmp_path / "zero.csv"
    os.symlink("/dev/zero", link)
    with pytest.raises(CatalogFormatError, match="not a directory or a .csv file|not a regular file"):
        load_catalog_path(link)
    with pytest.raises(CatalogFormatError, match="not a regular file"):
        read_offerings_csv(link)
