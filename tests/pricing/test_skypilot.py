"""Reading SkyPilot v8 catalog directories: the real shared excerpts and small synthetic ones."""

from __future__ import annotations

import datetime as dt

import pytest

from pricing.errors import CatalogFormatError
from pricing.skypilot import read_skypilot_catalog, scan_skypilot_catalog

pytestmark = pytest.mark.filterwarnings("error")


def _rows(scan, **match):
    return [o for o in scan.offerings if all(getattr(o, k) == v for k, v in match.items())]


# --- the shared catalog (../shared/catalog/skypilot) -------------------------------------


@pytest.mark.shared
def test_reads_every_cloud_with_its_zone_convention(shared_scan):
    clouds = {o.cloud for o in shared_scan.offerings}
    assert clouds == {"aws", "gcp", "azure", "lambda"}
    aws = _rows(shared_scan, cloud="aws")
    assert all(o.zone and "-az" in o.zone for o in aws)  # AZ ids such as use1-az4
    assert all(o.zone is None for o in shared_scan.offerings if o.cloud in ("azure", "lambda"))
    assert all(o.zone and o.zone.startswith(o.region) for o in _rows(shared_scan, cloud="gcp"))
    keys = [o.key for o in shared_scan.offerings]
    assert len(keys) == len(set(keys))


@pytest.mark.shared
def test_aws_spot_is_per_zone_and_on_demand_per_region(shared_scan):
    p3 = _rows(shared_scan, cloud="aws", region="us-east-1", instance_type="p3.2xlarge")
    assert len(p3) > 1
    assert {o.on_demand for o in p3} == {3.06}
    assert len({o.spot for o in p3 if o.spot is not None}) > 1
    assert p3[0].gpu == "V100" and p3[0].gpus_per_node == 1 and p3[0].gpu_memory_gb == 16.0


@pytest.mark.shared
def test_gcp_bundled_machine_is_host_plus_its_gpus(shared_scan):
    a2 = _rows(shared_scan, cloud="gcp", region="us-central1", instance_type="a2-highgpu-1g")
    assert {o.zone for o in a2} == {"us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"}
    for o in a2:
        assert o.on_demand == pytest.approx(0.73948 + 2.93391)
        assert (o.gpu, o.gpus_per_node, o.gpu_memory_gb, o.vcpus, o.memory_gb) == ("A100", 1, 40.0, 12.0, 85.0)
    g2 = _rows(shared_scan, cloud="gcp", region="us-central1", instance_type="g2-standard-4")
    assert g2 and all(o.on_demand == pytest.approx(0.14679 + 0.56004) for o in g2)
    assert all(o.gpu == "L4" for o in g2)


@pytest.mark.shared
def test_gcp_attached_gpus_get_an_n1_host_and_a_compound_name(shared_scan):
    v100 = _rows(shared_scan, cloud="gcp", zone="us-central1-a", gpu="V100", gpus_per_node=1)
    assert [o.instance_type for o in v100] == ["n1-highmem-8+V100:1"]
    t4x4 = _rows(shared_scan, cloud="gcp", zone="us-central1-a", gpu="T4", gpus_per_node=4)
    assert len(t4x4) == 1
    assert t4x4[0].vcpus >= 48 and t4x4[0].memory_gb >= 4 * 48  # SkyPilot's 48-vCPU minimum for 4x T4


@pytest.mark.shared
def test_quirks_are_fixed_and_unsold_rows_dropped(shared_scan):
    nd = _rows(shared_scan, cloud="azure", instance_type="Standard_ND96isr_H100_v5")
    assert nd and all(o.gpus_per_node == 8 for o in nd)  # the v6 file says 12
    assert all(o.spot is None for o in nd)  # its "spot" repeats on-demand
    assert not _rows(shared_scan, cloud="gcp", instance_type="a4-highgpu-8g")  # priced 0.0
    assert not [o for o in shared_scan.offerings if o.instance_type.startswith("g5g.")]  # arm64
    mega = _rows(shared_scan, cloud="gcp", instance_type="a3-megagpu-8g")
    assert mega and {o.gpu for o in mega} == {"H100"}
    p5e = _rows(shared_scan, cloud="aws", instance_type="p5e.48xlarge")
    assert p5e and all(o.on_demand is None and o.spot for o in p5e)  # capacity-block only, spot priced
    assert shared_scan.skipped["not x86_64 (arm64/mac)"] == 91
    assert shared_scan.skipped["CPU-only"] > 0


@pytest.mark.shared
def test_aws_usable_memory_reads_as_the_marketed_size(shared_scan):
    memory = {(o.gpu, o.gpu_memory_gb) for o in _rows(shared_scan, cloud="aws")}
    assert {("A10G", 24.0), ("L4", 24.0), ("L40S", 48.0), ("B200", 180.0), ("H100", 80.0)} <= memory
    assert ("B300", 268.59) in memory  # not in the marketed table: GpuInfo as reported
    assert len({m for g, m in memory if g in ("A10G", "L4", "L40S")}) == 2


@pytest.mark.shared
def test_lambda_memory_is_per_gpu(shared_scan):
    a100x8 = _rows(shared_scan, cloud="lambda", instance_type="gpu_8x_a100")
    assert a100x8 and all(o.gpu_memory_gb == 40.0 and o.gpus_per_node == 8 for o in a100x8)
    assert all(o.spot is None for o in _rows(shared_scan, cloud="lambda"))


@pytest.mark.shared
def test_known_snapshots_get_their_documented_date_and_source(shared_scan):
    by_cloud = {o.cloud: (o.as_of, o.source) for o in shared_scan.offerings}
    assert by_cloud["aws"] == (dt.date(2025, 7, 3), "skypilot-catalog v8 aws@00148f2")
    assert by_cloud["azure"] == (dt.date(2026, 6, 18), "skypilot-catalog v6 azure@098741e")
    assert by_cloud["gcp"][1] == "skypilot-catalog v8 gcp@006059e"


# --- synthetic catalogs -------------------------------------------------------------------

_GPU_INFO = "{'Gpus': [{'Name': 'A100', 'Count': 8, 'MemoryInfo': {'SizeInMiB': 40960}}], 'TotalGpuMemoryInMiB': 327680}"


def _aws(**cells):
    row = {"InstanceType": "p4d.24xlarge", "AcceleratorName": "A100", "AcceleratorCount": "8.0", "vCPUs": "96",
           "MemoryGiB": "1152", "GpuInfo": _GPU_INFO, "Price": "21.96", "SpotPrice": "9.5", "Region": "us-east-1",
           "AvailabilityZone": "use1-az1", "Arch": "x86_64"}
    row.update(cells)
    return row


def test_columns_are_found_by_name_in_any_order(write_catalog):
    header = ["Region", "SpotPrice", "Price", "GpuInfo", "MemoryGiB", "vCPUs", "AcceleratorCount",
              "AcceleratorName", "InstanceType", "Extra"]
    root = write_catalog("lambda", [{"InstanceType": "gpu_1x_h100", "AcceleratorName": "H100", "AcceleratorCount": "1",
                                     "vCPUs": "26", "MemoryGiB": "200", "Price": "2.49", "Region": "us-east-1",
                                     "GpuInfo": "{'TotalGpuMemoryInMiB': 81920}"}], header=header)
    (o,) = read_skypilot_catalog(root, as_of=dt.date(2026, 1, 2))
    assert (o.cloud, o.instance_type, o.gpu, o.gpus_per_node, o.gpu_memory_gb, o.on_demand, o.spot) == (
        "lambda", "gpu_1x_h100", "H100", 1, 80.0, 2.49, None)
    assert o.as_of == dt.date(2026, 1, 2)


def test_another_cloud_with_an_aws_layout_is_read(write_catalog):
    root = write_catalog("othercloud", [_aws(InstanceType="big.8gpu", AvailabilityZone="")], header=[
        *reversed(("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "GpuInfo",
                   "Price", "SpotPrice", "Region", "AvailabilityZone", "Arch"))])
    (o,) = read_skypilot_catalog(root)
    assert (o.cloud, o.zone, o.gpu_memory_gb, o.as_of) == ("othercloud", None, 40.0, dt.date.today())
    assert "othercloud" in o.source


def test_rows_that_are_not_whole_gpu_x86_offerings_are_skipped_and_counted(write_catalog):
    root = write_catalog("aws", [
        _aws(),
        _aws(InstanceType="m5.large", AcceleratorName="", AcceleratorCount="", GpuInfo=""),
        _aws(InstanceType="g6f.large", AcceleratorName="L4", AcceleratorCount="0.25"),
        _aws(InstanceType="g5g.xlarge", Arch="arm64"),
        _aws(InstanceType="mac2.metal", Arch="arm64_mac"),
        _aws(InstanceType="p5e.48xlarge", Price="", SpotPrice=""),
        _aws(InstanceType="zero.8gpu", Price="0.0", SpotPrice="0"),
        _aws(InstanceType="odd.8gpu", AcceleratorName="Mystery", GpuInfo=""),
    ])
    scan = scan_skypilot_catalog(root)
    assert [o.instance_type for o in scan.offerings] == ["p4d.24xlarge"]
    assert scan.skipped == {"CPU-only": 1, "fractional GPU": 1, "not x86_64 (arm64/mac)": 2, "no price": 2,
                            "GPU memory unknown (Mystery)": 1}


def test_azure_gpu_memory_comes_from_the_name_table_and_count_is_fixed(write_catalog):
    base = {"AcceleratorName": "H100", "vCPUs": "96", "MemoryGiB": "1900", "GpuInfo": "H100",
            "Region": "eastus", "Generation": "V2"}
    root = write_catalog("azure", [
        {**base, "InstanceType": "Standard_ND96isr_H100_v5", "AcceleratorCount": "12", "Price": "98.32",
         "SpotPrice": "98.32"},
        {**base, "InstanceType": "Standard_NC24ads_A100_v4", "AcceleratorName": "A100-80GB", "GpuInfo": "A100-80GB",
         "AcceleratorCount": "1", "Price": "3.673", "SpotPrice": "0.44"},
    ])
    nc, nd = sorted(read_skypilot_catalog(root), key=lambda o: o.instance_type)
    assert (nd.gpus_per_node, nd.gpu_memory_gb, nd.spot) == (8, 80.0, None)
    assert (nc.gpus_per_node, nc.gpu_memory_gb, nc.spot) == (1, 80.0, 0.44)


def _gcp_host(machine, vcpus, mem, price, spot, zone="us-central1-a"):
    return {"InstanceType": machine, "vCPUs": str(vcpus), "MemoryGiB": str(mem), "Region": "us-central1",
            "AvailabilityZone": zone, "Price": str(price), "SpotPrice": str(spot)}


def _gcp_gpu(name, count, mib, price, spot, zone="us-central1-a"):
    return {"AcceleratorName": name, "AcceleratorCount": str(count),
            "GpuInfo": f"{{'Gpus': [{{'MemoryInfo': {{'SizeInMiB': {mib}}}}}]}}", "Region": "us-central1",
            "AvailabilityZone": zone, "Price": str(price), "SpotPrice": str(spot)}


def test_gcp_picks_the_cheapest_n1_host_that_fits_skypilots_rule(write_catalog):
    root = write_catalog("gcp", [
        _gcp_host("n1-standard-8", 8, 30, 0.38, 0.08),      # 30 GiB < 4 x 8 vCPUs
        _gcp_host("n1-highmem-8", 8, 52, 0.47, 0.09),       # fits
        _gcp_host("n1-standard-16", 16, 60, 0.40, 0.07),    # cheaper, but over V100:1's 12-vCPU limit
        _gcp_host("n1-highmem-16", 16, 104, 0.95, 0.19),    # fits V100:2 (16+ vCPUs, 64+ GiB)
        _gcp_host("e2-standard-8", 8, 32, 0.27, 0.05),      # CPU-only family
        _gcp_gpu("V100", 1, 16384, 2.48, 1.0),
        _gcp_gpu("V100", 2, 16384, 4.96, 2.0),
        _gcp_gpu("tpu-v3-8", 1, 0, 8.0, 2.4),
        _gcp_gpu("T4", 1, 16384, 0.35, 0.14, zone="us-central1-b"),  # no host in that zone
    ])
    scan = scan_skypilot_catalog(root)
    by_type = {o.instance_type: o for o in scan.offerings}
    assert set(by_type) == {"n1-highmem-8+V100:1", "n1-highmem-16+V100:2"}
    one = by_type["n1-highmem-8+V100:1"]
    assert (one.on_demand, one.spot, one.vcpus, one.memory_gb, one.gpu_memory_gb) == (2.95, 1.09, 8.0, 52.0, 16.0)
    assert scan.skipped == {"CPU-only": 1, "TPU": 1, "GCP GPU without an n1 host in its zone": 1}


def test_gcp_bundled_types_need_their_gpu_row_and_a_nonzero_price(write_catalog):
    root = write_catalog("gcp", [
        _gcp_host("a2-highgpu-1g", 12, 85, 0.73948, 0.36975),
        _gcp_gpu("A100", 1, 40960, 2.93391, 1.4341),
        _gcp_host("a4-highgpu-8g", 224, 3968, 0.0, 0.0),
        _gcp_gpu("B200", 8, 184320, 0.0, ""),
        _gcp_host("a3-highgpu-8g", 208, 1872, 9.46, 2.89),  # no H100 x8 row in this zone
    ])
    scan = scan_skypilot_catalog(root)
    (a2,) = scan.offerings
    assert a2.instance_type == "a2-highgpu-1g" and a2.on_demand == pytest.approx(3.67339)
    assert a2.spot == pytest.approx(0.36975 + 1.4341)
    assert scan.skipped == {"no price": 1, "GCP machine type without a GPU price row in its zone": 1}


# --- malformed input -----------------------------------------------------------------------


def test_a_bad_number_names_file_line_and_column(write_catalog):
    root = write_catalog("aws", [_aws(), _aws(AvailabilityZone="use1-az2", Price="twenty")])
    with pytest.raises(CatalogFormatError) as err:
        read_skypilot_catalog(root)
    message = str(err.value)
    assert "aws/vms.csv:3:" in message and "'Price'" in message and "'twenty'" in message


def test_a_missing_column_is_reported_on_line_1(write_catalog):
    header = [c for c in ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "GpuInfo",
                          "Price", "Region", "AvailabilityZone", "Arch")]
    root = write_catalog("aws", [_aws()], header=header)
    with pytest.raises(CatalogFormatError, match=r"aws/vms\.csv:1: column 'SpotPrice' is missing"):
        read_skypilot_catalog(root)


def test_a_row_with_the_wrong_number_of_fields_is_reported(write_catalog):
    root = write_catalog("azure", [])
    with (root / "azure" / "vms.csv").open("a", encoding="utf-8") as fh:
        fh.write("Standard_NC6s_v3,V100,1,6,112,V100,3.06,0.33\n")
    with pytest.raises(CatalogFormatError, match=r"azure/vms\.csv:2: 8 fields, but the header has 10"):
        read_skypilot_catalog(root)


def test_an_unknown_layout_and_an_empty_directory_are_errors(write_catalog, tmp_path):
    root = write_catalog("mystery", [{"a": "1"}], header=["a", "b"])
    with pytest.raises(CatalogFormatError, match=r"mystery/vms\.csv:1: header matches no SkyPilot v8 layout"):
        read_skypilot_catalog(root)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CatalogFormatError, match="no <cloud>/vms"):
        read_skypilot_catalog(empty)
    with pytest.raises(CatalogFormatError, match="not a directory"):
        read_skypilot_catalog(tmp_path / "missing")


def test_other_files_in_a_cloud_folder_are_ignored(write_catalog):
    root = write_catalog("aws", [_aws()])
    (root / "aws" / "images.csv").write_text("Tag,Region,OS,OSVersion,ImageId\n", encoding="utf-8")
    scan = scan_skypilot_catalog(root)
    assert [f.name for f in scan.files] == ["vms.csv"] and len(scan.offerings) == 1
