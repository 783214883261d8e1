"""Data gravity: what a pool pays to reach the job's data and its checkpoint.

Three transfers, each priced by :mod:`pricing.egress` (source cloud's $/GB) and timed
at the job's ``data.transfer_gbps``:

* **staging** (``data.read = "once"``): the dataset is copied once into every region a
  plan trains in, before its nodes start -- wall time, no node-hours, paid once per
  region however many phases run there;
* **streaming** (``"every_epoch"``): every epoch reads the dataset from where it lives,
  so egress is paid per unit of work done away from it (its time is taken as hidden by
  the training it feeds);
* **checkpoint loads**: a phase that resumes from a checkpoint in another region or
  cloud (every phase after the first; the first too in a re-plan) pays ``checkpoint_gb``
  of egress and waits for it on running nodes; on spot, so does every restart, and every
  checkpoint a spot pool writes to a store elsewhere leaves the pool's cloud (egress too).

Without ``[data]`` and without a known checkpoint store nothing is charged.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.job import JobSpec
from pricing.egress import (
    DEFAULT_TRANSFER_GBPS,
    Site,
    table_for,
    transfer_hours,
    usd_per_gb,
)


@dataclass(frozen=True, slots=True)
class Transfers:
    """The job's data and checkpoint, and where they are; ``resume``: a checkpoint exists now."""

    data_site: Site | None = None
    data_gb: float = 0.0  # GB read from data_site over the whole job
    streamed: bool = False
    checkpoint_site: Site | None = None
    checkpoint_gb: float = 0.0
    resume: bool = False
    gbps: float = DEFAULT_TRANSFER_GBPS

    @property
    def active(self) -> bool:
        return (self.data_site is not None and self.data_gb > 0) or (
            self.checkpoint_site is not None and self.checkpoint_gb > 0)

    def stage(self, site: Site) -> tuple[float, float]:
        """(USD, hours) of copying the dataset to ``site`` once (0 when it is streamed or already there)."""
        if self.streamed or self.data_site is None or site == self.data_site or self.data_gb <= 0:
            return 0.0, 0.0
        return self.data_gb * usd_per_gb(self.data_site, site), transfer_hours(self.data_gb, self.gbps)

    def stream_usd_per_gb_total(self, site: Site) -> float:
        """USD of streaming the whole job's reads to ``site`` (scaled by the share of work done there)."""
        if not self.streamed or self.data_site is None:
            return 0.0
        return self.data_gb * usd_per_gb(self.data_site, site)

    def load(self, site: Site) -> tuple[float, float]:
        """(USD, hours) of loading the checkpoint at ``site`` from its store (0 in the same region)."""
        if self.checkpoint_site is None or self.checkpoint_gb <= 0 or site == self.checkpoint_site:
            return 0.0, 0.0
        return (self.checkpoint_gb * usd_per_gb(self.checkpoint_site, site),
                transfer_hours(self.checkpoint_gb, self.gbps))

    def write_usd(self, site: Site) -> float:
        """USD of writing one checkpoint from ``site`` to its store (the writer's cloud bills the egress)."""
        if self.checkpoint_site is None or self.checkpoint_gb <= 0:
            return 0.0
        return self.checkpoint_gb * usd_per_gb(site, self.checkpoint_site)

    def sources(self) -> list[str]:
        """The egress tables the charges come from, dated, for the quote."""
        sites = [s for s in (self.data_site, self.checkpoint_site) if s is not None]
        out = []
        for cloud in sorted({s.cloud for s in sites}):
            t = table_for(cloud)
            page = "default table, no published one" if t.cloud == "default" else t.source.split(" ", 1)[0]
            out.append(f"{cloud}: ${t.internet_usd_per_gb}/GB to another cloud, ${t.inter_region_usd_per_gb}/GB "
                       f"to a region on the same continent, ${t.inter_continent_usd_per_gb}/GB across continents "
                       f"({page}, as of {t.as_of})")
        return out


def transfers_for(
    job: JobSpec,
    *,
    data_location: Site | None = None,
    checkpoint_location: Site | None = None,
    resume: bool = False,
) -> Transfers:
    """The job's transfers; ``data_location``/``checkpoint_location`` replace what the job file says."""
    data = job.data
    gbps = data.transfer_gbps if data is not None else DEFAULT_TRANSFER_GBPS
    return Transfers(
        data_site=data_location or (data.site if data is not None else None),
        data_gb=data.gb_moved if data is not None else 0.0,
        streamed=data is not None and data.read == "every_epoch",
        checkpoint_site=checkpoint_location or job.run.checkpoint_site,
        checkpoint_gb=job.workload.checkpoint_gb,
        resume=resume,
        gbps=gbps,
    )
