"""Compile danlu's embedded price and carbon snapshot from the shared research data.

Run by hand from the repository root when the shared data changes::

    python tools/build_embedded_catalog.py [--shared ../shared]

It reads the SkyPilot catalog excerpts (``catalog/skypilot``), the AWS Spot Advisor
snapshot (``traces/aws-spot-advisor``) and the carbon factors (``carbon/``) and writes

* ``pricing/embedded/offerings.csv``: every GPU offering of AWS, GCP and Azure in their
  main regions (:data:`MAIN_REGIONS`) with on-demand and spot prices, the published
  1y/3y commitment prices of :data:`COMMITMENTS` where the commitment's on-demand
  reference still equals the catalog's (``COMMITMENT_TOLERANCE``), and the Spot Advisor
  bucket of each AWS row;
* ``pricing/embedded/carbon.csv``: grid intensity per (cloud, region).

Every row names its sources.  It prints what it wrote and every commitment it refused.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import os
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # a script run by hand from a checkout, not an installed entry point

from pricing.catalog import Offering  # noqa: E402
from danlu import atomic_file  # noqa: E402
from pricing.embedded_catalog import COMMITMENT_TOLERANCE, write_offerings_csv  # noqa: E402
from pricing.risk import read_spot_advisor  # noqa: E402
from pricing.skypilot import scan_skypilot_catalog  # noqa: E402

MAIN_REGIONS: dict[str, tuple[str, ...]] = {
    "aws": ("us-east-1", "us-east-2", "us-west-2", "eu-west-1", "eu-central-1", "ap-northeast-1"),
    "gcp": ("us-central1", "us-east1", "us-east4", "us-west1", "europe-west1", "europe-west4",
            "asia-northeast1", "asia-southeast1"),
    # The Azure excerpt holds US regions only; all of them are kept.
    "azure": ("eastus", "eastus2", "westus", "westus2", "westus3", "centralus", "northcentralus",
              "southcentralus"),
}

@dataclasses.dataclass(frozen=True)
class Commitment:
    """A published 1y/3y commitment price for one instance type in one region (USD/h)."""

    cloud: str
    region: str
    instance_type: str
    on_demand_ref: float
    reserved_1y: float | None
    reserved_3y: float | None
    source: str


_P3_RI = "RI: ec2instances.info 94e1f00 2017-11-12 (p3 standard no-upfront, effective hourly) [V]"
_AWS_2026 = "RI: third-party note citing instances.vantage.sh 2026-09-17 (RI class/payment not stated) [M]"
_GCP_CUD = "CUD: Cyclenerd pricing.yml 0166a59 2025-03-06 (resource-based, whole machine) [V]"
_GCP_CUD_DERIVED = "CUD: derived from Cyclenerd pricing.yml 0166a59 2025-03-06 per-resource CUDs [V, derived]"

COMMITMENTS: tuple[Commitment, ...] = (
    # research/reserved-prices.md §1.2
    Commitment("aws", "us-east-1", "p3.2xlarge", 3.06, 2.088, 1.332, _P3_RI),
    Commitment("aws", "us-east-1", "p3.8xlarge", 12.24, 8.354, 5.327, _P3_RI),
    Commitment("aws", "us-east-1", "p3.16xlarge", 24.48, 16.708, 10.655, _P3_RI),
    # research/reserved-prices.md §1.3
    Commitment("aws", "us-east-1", "g5.xlarge", 1.006, 0.634, 0.435, _AWS_2026),
    Commitment("aws", "us-east-1", "g5.12xlarge", 5.672, 3.573, 2.450, _AWS_2026),
    Commitment("aws", "us-east-1", "g6.xlarge", 0.8048, 0.524, 0.369, _AWS_2026),
    Commitment("aws", "us-east-1", "g6e.xlarge", 1.861, 1.172, 0.804, _AWS_2026),
    Commitment("aws", "us-east-1", "p4d.24xlarge", 21.957642, 13.921, 9.374, _AWS_2026),
    Commitment("aws", "us-east-1", "p5.48xlarge", 55.04, None, 23.777, _AWS_2026),
    # research/reserved-prices.md §3.2
    Commitment("gcp", "us-central1", "a2-highgpu-1g", 3.673385, 2.31420704, 1.285708326, _GCP_CUD),
    Commitment("gcp", "us-central1", "a2-highgpu-8g", 29.38708, 18.51365632, 10.285666608, _GCP_CUD),
    Commitment("gcp", "us-central1", "a2-megagpu-16g", 55.739504, 35.11547264, 19.509199968, _GCP_CUD),
    Commitment("gcp", "us-central1", "a3-highgpu-2g", 22.1224999756, 15.3459180, 9.7160953, _GCP_CUD),
    Commitment("gcp", "us-central1", "a3-highgpu-8g", 88.4899999, 61.3836721, 38.8643811, _GCP_CUD_DERIVED),
    Commitment("gcp", "us-central1", "g2-standard-4", 0.706832255, 0.445304318, 0.318074503, _GCP_CUD_DERIVED),
    Commitment("gcp", "us-central1", "g2-standard-24", 2.000832574, 1.260524508, 0.900374590, _GCP_CUD),
    Commitment("gcp", "us-central1", "g2-standard-32", 1.734376367, 1.092657094, 0.780469275, _GCP_CUD),
)

SPOT_ADVISOR_SOURCE = "interruption bucket: AWS Spot Advisor snapshot ~2025-06-28 (spotinfo 5eedf20)"

CCF_SOURCE = "Cloud Carbon Footprint b7a049c {file} ({basis})"
GOOGLE_SOURCE = "Google region-carbon-info 2024 (49f3f26), grid gCO2eq/kWh / 1000"


def build_offerings(shared: Path) -> tuple[list[Offering], list[str]]:
    """The embedded offerings and a log of the commitment decisions."""
    scan = scan_skypilot_catalog(shared / "catalog" / "skypilot")
    buckets = read_spot_advisor(shared / "traces" / "aws-spot-advisor" / "spot-advisor-data.json")
    commitments = {(c.cloud, c.region, c.instance_type): c for c in COMMITMENTS}
    used: set[tuple[str, str, str]] = set()
    log: dict[str, None] = {}  # ordered and without the per-zone repeats
    rows: list[Offering] = []
    for o in scan.offerings:
        if o.region not in MAIN_REGIONS.get(o.cloud, ()):
            continue
        sources = [o.source]
        commitment = commitments.get((o.cloud, o.region, o.instance_type))
        if commitment is not None:
            if o.on_demand is not None and abs(o.on_demand / commitment.on_demand_ref - 1) <= COMMITMENT_TOLERANCE:
                o = dataclasses.replace(o, reserved_1y=commitment.reserved_1y, reserved_3y=commitment.reserved_3y)
                sources.append(commitment.source)
                used.add((o.cloud, o.region, o.instance_type))
            else:
                log[f"refused {commitment.instance_type} {o.cloud} {o.region}: commitment quoted against on-demand "
                    f"{commitment.on_demand_ref}, catalog has {o.on_demand}"] = None
        bucket = buckets.get((o.region, o.instance_type)) if o.cloud == "aws" else None
        if bucket is not None:
            o = dataclasses.replace(o, interruption_bucket=bucket)
            sources.append(SPOT_ADVISOR_SOURCE)
        rows.append(dataclasses.replace(o, source="; ".join(sources)))
    log.update((f"applied {c.instance_type} {c.cloud} {c.region}", None) for c in COMMITMENTS
               if (c.cloud, c.region, c.instance_type) in used)
    rows.sort(key=lambda o: (o.cloud, o.region, o.instance_type, o.zone or ""))
    return rows, list(log)


def build_carbon(shared: Path) -> list[tuple[str, str, str, str]]:
    """(cloud, region, kg CO2e/kWh, source) rows: Google's 2024 figures for GCP, CCF otherwise."""
    rows: dict[tuple[str, str], tuple[str, str, str, str]] = {}
    with (shared / "carbon" / "ccf-region-emission-factors.csv").open(newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            if r["region"] == "Unknown":
                continue  # CCF's cloud-wide average; an unknown region stays unknown here
            basis = _us_basis(r["kgco2e_per_kwh"]) or "carbonfootprint.com/EEA country factor"
            if r["cloud"] == "gcp":
                basis = "Google region data as embedded in CCF"
            source = CCF_SOURCE.format(file=Path(r["source_file"]).name, basis=basis)
            rows[(r["cloud"], r["region"].lower())] = (r["cloud"], r["region"].lower(), r["kgco2e_per_kwh"], source)
    google = shared / "carbon" / "gcp-region-carbon-info" / "2024.csv"
    with google.open(newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            kg = float(r["Grid carbon intensity (gCO2eq / kWh)"]) / 1000
            rows[("gcp", r["Google Cloud Region"])] = ("gcp", r["Google Cloud Region"], f"{kg:.5f}", GOOGLE_SOURCE)
    return sorted(rows.values())


_EGRID = {"0.379069": "SERC", "0.410608": "RFC", "0.322167": "WECC", "0.426254": "MRO", "0.373231": "TRE"}


def _us_basis(value: str) -> str | None:
    region = _EGRID.get(value)
    return f"EPA eGRID2020 NERC {region}" if region else None


def write_carbon_csv(path: Path, rows: list[tuple[str, str, str, str]]) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(("cloud", "region", "kgco2e_per_kwh", "source"))
    writer.writerows(rows)
    atomic_file.write_text(path, buffer.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path,
                        default=Path(os.environ.get("DANLU_SHARED", REPO / ".." / "shared")),
                        help="the shared research data directory (default: $DANLU_SHARED or ../shared)")
    parser.add_argument("--out", type=Path, default=REPO / "pricing" / "embedded",
                        help="where offerings.csv and carbon.csv go (default: pricing/embedded)")
    args = parser.parse_args(argv)
    if not (args.shared / "catalog" / "skypilot").is_dir():
        parser.error(f"{args.shared}: no catalog/skypilot inside; pass --shared DIR")
    offerings, log = build_offerings(args.shared)
    write_offerings_csv(args.out / "offerings.csv", offerings)
    carbon = build_carbon(args.shared)
    write_carbon_csv(args.out / "carbon.csv", carbon)
    for line in log:
        print(line)
    per_cloud = Counter(o.cloud for o in offerings)
    for cloud in sorted(per_cloud):
        mine = [o for o in offerings if o.cloud == cloud]
        print(f"{cloud}: {per_cloud[cloud]} rows, {len({o.region for o in mine})} regions, "
              f"{len({o.instance_type for o in mine})} instance types, GPUs {', '.join(sorted({o.gpu for o in mine}))}")
    print(f"wrote {len(offerings)} offerings to {args.out / 'offerings.csv'}")
    print(f"wrote {len(carbon)} carbon rows to {args.out / 'carbon.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
