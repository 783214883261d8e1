"""A checkpoint directory belongs to one run: its owner record, claimed once.

Two runs that share a checkpoint directory (the same relative ``checkpoint_dir`` started
from one folder, say) would load and overwrite each other's checkpoints: a fresh run would
"resume" from another job's step. So the first run to use a directory writes
``danlu-owner.json`` into it, created exclusively (``O_EXCL`` on disk, ``mode="xb"`` on
an object store that supports it): of two runs started at the same moment exactly one
wins. Every later run is refused with the owner's name; the owner itself (a ``--resume``)
passes.

A directory that already holds checkpoints but no owner record (made by hand, or by a
version before this one) is claimed by the first run, which then resumes from those
checkpoints, as before (its first launch says "from step N").
"""

from __future__ import annotations

import json
import posixpath
import time
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, ValidationError

from runtime.errors import RuntimeFailure

__all__ = ["OWNER_FILE", "CheckpointDirTaken", "Claim", "claim"]

OWNER_FILE = "danlu-owner.json"
_CREDENTIALS = (" from this machine (the cloud SDK's credentials: AWS_PROFILE or `aws configure`, "
                "`gcloud auth application-default login`, `az login`; see docs/providers.md)")


class CheckpointDirTaken(RuntimeFailure):
    """The checkpoint directory belongs to another run."""


class _Owner(BaseModel):
    model_config = ConfigDict(extra="ignore")

    run_dir: str
    job: str = ""
    claimed_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Claim:
    """The outcome of :func:`claim`: ``new`` when this call wrote the record."""

    record: str
    new: bool


def claim(checkpoint_dir: str, *, run_dir: str, job: str) -> Claim:
    """Make ``run_dir``'s run the owner of ``checkpoint_dir``, or refuse.

    Raises:
        CheckpointDirTaken: another run owns it (the message names that run and the fixes).
    """
    import fsspec.core

    fs, root = fsspec.core.url_to_fs(checkpoint_dir)
    record = posixpath.join(root, OWNER_FILE)
    shown = f"{checkpoint_dir.rstrip('/')}/{OWNER_FILE}"
    payload = json.dumps({"run_dir": run_dir, "job": job, "claimed_at": time.time()}, indent=2).encode()
    try:
        fs.makedirs(root, exist_ok=True)
        try:
            with fs.open(record, "xb") as out:
                out.write(payload)
            return Claim(shown, new=True)
        except FileExistsError:
            pass
    except Exception as exc:  # noqa: BLE001 -- each object store's SDK has its own (NoCredentialsError, ...)
        raise CheckpointDirTaken(
            f"{checkpoint_dir}: cannot use it as the checkpoint directory ({type(exc).__name__}: {exc}). To fix: "
            f"make it writable{_CREDENTIALS if '://' in checkpoint_dir else ''}, or set another "
            "[run].checkpoint_dir."
        ) from None
    owner = _read(fs, record, shown)
    if owner.run_dir != run_dir:
        raise CheckpointDirTaken(
            f"{checkpoint_dir}: this checkpoint directory belongs to run {owner.run_dir}"
            f"{f' (job {owner.job})' if owner.job else ''}; sharing it would load and overwrite that run's "
            f"checkpoints. To fix: set another [run].checkpoint_dir, continue that run with `planner run --resume "
            f"{owner.run_dir}`, or delete {shown} if this run is meant to continue from its checkpoints."
        )
    return Claim(shown, new=False)


def _read(fs, record: str, shown: str) -> _Owner:
    try:
        with fs.open(record, "rb") as f:
            return _Owner.model_validate_json(f.read())
    except (OSError, ValidationError, ValueError) as exc:
        raise CheckpointDirTaken(
            f"{shown}: not a readable owner record ({type(exc).__name__}). To fix: delete it if no other run uses "
            "this checkpoint directory, or set another [run].checkpoint_dir."
        ) from None
