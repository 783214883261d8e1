"""Read a SkyPilot price catalog directory (schema v8) into a :class:`~pricing.catalog.Catalog`.

SkyPilot keeps one catalog per cloud at ``~/.sky/catalogs/v8/<cloud>/vms.csv``; the
hosted copies live in ``skypilot-org/skypilot-catalog``.  This module reads a directory
laid out the same way (``<cloud>/vms*.csv``; other files such as ``images.csv`` are
ignored) and turns it into one :class:`~pricing.catalog.Offering` per
(cloud, region, zone, instance type):

* **aws** rows are per availability zone (an AZ *id* such as ``use1-az4``): spot is
  priced per AZ, on-demand is equal across a region.
* **azure** and **lambda** rows have no zone (``zone=None``).
* **gcp** prices host VMs and GPUs in separate rows, and the node price is their sum,
  the way GCP bills: the bundled machine types (``a2-*``, ``a3-*``, ``a4-*``,
  ``g2-*``) cost host + their fixed GPUs in that zone; attachable GPUs (T4, V100,
  P100, P4) are priced on the cheapest ``n1`` host that SkyPilot itself would pick
  (see :data:`GCP_N1_HOST_VCPUS`) and get the instance type ``"<host>+<GPU>:<count>"``,
  e.g. ``"n1-highmem-8+V100:1"``.
* Any other cloud directory is read when its header matches the aws, azure or lambda
  layout (columns are found by name; their order differs per cloud).

Rows that are not a whole-GPU x86 offering with a price are skipped and counted by
reason (CPU-only, fractional GPU, arm64/mac, TPU, no price, unknown GPU memory, ...).
A price of ``0.0`` counts as "not sold" (GCP lists ``a4-highgpu-8g`` at 0.0).
Malformed files raise :class:`~pricing.errors.CatalogFormatError` naming the file,
line and column.

Example::

    catalog = read_skypilot_catalog(Path("~/.sky/catalogs/v8").expanduser())
    catalog.filter(gpus=["H100"], clouds=["aws"])
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pricing.catalog import Catalog, Offering
from pricing.errors import CatalogFormatError
from pricing.plausible import conflict, implausible, strict_number


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A known revision of one cloud's catalog file and the date its prices stand for."""

    cloud: str
    schema: str
    commit: str
    as_of: dt.date
    evidence: str

    @property
    def source(self) -> str:
        return f"skypilot-catalog {self.schema} {self.cloud}@{self.commit[:7]}"


KNOWN_SNAPSHOTS: tuple[Snapshot, ...] = (
    Snapshot(
        "aws", "v8", "00148f2af3672e2229b4f7bf8157d5a3f36e3c35", dt.date(2025, 7, 3),
        "earliest possible date: it carries the June-2025 P4/P5 on-demand cut (p5.48xlarge 55.04), "
        "first published in AWS price-list version 20250703204906 (research/reserved-prices.md §1.1)",
    ),
    Snapshot(
        "gcp", "v8", "006059e0f18acb1341e22a27751e9f80df6ba92f", dt.date(2025, 7, 3),
        "copied together with the aws file, both refreshed by the same 7-hourly catalog workflow "
        "(catalog/skypilot/SOURCE.md); no GCP-specific date evidence, so the aws lower bound is used",
    ),
    Snapshot(
        "lambda", "v8", "0f4070387edc953d7004cff197940e1918a1d6aa", dt.date(2025, 7, 3),
        "copied together with the aws file (catalog/skypilot/SOURCE.md); the aws lower bound is used",
    ),
    Snapshot(
        "azure", "v6", "098741e70562f65d7af1cceb81e33b284f742604", dt.date(2026, 6, 18),
        "its pay-as-you-go prices equal the Azure Retail Prices API data generated 2026-06-18 for the "
        "five sizes compared (research/reserved-prices.md §2.1), so they were current on that date",
    ),
)
"""Revisions of the hosted catalog whose dates are documented.  A directory whose
``SOURCE.md`` names one of these commits gets that date and source label."""

GPU_MEMORY_GB: dict[str, float] = {
    "V100": 16.0, "V100-32GB": 32.0, "T4": 16.0, "A10": 24.0, "A10G": 24.0, "L4": 24.0, "L40S": 48.0,
    "A100": 40.0, "A100-80GB": 80.0, "H100": 80.0, "H200": 141.0, "B200": 180.0,
}
"""Marketed memory per GPU (GB) from research/gpu-specs.md §1.

Used for catalogs whose ``GpuInfo`` is only a name (Azure), and to undo AWS's habit of
reporting *usable* memory: a ``GpuInfo`` size up to 10% below the marketed one is read
as the marketed one (A10G and L4 22,888 MiB -> 24, L40S 45,776 MiB -> 48, B200
183,359 MiB -> 180), so that a job's ``min_gpu_memory_gb`` compares the same number on
every cloud.  Azure's NC H100 v5 carries the 94 GB H100 NVL, which that table does not
list; 80 GB is the conservative H100 figure."""

_USABLE_MEMORY_SLACK = 0.10

GPU_ALIASES = {"H100-MEGA": "H100"}
"""SkyPilot names that denote the same chip as a canonical name.  ``H100-MEGA`` is GCP's
``a3-megagpu-8g`` H100 with faster networking; throughput is keyed by chip."""

COUNT_FIXES = {("azure", "Standard_ND96isr_H100_v5"): 8}
"""GPU counts the catalog gets wrong: the v6 Azure file lists 12 for the ND H100 v5,
whose VM has 8x H100 (research/gpu-specs.md §2)."""

GCP_BUNDLED: dict[str, tuple[str, int]] = {
    **{f"a2-highgpu-{n}g": ("A100", n) for n in (1, 2, 4, 8)},
    "a2-megagpu-16g": ("A100", 16),
    **{f"a2-ultragpu-{n}g": ("A100-80GB", n) for n in (1, 2, 4, 8)},
    **{f"a3-highgpu-{n}g": ("H100", n) for n in (1, 2, 4, 8)},
    "a3-megagpu-8g": ("H100-MEGA", 8),
    "a3-ultragpu-8g": ("H200", 8),
    "a4-highgpu-8g": ("B200", 8),
    **{f"g2-standard-{v}": ("L4", 1) for v in (4, 8, 12, 16, 32)},
    "g2-standard-24": ("L4", 2),
    "g2-standard-48": ("L4", 4),
    "g2-standard-96": ("L4", 8),
}
"""GCP machine types with fixed GPUs, as SkyPilot maps them
(``sky/catalog/gcp_catalog.py::_ACC_INSTANCE_TYPE_DICTS``).  Others (e.g. the edge and
``-nolssd`` variants) are skipped because SkyPilot cannot launch them either."""

GCP_N1_HOST_VCPUS: dict[str, dict[int, int]] = {
    "V100": {1: 8, 2: 16, 4: 32, 8: 64},
    "T4": {1: 4, 2: 8, 4: 48},
    "P100": {1: 8, 2: 16, 4: 32, 8: 64},
    "DEFAULT": {1: 8, 2: 16, 4: 32, 8: 64, 16: 128},
}
"""Minimum host vCPUs per attached GPU count (SkyPilot's ``_NUM_ACC_TO_NUM_CPU``).  The
host is the cheapest ``n1-standard/highmem/highcpu`` VM in the zone with at least that
many vCPUs, at least 4 GiB RAM per vCPU, and within GCP's per-GPU-count limits
(:data:`GCP_N1_HOST_LIMITS`)."""

GCP_N1_HOST_LIMITS: dict[str, dict[int, tuple[int, int]]] = {
    "V100": {1: (12, 78), 2: (24, 156), 4: (48, 312), 8: (96, 624)},
    "T4": {1: (48, 312), 2: (48, 312), 4: (96, 624)},
    "P4": {1: (24, 156), 2: (48, 312), 4: (96, 624)},
    "P100": {1: (16, 104), 2: (32, 208), 4: (96, 624)},
}
"""GCP's maximum (vCPUs, GiB) of an n1 host per attached GPU count
(SkyPilot's ``_NUM_ACC_TO_MAX_CPU_AND_MEMORY``, from cloud.google.com/compute/docs/gpus)."""

_N1_FAMILIES = ("n1-standard-", "n1-highmem-", "n1-highcpu-")
_GCP_HOST_GiB_PER_VCPU = 4

_AWS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "GpuInfo",
        "Price", "SpotPrice", "Region", "AvailabilityZone", "Arch")
_GCP = ("InstanceType", "vCPUs", "MemoryGiB", "AcceleratorName", "AcceleratorCount", "GpuInfo",
        "Region", "AvailabilityZone", "Price", "SpotPrice")
_AZURE = ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "GpuInfo",
          "Price", "SpotPrice", "Region", "Generation")
_LAMBDA = ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Price",
           "Region", "GpuInfo", "SpotPrice")
LAYOUTS: dict[str, tuple[str, ...]] = {"aws": _AWS, "gcp": _GCP, "azure": _AZURE, "lambda": _LAMBDA}
"""The v8 header of each cloud SkyPilot ships (Azure v6 = v8).  Other clouds are read when
their header contains one of the aws, azure or lambda column sets."""

_SIZE_MIB = re.compile(r"'SizeInMiB':\s*([0-9.]+)")
_TOTAL_MIB = re.compile(r"'TotalGpuMemoryInMiB':\s*([0-9.]+)")
_X86_ARCHES = {"", "x86_64"}


@dataclass(slots=True)
class SkyPilotImport:
    """What reading a catalog directory produced: the offerings, and why rows were skipped."""

    root: Path
    offerings: list[Offering] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    files: list[Path] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    """``file:line: why`` for each row left out because no cloud could sell it."""

    def catalog(self) -> Catalog:
        return Catalog.of(self.offerings, origin=f"skypilot catalog {self.root}")


def read_skypilot_catalog(path: str | Path, *, as_of: dt.date | None = None) -> Catalog:
    """Read a SkyPilot catalog directory (``<cloud>/vms*.csv``) into a :class:`Catalog`.

    ``as_of`` dates every row; by default a cloud whose commit is named in the
    directory's ``SOURCE.md`` and listed in :data:`KNOWN_SNAPSHOTS` gets that
    snapshot's documented date, and any other cloud gets today's date (the hosted
    catalog is refreshed every 7 hours, so a fresh download is about as old as its import).
    """
    return scan_skypilot_catalog(path, as_of=as_of).catalog()


def scan_skypilot_catalog(path: str | Path, *, as_of: dt.date | None = None) -> SkyPilotImport:
    """Like :func:`read_skypilot_catalog`, but also report the files read and rows skipped."""
    root = Path(path)
    if not root.is_dir():
        raise CatalogFormatError(
            f"{root}: not a directory; a SkyPilot catalog is a directory with one folder per cloud "
            "(e.g. ~/.sky/catalogs/v8 with aws/vms.csv, gcp/vms.csv, ...)"
        )
    result = SkyPilotImport(root)
    snapshots = _documented_snapshots(root)
    seen: dict[tuple[str, str, str | None, str], tuple[Offering, str]] = {}
    today = dt.date.today()
    for cloud_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        files = sorted(cloud_dir.glob("vms*.csv"))
        if not files:
            continue
        cloud = cloud_dir.name.lower()
        snap = snapshots.get(cloud)
        stamp = _Stamp(
            as_of or (snap.as_of if snap else dt.date.today()),
            snap.source if snap else f"skypilot-catalog {cloud} ({root.name}/{cloud_dir.name})",
        )
        result.files.extend(files)
        if cloud == "gcp":
            offerings = _read_gcp(files, stamp, result.skipped)
        else:
            offerings = (o for f in files for o in _read_flat(cloud, f, stamp, result.skipped))
        for offering, where in offerings:
            why = implausible(offering, today=today)
            if why is not None:
                result.quarantined.append(f"{where}: {why}")
                result.skipped["implausible"] += 1
                continue
            first = seen.get(offering.key)
            if first is not None:
                differ = conflict(first[0], offering)
                if differ is not None:
                    raise CatalogFormatError(
                        f"{where}: a second row for {':'.join(filter(None, offering.key))} ({first[1]}) with "
                        f"other prices ({differ}); delete the wrong one"
                    )
                result.skipped["duplicate row"] += 1
                continue
            seen[offering.key] = (offering, where)
            result.offerings.append(offering)
    if not result.files:
        raise CatalogFormatError(
            f"{root}: no <cloud>/vms*.csv files found; point at a SkyPilot catalog directory "
            "such as ~/.sky/catalogs/v8 (folders aws/, gcp/, azure/, lambda/ holding vms.csv)"
        )
    return result


@dataclass(frozen=True, slots=True)
class _Stamp:
    as_of: dt.date
    source: str


def _documented_snapshots(root: Path) -> dict[str, Snapshot]:
    notes = root / "SOURCE.md"
    if not notes.is_file():
        return {}
    text = notes.read_text(encoding="utf-8", errors="replace")
    return {s.cloud: s for s in KNOWN_SNAPSHOTS if s.commit in text}


class _Rows:
    """The data rows of one CSV file as dicts of the wanted columns, with line numbers."""

    def __init__(self, file: Path, cloud: str):
        self.file = file
        self.cloud = cloud
        self.layout: tuple[str, ...] = ()
        self.line = 1

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def __iter__(self) -> Iterator[dict[str, str]]:
        if not self.file.is_file():  # a directory, a device such as /dev/zero, a dangling link or a loop
            raise CatalogFormatError(f"{self.file}: not a regular file; a catalog's vms*.csv must be CSV files")
        try:
            with self.file.open(newline="", encoding="utf-8-sig") as fh:
                reader = csv.reader(fh)
                header = next(reader, None)
                if header is None:
                    raise CatalogFormatError(f"{self.file}:1: empty file; expected a SkyPilot header line")
                header = [c.strip() for c in header]
                self.layout = self._layout(set(header))
                index = [(name, header.index(name)) for name in self.layout]
                width = len(header)
                for row in reader:
                    self.line = reader.line_num
                    if not row:
                        continue
                    if len(row) != width:
                        raise CatalogFormatError(
                            f"{self.file}:{self.line}: {len(row)} fields, but the header has {width}; "
                            "quote cells that contain commas (GpuInfo) or fix the row"
                        )
                    yield {name: row[i].strip() for name, i in index}
        except UnicodeDecodeError as exc:
            raise CatalogFormatError(f"{self.file}: not UTF-8 text ({exc.reason}); re-save it as UTF-8") from None
        except csv.Error as exc:
            raise CatalogFormatError(f"{self.file}:{self.line}: {exc}; fix the CSV quoting") from None
        except OSError as exc:
            raise CatalogFormatError(f"{self.file}: cannot read it ({exc.strerror})") from None

    def _layout(self, columns: set[str]) -> tuple[str, ...]:
        if self.cloud in LAYOUTS:
            wanted = LAYOUTS[self.cloud]
            missing = [c for c in wanted if c not in columns]
            if missing:
                raise CatalogFormatError(
                    f"{self.file}:1: column {missing[0]!r} is missing from the {self.cloud} header; "
                    f"a SkyPilot v8 {self.cloud} catalog has columns {','.join(wanted)}"
                )
            return wanted
        for name in ("aws", "azure", "lambda"):
            if set(LAYOUTS[name]) <= columns:
                return LAYOUTS[name]
        raise CatalogFormatError(
            f"{self.file}:1: header matches no SkyPilot v8 layout; a cloud folder other than "
            f"aws/gcp/azure/lambda needs the columns of one of them, e.g. {','.join(_LAMBDA)}"
        )

    def number(self, rec: dict[str, str], column: str) -> float | None:
        text = rec[column]
        if not text:
            return None
        try:
            value = strict_number(text)
        except ValueError:
            raise CatalogFormatError(
                f"{self.file}:{self.line}: column {column!r}: {text!r} is not a number; fix the cell or delete the row"
            ) from None
        if not 0 <= value < math.inf:  # also rejects NaN
            raise CatalogFormatError(
                f"{self.file}:{self.line}: column {column!r}: {text!r} must be a finite non-negative number"
            )
        return value

    def price(self, rec: dict[str, str], column: str) -> float | None:
        value = self.number(rec, column)
        return value if value else None  # 0.0 means "not sold" (e.g. GCP a4-highgpu-8g)

    def required(self, rec: dict[str, str], column: str) -> float:
        value = self.number(rec, column)
        if value is None:
            raise CatalogFormatError(f"{self.file}:{self.line}: column {column!r} is empty; it needs a number")
        return value

    def text(self, rec: dict[str, str], column: str) -> str:
        value = rec[column]
        if not value:
            raise CatalogFormatError(f"{self.file}:{self.line}: column {column!r} is empty; it needs a value")
        return value


def _gpu_count(rows: _Rows, rec: dict[str, str]) -> int | None:
    """Whole GPUs per node, or ``None`` for a fractional share (g6f, Azure NV*_A10 slices)."""
    count = rows.required(rec, "AcceleratorCount")
    if count < 1 or count != int(count):
        return None
    return COUNT_FIXES.get((rows.cloud, rec["InstanceType"]), int(count))


def _gpu_memory_gb(cloud: str, gpu: str, gpu_info: str) -> float | None:
    """Per-GPU memory from ``GpuInfo`` (MiB), snapped to the marketed size (:data:`GPU_MEMORY_GB`)."""
    marketed = GPU_MEMORY_GB.get(gpu)
    match = _SIZE_MIB.search(gpu_info)
    if match is None and cloud == "lambda":
        match = _TOTAL_MIB.search(gpu_info)  # Lambda's total is per GPU
    if match is None:
        return marketed
    return marketed_memory_gb(gpu, round(float(match.group(1)) / 1024, 2))


def marketed_memory_gb(gpu: str, reported_gb: float) -> float:
    """``reported_gb`` (usable memory, as clouds report it) as the marketed size when within 10% of it."""
    marketed = GPU_MEMORY_GB.get(gpu)
    if marketed is not None and marketed * (1 - _USABLE_MEMORY_SLACK) <= reported_gb <= marketed:
        return marketed
    return reported_gb


def _canonical(gpu: str) -> str:
    return GPU_ALIASES.get(gpu, gpu)


def _read_flat(cloud: str, file: Path, stamp: _Stamp, skipped: Counter[str]) -> Iterator[tuple[Offering, str]]:
    """Offerings of one aws/azure/lambda-shaped file: one row, one offering."""
    rows = _Rows(file, cloud)
    for rec in rows:
        gpu = rec["AcceleratorName"]
        if not gpu:
            skipped["CPU-only"] += 1
            continue
        if rec.get("Arch", "") not in _X86_ARCHES:
            skipped["not x86_64 (arm64/mac)"] += 1
            continue
        count = _gpu_count(rows, rec)
        if count is None:
            skipped["fractional GPU"] += 1
            continue
        on_demand, spot = rows.price(rec, "Price"), rows.price(rec, "SpotPrice")
        if rows.layout == _AZURE and spot is not None and spot == on_demand:
            spot = None  # Azure H100 rows repeat the on-demand price as "spot": no real spot quote
        if on_demand is None and spot is None:
            skipped["no price"] += 1
            continue
        memory = _gpu_memory_gb(cloud, gpu, rec["GpuInfo"])
        if memory is None:
            skipped[f"GPU memory unknown ({gpu})"] += 1
            continue
        yield (Offering(
            cloud=cloud,
            region=rows.text(rec, "Region"),
            zone=rec.get("AvailabilityZone") or None,
            instance_type=rows.text(rec, "InstanceType"),
            gpu=_canonical(gpu),
            gpus_per_node=count,
            gpu_memory_gb=memory,
            vcpus=rows.required(rec, "vCPUs"),
            memory_gb=rows.required(rec, "MemoryGiB"),
            on_demand=on_demand,
            spot=spot,
            as_of=stamp.as_of,
            source=stamp.source,
        ), rows.where)


@dataclass(frozen=True, slots=True)
class _GcpPart:
    """A GCP host VM or GPU row: what it adds to a node and its prices."""

    region: str
    price: float | None
    spot: float | None
    vcpus: float = 0.0
    memory_gb: float = 0.0
    gpu_memory_gb: float = 0.0
    where: str = ""


def _read_gcp(files: list[Path], stamp: _Stamp, skipped: Counter[str]) -> list[tuple[Offering, str]]:
    """GCP offerings: host VM rows plus GPU rows of the same zone, combined as GCP bills them."""
    hosts: dict[tuple[str, str], _GcpPart] = {}  # (zone, machine type)
    gpus: dict[tuple[str, str, int], _GcpPart] = {}  # (zone, accelerator, count)
    for file in files:
        rows = _Rows(file, "gcp")
        for rec in rows:
            zone = rows.text(rec, "AvailabilityZone")
            part_prices = (rows.price(rec, "Price"), rows.price(rec, "SpotPrice"))
            if rec["InstanceType"]:
                if rec["InstanceType"] in GCP_BUNDLED or rec["InstanceType"].startswith(_N1_FAMILIES):
                    hosts[(zone, rec["InstanceType"])] = _GcpPart(
                        rows.text(rec, "Region"), *part_prices,
                        vcpus=rows.required(rec, "vCPUs"), memory_gb=rows.required(rec, "MemoryGiB"),
                        where=rows.where,
                    )
                else:
                    skipped["CPU-only"] += 1
                continue
            name = rows.text(rec, "AcceleratorName")
            if name.lower().startswith("tpu"):
                skipped["TPU"] += 1
                continue
            count = _gpu_count(rows, rec)
            memory = _gpu_memory_gb("gcp", name, rec["GpuInfo"])
            if count is None or memory is None:
                skipped["fractional GPU" if count is None else f"GPU memory unknown ({name})"] += 1
                continue
            gpus[(zone, name, count)] = _GcpPart(rows.text(rec, "Region"), *part_prices, gpu_memory_gb=memory,
                                                 where=rows.where)

    offerings: list[tuple[Offering, str]] = []
    n1_hosts: dict[str, list[tuple[str, _GcpPart]]] = {}
    for (zone, machine), host in hosts.items():
        if machine.startswith(_N1_FAMILIES):
            n1_hosts.setdefault(zone, []).append((machine, host))
            continue
        name, count = GCP_BUNDLED[machine]
        gpu = gpus.get((zone, name, count))
        if gpu is None:
            skipped["GCP machine type without a GPU price row in its zone"] += 1
            continue
        offering = _gcp_offering(machine, zone, name, count, host, gpu, stamp)
        if offering is None:
            skipped["no price"] += 1
        else:
            offerings.append((offering, f"{host.where} + {gpu.where}"))

    bundled_gpus = {name for name, _ in GCP_BUNDLED.values()}
    for (zone, name, count), gpu in gpus.items():
        if name in bundled_gpus:
            continue  # priced above, on its machine type
        picked = _cheapest_n1_host(name, count, n1_hosts.get(zone, ()))
        if picked is None:
            skipped["GCP GPU without an n1 host in its zone"] += 1
            continue
        machine, host = picked
        offering = _gcp_offering(f"{machine}+{_canonical(name)}:{count}", zone, name, count, host, gpu, stamp)
        if offering is None:
            skipped["no price"] += 1
        else:
            offerings.append((offering, f"{host.where} + {gpu.where}"))
    return offerings


def _cheapest_n1_host(
    gpu: str, count: int, candidates: Sequence[tuple[str, _GcpPart]]
) -> tuple[str, _GcpPart] | None:
    min_vcpus = GCP_N1_HOST_VCPUS.get(gpu, GCP_N1_HOST_VCPUS["DEFAULT"]).get(count)
    if min_vcpus is None:
        return None
    max_vcpus, max_memory = GCP_N1_HOST_LIMITS.get(gpu, {}).get(count, (float("inf"), float("inf")))
    fitting = [
        (host.price, machine, host)
        for machine, host in candidates
        if host.price is not None
        and min_vcpus <= host.vcpus <= max_vcpus
        and min_vcpus * _GCP_HOST_GiB_PER_VCPU <= host.memory_gb <= max_memory
    ]
    if not fitting:
        return None
    _, machine, host = min(fitting, key=lambda t: (t[0], t[1]))
    return machine, host


def _gcp_offering(
    instance_type: str, zone: str, gpu: str, count: int, host: _GcpPart, gpus: _GcpPart, stamp: _Stamp
) -> Offering | None:
    on_demand = _sum(host.price, gpus.price)
    spot = _sum(host.spot, gpus.spot)
    if on_demand is None and spot is None:
        return None
    return Offering(
        cloud="gcp",
        region=host.region,
        zone=zone,
        instance_type=instance_type,
        gpu=_canonical(gpu),
        gpus_per_node=count,
        gpu_memory_gb=gpus.gpu_memory_gb,
        vcpus=host.vcpus,
        memory_gb=host.memory_gb,
        on_demand=on_demand,
        spot=spot,
        as_of=stamp.as_of,
        source=stamp.source,
    )


def _sum(host: float | None, gpus: float | None) -> float | None:
    if host is None or gpus is None:
        return None
    return round(host + gpus, 6)
