"""Fixtures for the pricing tests: the shared SkyPilot catalog and small synthetic ones."""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from pricing.skypilot import LAYOUTS, SkyPilotImport, scan_skypilot_catalog
from tests.conftest import shared_path


@pytest.fixture(scope="session")
def shared_scan() -> SkyPilotImport:
    """The whole ../shared/catalog/skypilot directory, read once per test session."""
    return scan_skypilot_catalog(shared_path("catalog", "skypilot"))


WriteCatalog = Callable[..., Path]


@pytest.fixture
def write_catalog(tmp_path: Path) -> WriteCatalog:
    """Write ``<tmp>/catalog/<cloud>/vms.csv`` from dict rows; returns the catalog root.

    ``header`` defaults to the cloud's SkyPilot v8 layout; missing cells are empty.
    """
    root = tmp_path / "catalog"

    def write(cloud: str, rows: Sequence[dict[str, str]], header: Sequence[str] | None = None,
              name: str = "vms.csv") -> Path:
        columns = list(header or LAYOUTS[cloud])
        folder = root / cloud
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / name).open("w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(columns)
            for row in rows:
                writer.writerow(row.get(c, "") for c in columns)
        return root

    return write
