"""``work/meter.json``: the run's spend figures, from the controller to the training session.

The controller knows the money (the ledger, the forecast, the pool); the session knows the
step. At every heartbeat of a run with ``[tracking]`` the controller replaces this small
file (atomically) in its run directory's ``work/``, the workers' ``DANLU_RUN_DIR`` on the
local provider. On a cloud the provider puts it in the launch's stage folder beside
``control.json`` (:mod:`runtime.providers.cloud`) and each node's agent mirrors it into the
node's own run directory (:mod:`runtime.providers.node_agent`). Either way the session only
reads a local file and logs what it says at the step it is at::

    {"t": 1796040000.0, "spent_usd": 0.0123, "burn_usd_per_hour": 0.18, "forecast_usd": 0.062,
     "budget_usd": 5.0, "preemptions": 1, "replans": 1, "lost_steps": 0, "launch": "l-2",
     "pool": "1x n1-standard-4-t4 spot gcp:us-central1/us-central1-a", "purchase": "spot",
     "cloud": "gcp", "region": "us-central1", "instance_type": "n1-standard-4-t4"}
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from danlu import atomic_file

__all__ = ["METER_FILE", "Meter", "MeterReader", "write_meter"]

METER_FILE = "meter.json"


@dataclass(frozen=True, slots=True)
class Meter:
    t: float
    spent_usd: float
    burn_usd_per_hour: float
    forecast_usd: float | None
    budget_usd: float | None
    preemptions: int
    replans: int
    lost_steps: int
    launch: str
    pool: str
    purchase: str
    cloud: str
    region: str
    instance_type: str

    def metrics(self) -> dict[str, float]:
        """The figures as tracker metrics (``danlu/...``), beside the user's own."""
        out = {
            "danlu/spend_usd": self.spent_usd,
            "danlu/spend_rate_usd_per_hour": self.burn_usd_per_hour,
            "danlu/preemptions": float(self.preemptions),
            "danlu/replans": float(self.replans),
            "danlu/lost_steps": float(self.lost_steps),
        }
        if self.forecast_usd is not None:
            out["danlu/forecast_usd"] = self.forecast_usd
            if self.budget_usd:
                out["danlu/forecast_budget_fraction"] = self.forecast_usd / self.budget_usd
        return out

    def tags(self) -> dict[str, str]:
        """Where the run is now, as tracker tags (they change on a re-plan)."""
        return {"danlu.pool": self.pool, "danlu.purchase": self.purchase, "danlu.cloud": self.cloud,
                "danlu.region": self.region, "danlu.instance_type": self.instance_type, "danlu.launch": self.launch}


def write_meter(work_dir: str | os.PathLike[str], meter: Meter) -> None:
    atomic_file.write_text(Path(work_dir) / METER_FILE, json.dumps(asdict(meter)) + "\n", mode=0o600)


class MeterReader:
    """Reads ``meter.json`` again only when it changed (a stat per call, not a parse)."""

    def __init__(self, work_dir: str | os.PathLike[str]):
        self.path = Path(work_dir) / METER_FILE
        self._stamp: tuple[int, int] | None = None
        self._meter: Meter | None = None

    def read(self) -> Meter | None:
        """The latest figures; None before the controller wrote any (or on a node that has none)."""
        try:
            st = self.path.stat()
        except OSError:
            return self._meter
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self._meter = _parse(json.loads(self.path.read_text(encoding="utf-8")))
            except (OSError, ValueError, TypeError):
                pass  # replaced atomically, so a bad file is not ours: keep the last good figures
        return self._meter


def _parse(data: dict[str, Any]) -> Meter:
    return Meter(**{f.name: data[f.name] for f in fields(Meter)})
