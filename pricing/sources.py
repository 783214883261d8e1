"""Which prices a quote uses: an explicit catalog, or the freshest of the embedded
snapshot, imported catalogs and the live-price cache (each row keeps its own date)."""

from __future__ import annotations

from pathlib import Path

from pricing.catalog import Catalog
from pricing.embedded_catalog import load_catalog_path, load_embedded_catalog, load_local_catalog, overlay


def resolve_catalog(path: str | Path | None = None, *, use_cache: bool = True) -> Catalog:
    """``path`` when given; else the embedded snapshot, overlaid by imports and the cache."""
    if path is not None:
        return load_catalog_path(path)
    if not use_cache:
        return load_embedded_catalog()
    from pricing.cache import load_cached_catalog  # SQLite: only when the cache is read

    catalog = load_local_catalog()
    cached = load_cached_catalog()
    if cached is not None and len(cached):
        catalog = overlay(catalog, cached, whole_regions=True)
    return catalog
