"""`planner prices show` and `planner prices import` through the real CLI entry point."""

from __future__ import annotations

import csv
import datetime as dt
import json
from pathlib import Path

import pytest

from planner.cli import main
from pricing.embedded_catalog import OFFERING_COLUMNS, read_offerings_csv
from tests.conftest import shared_path


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """No user imports or cached prices leak in; a wide terminal so names are not clipped."""
    monkeypatch.setenv("DANLU_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("COLUMNS", "200")
    return tmp_path / "data"


def _json(capsys, *argv):
    assert main(["prices", "show", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def _lambda_catalog(root: Path) -> Path:
    folder = root / "lambda"
    folder.mkdir(parents=True)
    with (folder / "vms.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Price",
                         "Region", "GpuInfo", "SpotPrice"])
        writer.writerow(["gpu_8x_h100_sxm5", "H100", "8.0", "208", "1800", "23.92", "us-east-1",
                         "{'Gpus': [{'MemoryInfo': {'SizeInMiB': 81920}}], 'TotalGpuMemoryInMiB': 81920}", ""])
        writer.writerow(["gpu_1x_h100_pcie", "H100", "1.0", "26", "200", "2.49", "us-west-1",
                         "{'TotalGpuMemoryInMiB': 81920}", ""])
        writer.writerow(["cpu_4x_general", "", "", "4", "16", "0.2", "us-east-1", "", ""])
    return root


def test_show_prints_a_table_cheapest_gpu_hour_first(capsys):
    assert main(["prices", "show", "--gpu", "V100", "--cloud", "aws", "--region", "us-east-1", "--limit", "4"]) == 0
    out = capsys.readouterr().out
    assert "embedded snapshot" in out
    for header in ("where", "instance type", "on-demand", "spot", "1y", "3y", "$/GPU-h", "spot risk"):
        assert header in out
    assert "aws:us-east-1/use1-az" in out
    assert "V100×1" in out or "V100×4" in out or "V100×8" in out
    assert "3.060" in out  # p3 on-demand per GPU in us-east-1
    assert "more rows; use --limit 0" in out


def test_show_at_80_columns_keeps_every_pool_name_whole():
    from rich.console import Console

    console = Console(width=80, record=True)
    from planner.commands.prices import price_table
    from pricing.sources import resolve_catalog

    catalog = resolve_catalog(None)
    console.print(price_table(list(catalog)[:300], None, title=catalog.origin, width=80))
    out = console.export_text()
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" not in out
    for o in list(catalog)[:300]:
        assert f"{o.cloud}:{o.location}" in out and o.instance_type in out
    assert "on-demand" in out and "spot" in out and "$/GPU-h" in out


def test_show_json_is_a_list_of_offerings_sorted_by_price_per_gpu(capsys):
    rows = _json(capsys, "--gpu", "A100", "--gpu", "H100", "--cloud", "gcp", "--region", "us-*")
    assert rows and all(list(r) == list(OFFERING_COLUMNS) for r in rows)
    assert {r["gpu"] for r in rows} == {"A100", "H100"}
    assert all(r["cloud"] == "gcp" and r["region"].startswith("us-") for r in rows)
    assert all(dt.date.fromisoformat(r["as_of"]) for r in rows)
    per_gpu = [r["on_demand"] / r["gpus_per_node"] for r in rows if r["on_demand"] is not None]
    assert per_gpu == sorted(per_gpu)


def test_show_purchase_keeps_only_rows_sold_that_way(capsys):
    rows = _json(capsys, "--purchase", "reserved_3y")
    assert rows and all(r["reserved_3y"] is not None for r in rows)
    assert {r["cloud"] for r in rows} == {"aws", "gcp"}
    spot = _json(capsys, "--purchase", "spot", "--limit", "5")
    assert len(spot) == 5
    per_gpu = [r["spot"] / r["gpus_per_node"] for r in spot]
    assert per_gpu == sorted(per_gpu)


def test_show_reads_an_explicit_catalog(capsys, tmp_path):
    root = _lambda_catalog(tmp_path / "sky")
    rows = _json(capsys, "--catalog", str(root))
    assert [r["instance_type"] for r in rows] == ["gpu_1x_h100_pcie", "gpu_8x_h100_sxm5"]  # 2.49 < 23.92 / 8
    assert main(["prices", "show", "--catalog", str(tmp_path / "missing")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_show_lists_unpriced_rows_last(capsys, tmp_path):
    header = ",".join(OFFERING_COLUMNS)
    (tmp_path / "mine.csv").write_text(
        f"{header}\n"
        "aws,us-east-1,,x.big,H100,8,80,96,1024,,,,,,,2026-01-01,hand-made\n"
        "aws,us-east-1,,x.small,H100,1,80,12,128,4.5,,,,,,2026-01-01,hand-made\n", encoding="utf-8")
    assert main(["prices", "show", "--catalog", str(tmp_path / "mine.csv")]) == 0
    out = capsys.readouterr().out
    assert out.index("x.small") < out.index("x.big")
    assert "4.500" in out


def test_show_reports_no_match(capsys):
    # Both names exist, but no cloud sells that GPU in that cloud.
    assert main(["prices", "show", "--cloud", "azure", "--gpu", "A10G"]) == 0
    assert "No offerings match" in capsys.readouterr().out


@pytest.mark.parametrize("flag, name", [("--cloud", "foo"), ("--gpu", "NoSuchGPU")])
def test_show_refuses_a_name_the_catalog_does_not_have(capsys, flag, name):
    assert main(["prices", "show", flag, name]) == 2
    err = capsys.readouterr().err
    assert f"{flag} {name}: not in the catalog" in err and "known:" in err


def test_import_writes_an_offerings_csv_that_show_merges(capsys, tmp_path, isolated):
    root = _lambda_catalog(tmp_path / "v8")
    assert main(["prices", "import", "--format", "skypilot", str(root), "--as-of", "2026-11-01"]) == 0
    out = capsys.readouterr().out
    target = isolated / "imported" / "skypilot-v8.csv"
    assert "Imported 2 offerings" in out and "lambda" in out and "H100" in out and "CPU-only 1" in out
    assert str(target) in out.replace("\n", "")
    imported = read_offerings_csv(target)
    assert {o.as_of for o in imported} == {dt.date(2026, 11, 1)}
    rows = _json(capsys, "--cloud", "lambda")
    assert [r["instance_type"] for r in rows] == ["gpu_1x_h100_pcie", "gpu_8x_h100_sxm5"]


def test_import_into_a_chosen_directory(capsys, tmp_path):
    root = _lambda_catalog(tmp_path / "cat")
    assert main(["prices", "import", str(root), "--into", str(tmp_path / "out")]) == 0
    assert [o.gpu for o in read_offerings_csv(tmp_path / "out" / "skypilot-cat.csv")] == ["H100", "H100"]


@pytest.mark.shared
def test_import_the_shared_skypilot_catalog(capsys, isolated):
    assert main(["prices", "import", str(shared_path("catalog", "skypilot"))]) == 0
    out = capsys.readouterr().out
    for cloud in ("aws", "gcp", "azure", "lambda"):
        assert cloud in out
    offerings = read_offerings_csv(isolated / "imported" / "skypilot-skypilot.csv")
    assert {o.cloud for o in offerings} == {"aws", "gcp", "azure", "lambda"}
    # the same prices re-imported keep the snapshot's commitment prices
    assert {r["instance_type"] for r in _json(capsys, "--purchase", "reserved_1y", "--cloud", "aws")} >= {"p3.2xlarge"}


def test_import_errors_exit_2_with_a_message(capsys, tmp_path):
    assert main(["prices", "import", str(tmp_path / "nowhere")]) == 2
    assert "not a directory" in capsys.readouterr().err
    cpu_only = tmp_path / "cpu"
    (cpu_only / "aws").mkdir(parents=True)
    (cpu_only / "aws" / "vms.csv").write_text(
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,"
        "AvailabilityZone,Arch\nm5.large,,,2,8,,0.096,0.04,us-east-1,use1-az1,x86_64\n", encoding="utf-8")
    assert main(["prices", "import", str(cpu_only)]) == 2
    assert "no GPU offerings found" in capsys.readouterr().err


def test_prices_without_an_action_prints_help(capsys):
    assert main(["prices"]) == 2
    out = capsys.readouterr().out
    assert "show" in out and "import" in out
